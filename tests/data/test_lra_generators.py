"""LRA generators for ListOps and Pathfinder (data/lra/listops.py, data/lra/pathfinder.py; issue 10).

The checks recompute everything from the written files with code of their own (a reference
ListOps evaluator built on numpy's median, the release's left-nested rendering, a flood fill on
the Pathfinder generator's contour mask) rather than trusting the generator's bookkeeping.
"""
import os
import re
import shutil
from collections import deque

import numpy as np
import pytest
import torch

from data.lra import listops as lo
from data.lra import pathfinder as pf

# ---------------------------------------------------------------- ListOps

OPS = {"[MIN", "[MAX", "[MED", "[SM"}


def parse(source):
    """Release source -> nested (op, [children]) / int, checking parentheses balance."""
    toks = source.split()
    assert toks.count("(") == toks.count(")"), "unbalanced parentheses"
    toks = [t for t in toks if t not in "()"]
    pos = 0

    def node():
        nonlocal pos
        t = toks[pos]
        pos += 1
        if t.isdigit():
            return int(t)
        assert t in OPS, t
        children = []
        while toks[pos] != "]":
            children.append(node())
        pos += 1
        return (t, children)

    tree = node()
    assert pos == len(toks), "trailing tokens"
    return tree


def reference_value(tree):
    if isinstance(tree, int):
        return tree
    op, children = tree
    vals = [reference_value(c) for c in children]
    return {"[MIN": min, "[MAX": max, "[MED": lambda v: int(np.median(v)),
            "[SM": lambda v: int(np.sum(v)) % 10}[op](vals)


def render(tree):
    """The upstream left-nested pairs: (op, v0) -> ((op, v0), v1) -> ... -> (..., ']')."""
    def s(t):
        if isinstance(t, tuple) and len(t) == 2 and not isinstance(t[1], list):
            return "( " + s(t[0]) + " " + s(t[1]) + " )"
        return str(t)

    def pairs(t):
        if isinstance(t, int):
            return t
        op, children = t
        p = (op, pairs(children[0]))
        for c in children[1:]:
            p = (p, pairs(c))
        return (p, "]")
    return s(pairs(tree))


def stats(tree, depth=1):
    """(max operator nesting depth, [arities])."""
    if isinstance(tree, int):
        return 0, []
    op, children = tree
    d, ar = depth, [len(children)]
    for c in children:
        cd, car = stats(c, depth + 1)
        d, ar = max(d, cd), ar + car
    return d, ar


SIZES = dict(num_train=60, num_val=20, num_test=20)


@pytest.fixture(scope="module")
def listops_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("lra"))
    lo.ensure(d, seed=0, workers=1, **SIZES)
    return d


def read_rows(lra_dir, split):
    with open(lo.path(lra_dir, split), "rb") as f:
        raw = f.read()
    lines = raw.split(b"\r\n")
    assert lines[0] == b"Source\tTarget" and lines[-1] == b""
    return [tuple(line.decode().split("\t")) for line in lines[1:-1]]


def test_listops_evaluator_hand_examples():
    assert lo.evaluate("( ( ( [MAX 2 ) 9 ) ] )") == 9
    assert lo.evaluate("[MED 1 2 3 4 ]") == 2  # floor of 2.5
    assert lo.evaluate("[MED 9 8 ]") == 8
    assert lo.evaluate("[MED 3 1 2 ]") == 2
    assert lo.evaluate("[SM 9 9 5 ]") == 3
    assert lo.evaluate("[MIN 3 [MAX 1 0 X 5 ]") == 1
    assert lo.evaluate("[SM [MED 0 9 ] [MIN 7 8 ] ]") == 1  # 4 + 7 = 11
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = [int(x) for x in rng.integers(0, 10, size=rng.integers(1, 11))]
        assert lo.apply(lo.MED, v) == int(np.median(v))
    for bad in ("[MAX 1 2", "[MAX 1 2 ] ]", "3 4", "[FIRST 1 2 ]", "[MAX 1 12 ]"):
        with pytest.raises(ValueError):
            lo.evaluate(bad)


def test_listops_files_follow_the_spec(listops_dir):
    seen = set()
    for split, n in zip(lo.SPLITS, SIZES.values()):
        rows = read_rows(listops_dir, split)
        assert len(rows) == n
        for src, tgt in rows:
            tree = parse(src)
            assert render(tree) == src  # exactly the release's parenthesised form
            assert int(tgt) == reference_value(tree) == lo.evaluate(src)
            toks = lo.tokenize(src)
            assert 500 < len(toks) < 2000
            assert {t for t in toks if t.startswith("[")} <= OPS
            depth, arities = stats(tree)
            assert 1 <= depth <= lo.MAX_DEPTH - 1 and min(arities) >= 2 and max(arities) <= 10
            assert src not in seen  # no duplicates within or across splits
            seen.add(src)
    labels = [int(t) for s in lo.SPLITS for _, t in read_rows(listops_dir, s)]
    assert len(set(labels)) >= 5


def test_listops_length_filter_and_dedup_at_small_bounds():
    """Small bounds make the boundary lengths and duplicates frequent: 3 < length < 5 leaves only
    two-argument operators on digits (4 * 10 * 10 = 400 distinct expressions), 300 are asked for."""
    splits = lo.generate(num_train=200, num_val=50, num_test=50, seed=3, progress=False, min_length=3, max_length=5)
    srcs = [src for s in lo.SPLITS for src, _ in splits[s]]
    assert [len(splits[s]) for s in lo.SPLITS] == [200, 50, 50] and len(set(srcs)) == 300
    assert all(len(lo.tokenize(src)) == 4 for src in srcs)
    splits = lo.generate(num_train=300, num_val=0, num_test=0, seed=3, progress=False, min_length=8, max_length=12)
    lengths = [len(lo.tokenize(src)) for src, _ in splits["train"]]
    assert min(lengths) == 9 and max(lengths) == 11
    for src, tgt in splits["train"]:
        assert tgt == reference_value(parse(src)) and render(parse(src)) == src


def test_listops_deterministic(listops_dir, tmp_path):
    def files(d):
        return [open(lo.path(d, s), "rb").read() for s in lo.SPLITS]
    same, other, two = str(tmp_path / "same"), str(tmp_path / "other"), str(tmp_path / "two")
    lo.ensure(same, seed=0, workers=1, **SIZES)
    lo.ensure(other, seed=1, workers=1, **SIZES)
    lo.main([f"--lra_dir={two}", "--num_train=60", "--num_val=20", "--num_test=20", "--seed=0",
             "--workers=2"])
    assert files(same) == files(listops_dir) == files(two)
    assert all(a != b for a, b in zip(files(other), files(listops_dir)))
    # many small chunks, so that two workers really share the work
    one = lo.generate(num_train=40, num_val=10, num_test=10, seed=2, workers=1, progress=False, chunk=7)
    assert lo.generate(num_train=40, num_val=10, num_test=10, seed=2, workers=2, progress=False, chunk=7) == one
    assert lo.generate(num_train=40, num_val=10, num_test=10, seed=2, workers=1, progress=False) != one


def test_listops_load_round_trip(listops_dir):
    inv = {v: k for k, v in lo.VOCAB.items()}
    assert sorted(lo.VOCAB.values()) == list(range(1, lo.VOCAB_SIZE)) and lo.PAD == 0
    for split, n in zip(lo.SPLITS, SIZES.values()):
        d = lo.load(listops_dir, split, lo.MAX_LEN)
        rows = read_rows(listops_dir, split)
        assert d["tokens"].shape == (n, 2000) and d["tokens"].dtype == np.uint8
        assert d["lengths"].dtype == np.int64 and d["labels"].dtype == np.int64
        assert d["labels"].tolist() == [int(t) for _, t in rows]
        for i, (src, _) in enumerate(rows):
            L = d["lengths"][i]
            assert [inv[t] for t in d["tokens"][i, :L]] == src.replace("]", "X").replace("(", "").replace(")", "").split()
            assert (d["tokens"][i, L:] == 0).all() and (d["tokens"][i, :L] > 0).all()
    short = lo.load(listops_dir, "val", 600)
    full = lo.load(listops_dir, "val", 2000)
    assert short["tokens"].shape == (20, 600)
    assert (short["lengths"] == np.minimum(full["lengths"], 600)).all()
    assert (short["tokens"] == full["tokens"][:, :600]).all()


def test_listops_first_token_rule_baseline(listops_dir, tmp_path):
    """scripts/analysis/listops.py: a hand case, then the generated files, where the rule is
    checked against the first operator and label of every test row."""
    import importlib
    import json
    rule_baseline = importlib.import_module("scripts.analysis.listops")
    train = np.array([[12, 1], [12, 2], [11, 3], [11, 4], [11, 5]])
    r = rule_baseline.first_token_rule(train, np.array([9, 9, 0, 0, 5]),
                                       np.array([[12, 1], [11, 1], [13, 1], [11, 2]]), np.array([9, 5, 0, 0]))
    assert r["rule"] == {11: 0, 12: 9}  # first token 13 is unseen in train: the majority (0, first of the ties)
    assert r["first_token_accuracy"] == 0.75 and r["majority_accuracy"] == 0.5 and r["eval_examples"] == 4
    assert r["prior_loss"] == pytest.approx(-(3 * np.log(0.4) + np.log(0.2)) / 4)  # train frequencies .4 / .4 / .2
    out = tmp_path / "rule.json"
    rule_baseline.main(["--lra_dir", listops_dir, "--split", "test", "--out", str(out)])
    got = json.loads(out.read_text())
    rows = read_rows(listops_dir, "test")
    first_ops = [lo.tokenize(src)[0] for src, _ in rows]
    assert set(got["rule"]) <= set(lo.OPERATORS) and set(first_ops) <= set(lo.OPERATORS)
    hits = [got["rule"].get(op) == int(t) for op, (_, t) in zip(first_ops, rows)]
    assert got["first_token_accuracy"] == pytest.approx(np.mean(hits)) and got["eval_examples"] == len(rows)

    assert 0 <= got["bag_of_tokens_accuracy"] <= 1 and np.isfinite(got["bag_and_first_token_loss"])


def test_listops_linear_probes():
    """scripts/analysis/listops.py's probes: the features of a hand case, then synthetic labels
    that only the bag of tokens carries (token 5 more frequent than token 6) and labels that only
    the first token carries (which of two operators opens the sequence)."""
    import importlib
    rule_baseline = importlib.import_module("scripts.analysis.listops")
    x = rule_baseline.token_features(np.array([[12, 1, 1, 0], [3, 0, 0, 0]]), vocab_size=16, max_len=4, first_token=True)
    assert x.shape == (2, 32) and x.dtype == torch.float64
    assert x[0, 0] == pytest.approx(2 / 3) and x[0, 11] == pytest.approx(1 / 3) and x[0, 15] == 0.75
    assert x[1, 2] == 1 and x[1, 15] == 0.25 and x[0, 16 + 12] == 1 and x[1, 16 + 3] == 1
    rng = np.random.default_rng(0)
    # the opening operators recur in the body, so one of 400 tokens barely moves their counts
    tokens = np.concatenate([rng.choice([11, 12], (800, 1)), rng.integers(1, 13, (800, 399))], 1)
    by_count = ((tokens == 5).sum(1) > (tokens == 6).sum(1)).astype(np.int64)
    by_first = (tokens[:, 0] == 12).astype(np.int64)

    def probe(labels, first_token):
        feats = rule_baseline.token_features(tokens, vocab_size=16, max_len=400, first_token=first_token)
        return rule_baseline.linear_probe(feats[:600], labels[:600], feats[600:], labels[600:], num_classes=2)

    assert probe(by_count, False)["accuracy"] > 0.9
    assert probe(by_first, False)["accuracy"] < 0.65
    assert probe(by_first, True)["accuracy"] == 1.0


@pytest.mark.parametrize("line, what", [
    ("( ( [MAX 1 ) 2 ) ] )\t12", "outside"),
    ("( ( [FOO 1 ) 2 ) ] )\t1", "unknown token"),
    ("( ( [MAX 1 ) 2 ) ] )", "2 tab-separated"),
    ("( ( [MAX 1 ) 2 ) ] )\tx", "must be an integer"),
])
def test_listops_malformed_rows_raise(listops_dir, tmp_path, line, what):
    bad = tmp_path / lo.FOLDER
    bad.mkdir()
    rows = open(lo.path(listops_dir, "val"), newline="").read().split("\r\n")
    rows.insert(3, line)
    (bad / "basic_val.tsv").write_text("\r\n".join(rows), newline="")
    with pytest.raises(ValueError, match=re.escape(str(bad / "basic_val.tsv")) + ", line 4: .*" + what):
        lo.load(str(tmp_path), "val", 2000)
    (bad / "basic_val.tsv").write_text("Src\tTarget\r\n( ( [MAX 1 ) 2 ) ] )\t2\r\n", newline="")
    with pytest.raises(ValueError, match="line 1: expected the header"):
        lo.load(str(tmp_path), "val", 2000)


def test_listops_ensure_keeps_existing_files(listops_dir, tmp_path):
    stamp = [os.path.getmtime(lo.path(listops_dir, s)) for s in lo.SPLITS]
    lo.ensure(listops_dir, seed=0, workers=2, **SIZES)  # workers change no example
    assert stamp == [os.path.getmtime(lo.path(listops_dir, s)) for s in lo.SPLITS]
    part = tmp_path / lo.FOLDER
    part.mkdir()
    shutil.copy(lo.path(listops_dir, "train"), part)
    with pytest.raises(FileNotFoundError, match="basic_val.tsv"):
        lo.ensure(str(tmp_path), workers=1, **SIZES)


# ---------------------------------------------------------------- Pathfinder

def component(mask, start):
    """Pixels 8-connected to ``start`` within ``mask`` (a set of (row, col))."""
    seen, todo = {start}, deque([start])
    while todo:
        y, x = todo.popleft()
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                q = (y + dy, x + dx)
                if 0 <= q[0] < mask.shape[0] and 0 <= q[1] < mask.shape[1] and mask[q] and q not in seen:
                    seen.add(q)
                    todo.append(q)
    return seen


@pytest.mark.parametrize("resolution, difficulty, n", [
    (32, "curv_contour_length_14", 24), (32, "curv_baseline", 12), (32, "curv_contour_length_9", 12),
    (128, "curv_contour_length_14", 2)])
def test_pathfinder_labels_match_contour_connectivity(resolution, difficulty, n):
    labels = []
    cl = pf.DIFFICULTIES[difficulty]
    for i in range(n):
        s = pf.make_sample(np.random.default_rng([7, i]), resolution, cl)
        c, img = s["contours"], s["image"]
        assert c.shape == img.shape == (resolution, resolution) and img.dtype == np.uint8 and img.max() == 255
        a, b = (tuple(int(v) for v in m) for m in s["markers"])
        assert c[a] in (0, 1) and c[b] in (0, 1)  # both markers on target contours
        connected = b in component(c >= 0, a)
        assert connected == bool(s["label"]) == (c[a] == c[b])
        # contours never touch: no pixel 8-adjacent to a pixel of another contour
        P = np.pad(c, 1, constant_values=-1)
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                nb = P[1 + dy:1 + dy + resolution, 1 + dx:1 + dx + resolution]
                assert not ((c >= 0) & (nb >= 0) & (nb != c)).any()
        # each target contour is one connected path of the length the difficulty asks for
        for cid in (0, 1):
            pix = np.argwhere(c == cid)
            assert len(component(c == cid, tuple(pix[0]))) == len(pix)
            assert len(pix) >= cl * pf.PARAMS[resolution]["paddle_length"]
        assert img[a] >= 128 and img[b] >= 128  # the markers are drawn
        assert (img[c < 0] > 0).mean() < 0.5
        labels.append(s["label"])
    if n >= 12:
        assert 0 < sum(labels) < n  # positive and negative examples both occur


def pathfinder_files(root):
    out = {}
    for d, _, names in os.walk(root):
        for f in names:
            if f != "manifest.json":
                out[os.path.relpath(os.path.join(d, f), root)] = open(os.path.join(d, f), "rb").read()
    return out


@pytest.fixture(scope="module")
def pathfinder_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("lra"))
    pf.ensure(d, num=20, seed=0, workers=1, batch_size=8)
    return d


def test_pathfinder_release_layout_and_load(pathfinder_dir):
    from PIL import Image

    root = pf.folder(pathfinder_dir)
    assert root.endswith(os.path.join("pathfinder32", "curv_contour_length_14"))
    assert sorted(os.listdir(os.path.join(root, "metadata"))) == ["0.npy", "1.npy", "2.npy"]
    lines = []
    for b in range(3):
        text = open(os.path.join(root, "metadata", f"{b}.npy")).read()
        assert text.endswith("\n")
        for j, line in enumerate(text.split("\n")[:-1]):
            f = line.split(" ")
            assert f[:3] == [f"imgs/{b}", f"sample_{j}.png", str(j)] and f[3] in ("0", "1")
            assert f[4:] == ["1.0", "14", "4", "2", "0.5", "1", "1"]
            lines.append(f)
    assert len(lines) == 20
    pix = []
    for f in lines:
        with Image.open(os.path.join(root, f[0], f[1])) as im:
            assert im.mode == "L" and im.size == (32, 32)
            pix.append(np.asarray(im).reshape(-1).astype(np.int64))
    bounds = {"train": (0, 16), "val": (16, 18), "test": (18, 20)}
    for split, (a, b) in bounds.items():
        d = pf.load(pathfinder_dir, split, 1024)
        assert d["tokens"].shape == (b - a, 1024) and d["tokens"].dtype == np.uint16
        assert (d["tokens"] == np.stack(pix[a:b]) + 1).all()
        assert (d["lengths"] == 1024).all() and d["labels"].tolist() == [int(f[3]) for f in lines[a:b]]
    d = pf.load(pathfinder_dir, "train", 1500)
    assert (d["tokens"][:, 1024:] == 0).all() and (d["tokens"][:, :1024] >= 1).all()
    d = pf.load(pathfinder_dir, "train", 100)
    assert d["tokens"].shape == (16, 100) and (d["lengths"] == 100).all()
    assert d["tokens"].max() < pf.VOCAB_SIZE


def test_pathfinder_workers_and_seed(pathfinder_dir, tmp_path):
    base = pathfinder_files(pf.folder(pathfinder_dir))
    pf.main([f"--lra_dir={tmp_path / 'two'}", "--num=20", "--seed=0", "--workers=2", "--batch_size=8"])
    assert pathfinder_files(pf.folder(str(tmp_path / "two"))) == base
    pf.generate(str(tmp_path / "other" / "pathfinder32"), 20, seed=1, batch_size=8, progress=False)
    other = pathfinder_files(pf.folder(str(tmp_path / "other")))
    assert other.keys() == base.keys()
    assert sum(other[k] != base[k] for k in base if k.endswith(".png")) >= 18
    with pytest.raises(FileExistsError):
        pf.generate(str(tmp_path / "other" / "pathfinder32"), 20, seed=1, batch_size=8, progress=False)


@pytest.mark.parametrize("line, what", [
    ("imgs/0 sample_0.png 0 2 1.0 14 4 2 0.5 1 1", "label '2'"),
    ("imgs/0 sample_0.png 0", "at least 4"),
    ("imgs/0 sample_99.png 99 1 1.0 14 4 2 0.5 1 1", "sample_99.png"),
])
def test_pathfinder_malformed_metadata_raises(pathfinder_dir, tmp_path, line, what):
    src = pf.folder(pathfinder_dir)
    dst = pf.folder(str(tmp_path))
    shutil.copytree(src, dst)
    meta = os.path.join(dst, "metadata", "0.npy")
    rows = open(meta).read().split("\n")
    rows.insert(2, line)
    open(meta, "w").write("\n".join(rows))
    with pytest.raises(ValueError, match=re.escape(meta) + ", line 3: .*" + what):
        pf.load(str(tmp_path), "train", 1024)


def test_pathfinder_ensure_keeps_existing(pathfinder_dir):
    before = pathfinder_files(pf.folder(pathfinder_dir))
    stamp = os.path.getmtime(os.path.join(pf.folder(pathfinder_dir), "metadata", "0.npy"))
    pf.ensure(pathfinder_dir, num=20, seed=0, workers=2, batch_size=5)  # workers, batch_size change no image
    assert pathfinder_files(pf.folder(pathfinder_dir)) == before
    assert os.path.getmtime(os.path.join(pf.folder(pathfinder_dir), "metadata", "0.npy")) == stamp


def test_listops_by_operator_table():
    """scripts/analysis/listops.py's table on a hand case: the rule, accuracy and agreement per
    outermost operator; an operator with no example is left out."""
    import importlib
    by_operator = importlib.import_module("scripts.analysis.listops")
    rule = np.zeros(lo.VOCAB_SIZE, np.int64)
    rule[lo.VOCAB[lo.MIN]], rule[lo.VOCAB[lo.MAX]], rule[lo.VOCAB[lo.SM]] = 0, 9, 2
    first = np.array([lo.VOCAB[op] for op in (lo.MIN, lo.MIN, lo.MAX, lo.MAX, lo.SM)])
    labels = np.array([0, 3, 9, 9, 2])
    predictions = np.array([9, 9, 9, 1, 2])
    t = by_operator.operator_table(predictions, labels, first, rule)
    assert set(t["by_operator"]) == {lo.MIN, lo.MAX, lo.SM}
    mn, mx = t["by_operator"][lo.MIN], t["by_operator"][lo.MAX]
    assert mn["examples"] == 2 and mn["accuracy"] == 0 and mn["rule_accuracy"] == 0.5 and mn["agreement"] == 0
    assert mx["accuracy"] == 0.5 and mx["rule_accuracy"] == 1 and mx["agreement"] == 0.5
    assert mn["prediction_counts"] == [0] * 9 + [2] and mx["prediction_counts"][1] == 1
    assert t["overall"] == {"examples": 5, "accuracy": 0.4, "rule_accuracy": 0.8, "agreement": 0.4,
                            "prediction_counts": [0, 1, 1, 0, 0, 0, 0, 0, 0, 3]}


def test_listops_by_operator_main(listops_dir, tmp_path):
    """scripts/analysis/listops.py on a short ListOps run: its overall test accuracy, from best.pt,
    is train.py's test accuracy, and its counts add up to the test split."""
    import importlib
    import json
    import train
    by_operator = importlib.import_module("scripts.analysis.listops")
    out = tmp_path / "run"
    train.main(["configs/lra/listops_cpu.py", "configs/attention/fastmax1.py", f"--lra_dir={listops_dir}", f"--out_dir={out}",
                "--num_threads=1", "--n_layer=1", "--n_embd=16", "--batch_size=4", "--max_iters=2",
                "--eval_interval=1", "--eval_max_batches=1", "--warmup_iters=1",
                f"--lra_options={dict(workers=1, **SIZES)}"])  # the fixture's sizes: no regeneration
    by_operator.main([str(out), f"--out={tmp_path / 'ops.json'}"])
    got = json.load(open(tmp_path / "ops.json"))
    run = got["runs"][str(out)]
    final = json.load(open(out / "final_metrics.json"))
    assert run["overall"]["accuracy"] == pytest.approx(final["test_accuracy"], abs=1e-12)
    assert run["overall"]["examples"] == final["test_examples"] == len(read_rows(listops_dir, "test"))
    assert sum(s["examples"] for s in run["by_operator"].values()) == run["overall"]["examples"]
    assert sum(run["overall"]["prediction_counts"]) == run["overall"]["examples"]
    assert set(got["rule"]) == set(lo.OPERATORS) and run["weights"] == "best.pt" and run["iter_num"] in (1, 2)
