"""Task "classify" (tasks/classify.py), train.py's final_evaluate / final_metrics.json, and
scripts/analysis/lra_table.py; on a stub LRA data module registered by the tests (monkeypatch)."""
import json
import os
import shutil
import sys
import types

import numpy as np
import pytest
import torch

import data.lra as lra
import tasks
import train
import training
from configurator import ConfigError
from model import BertEncoder, Classifier
from tasks import classify

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VOCAB = 12
STUB_LEN = 24


def make_split(n, seed, two_tower=False):
    """Learnable stub data: class c's tokens are drawn from ids {1 + 5c, ..., 5 + 5c} (c = 0, 1),
    lengths 4-24, right-padded with 0."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n)
    out = {"labels": labels.astype(np.int64)}
    for key in ("", "2") if two_tower else ("",):
        lengths = rng.integers(4, STUB_LEN + 1, size=n)
        tokens = np.zeros((n, STUB_LEN), dtype=np.int64)
        for i in range(n):
            tokens[i, :lengths[i]] = 1 + 5 * labels[i] + rng.integers(0, 5, size=lengths[i])
        out["tokens" + key], out["lengths" + key] = tokens, lengths.astype(np.int64)
    return out


def stub_module(two_tower=False, name="stubtask"):
    m = types.ModuleType(f"data.lra.{name}")
    m.NUM_CLASSES, m.VOCAB_SIZE, m.MAX_LEN, m.TWO_TOWER = 2, VOCAB, STUB_LEN, two_tower
    m.calls = []

    def ensure(lra_dir, size=64):
        m.calls.append(("ensure", lra_dir, size))

    def load(lra_dir, split, max_len=STUB_LEN, flavour="plain"):
        m.calls.append(("load", split, max_len, flavour))
        d = make_split({"train": 256, "val": 64, "test": 96}[split], {"train": 0, "val": 1, "test": 2}[split],
                       two_tower)
        for key in [k for k in d if k.startswith("tokens")]:
            t = np.zeros((len(d[key]), max_len), dtype=np.int64)
            w = min(max_len, STUB_LEN)
            t[:, :w] = d[key][:, :w]
            d[key] = t
        for key in [k for k in d if k.startswith("lengths")]:
            d[key] = np.minimum(d[key], max_len)
        return d

    m.ensure, m.load = ensure, load
    return m


@pytest.fixture
def stub(monkeypatch):
    """Register stub LRA modules "stubtask" (one tower) and "stubpair" (two towers)."""
    mods = {"stubtask": stub_module(False, "stubtask"), "stubpair": stub_module(True, "stubpair")}
    monkeypatch.setattr(lra, "TASKS", lra.TASKS + tuple(mods))
    for name, m in mods.items():
        monkeypatch.setitem(sys.modules, f"data.lra.{name}", m)
    return mods


def cfg_for(**over):
    cfg = dict(train.DEFAULTS)
    cfg.update(task="classify", lra_task="stubtask", n_layer=2, n_head=2, n_embd=16, batch_size=8, lra_dir="/nowhere")
    cfg.update(over)
    return cfg


def build(cfg):
    d = classify.load_data(cfg)
    torch.manual_seed(0)
    return classify.build_model(cfg, d).eval(), d


# ---------------------------------------------------------------- model and batches


def test_cls_token_extends_vocabulary_and_sequence(stub):
    cfg = cfg_for(pooling="cls")
    model, d = build(cfg)
    assert model.config.vocab_size == VOCAB + 1 and model.config.block_size == STUB_LEN + 1
    batch = classify.get_batch(d, "train", cfg, [1, 2], "cpu")
    assert batch["idx"].shape == (8, STUB_LEN + 1) and (batch["idx"][:, 0] == VOCAB).all()
    assert batch["attention_mask"][:, 0].all()
    lengths = batch["attention_mask"].sum(1) - 1
    assert ((batch["idx"][:, 1:] != 0).sum(1) == lengths).all()  # the mask marks exactly the real tokens
    again = classify.get_batch(d, "train", cfg, [1, 2], "cpu")
    assert torch.equal(again["idx"], batch["idx"])  # a pure function of the seed
    cfg_mean = cfg_for(pooling="mean")
    model_mean, _ = build(cfg_mean)
    assert model_mean.config.vocab_size == VOCAB and model_mean.config.block_size == STUB_LEN
    assert classify.get_batch(d, "train", cfg_mean, [1, 2], "cpu")["idx"].shape == (8, STUB_LEN)
    assert not hasattr(model, "mlm_dense") or model.mlm_dense is None  # no MLM head (DDP: unused parameters)


ATTENTIONS = [
    dict(),
    dict(attention="fastmax", attention_params={"p": 1}),
    dict(attention="fastmax", attention_params={"p": 2}),
    dict(block="danet", attention="dense", pos_emb="cosine_relpe", layer_scheme="LSG", window=4, n_layer=3),
]


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("arch", ATTENTIONS, ids=["softmax", "fastmax1", "fastmax2", "danet"])
def test_padding_is_ignored(stub, pooling, arch):
    """Appending padding changes neither the hidden states of the real tokens nor the logits."""
    cfg = cfg_for(pooling=pooling, max_len=STUB_LEN + 8, **arch)
    model, d = build(cfg)
    rows = np.arange(6)
    trimmed = classify.make_batch(d["val"], rows, dict(cfg, trim_padding=True), d["module"], "cpu")
    full = classify.make_batch(d["val"], rows, cfg, d["module"], "cpu")
    assert full["idx"].shape[1] > trimmed["idx"].shape[1]
    with torch.no_grad():
        h_trim = model.transformer(trimmed["idx"], trimmed["attention_mask"])
        h_full = model.transformer(full["idx"], full["attention_mask"])
        T = h_trim.shape[1]
        real = trimmed["attention_mask"][..., None]
        torch.testing.assert_close(h_full[:, :T] * real, h_trim * real, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(classify._logits(model, full), classify._logits(model, trimmed),
                                   atol=1e-5, rtol=1e-4)
        # and the padding really is padding: changing a real token changes the logits
        poked = dict(full, idx=full["idx"].clone())
        pos = 1 if pooling == "cls" else 0
        poked["idx"][:, pos] = torch.where(poked["idx"][:, pos] == 3, 4, 3)
        assert not torch.allclose(classify._logits(model, poked), classify._logits(model, full))


def test_mean_pooling_is_the_mean_over_real_tokens(stub):
    cfg = cfg_for(pooling="mean")
    model, d = build(cfg)
    batch = classify.make_batch(d["val"], np.arange(4), cfg, d["module"], "cpu")
    with torch.no_grad():
        h = model.transformer(batch["idx"], batch["attention_mask"])
        for i in range(4):
            n = int(batch["attention_mask"][i].sum())
            torch.testing.assert_close(model.features(batch["idx"], batch["attention_mask"])[i], h[i, :n].mean(0))


def test_two_tower_shapes_and_features(stub):
    cfg = cfg_for(lra_task="stubpair", pooling="cls")
    model, d = build(cfg)
    assert model.config.two_tower and model.classifier[0].in_features == 4 * 16
    batch = classify.get_batch(d, "train", cfg, [3], "cpu")
    assert batch["idx"].shape == batch["idx2"].shape == (8, STUB_LEN + 1)
    assert batch["attention_mask2"].shape == (8, STUB_LEN + 1)
    with torch.no_grad():
        logits = classify._logits(model, batch)
        assert logits.shape == (8, 2)
        u = model.features(batch["idx"], batch["attention_mask"])
        v = model.features(batch["idx2"], batch["attention_mask2"])
        assert u.shape == v.shape == (8, 16)
        torch.testing.assert_close(logits, model.classifier(torch.cat([u, v, u * v, u - v], -1)))
        # the encoder's weights are a BertEncoder's without the MLM head
        plain = BertEncoder(model.config).eval()
        missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
        assert sorted(missing) == ["mlm_bias", "mlm_dense.bias", "mlm_dense.weight", "mlm_ln.bias", "mlm_ln.weight"]
        assert not unexpected
        torch.testing.assert_close(u, plain.pool(plain(batch["idx"], batch["attention_mask"]), batch["attention_mask"]))
        swapped = model(batch["idx2"], batch["attention_mask2"], batch["idx"], batch["attention_mask"])
        assert not torch.allclose(swapped, logits)  # u - v is not symmetric: the order matters
    with pytest.raises(ValueError, match="idx2"):
        model(batch["idx"], batch["attention_mask"])
    assert classify.batch_tokens(cfg) == 8 * (STUB_LEN + 1) * 2


def test_options_are_routed_by_name(stub):
    m = stub["stubtask"]
    cfg = cfg_for(lra_options={"size": 7, "flavour": "x"}, max_len=10)
    classify.prepare_data(cfg)
    classify.load_data(cfg)
    assert ("ensure", "/nowhere", 7) in m.calls and ("load", "val", 10, "x") in m.calls
    with pytest.raises(ConfigError, match="bogus.*accepted: flavour, size"):
        classify.prepare_data(cfg_for(lra_options={"bogus": 1}))
    with pytest.raises(ConfigError, match="unknown LRA task"):
        classify.prepare_data(cfg_for(lra_task="nope"))
    with pytest.raises(ConfigError, match="pooling"):
        classify.prepare_data(cfg_for(pooling="max"))


def test_evaluate_covers_the_whole_split(stub):
    cfg = cfg_for(batch_size=10)  # 64 val examples: 7 batches, the last of 4
    model, d = build(cfg)
    with torch.no_grad():
        m = classify.split_metrics(model, d, "val", cfg, "cpu")
        assert m["n"] == 64
        logits = model(*classify.encode(d["val"]["tokens"], d["val"]["lengths"], VOCAB, False, "cpu"))
        labels = torch.from_numpy(d["val"]["labels"])
        assert m["accuracy"] == pytest.approx(float((logits.argmax(-1) == labels).float().mean()))
        assert m["loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, labels)), rel=1e-5)
        assert classify.split_metrics(model, d, "val", cfg, "cpu", max_batches=2)["n"] == 20
        # a limited evaluation takes a fixed random subset, not a prefix (splits may be sorted by class)
        rows = classify.eval_rows(64, 10, 2)
        assert len(rows) == 20 and rows.max() > 20 and np.array_equal(rows, classify.eval_rows(64, 10, 2))
        assert np.array_equal(classify.eval_rows(64, 10, 7), np.arange(64))
        final = classify.final_evaluate(model, d, cfg, "cpu")
        assert final["test_examples"] == 96 and final["val_accuracy"] == pytest.approx(m["accuracy"])
        limited = classify.final_evaluate(model, d, dict(cfg, test_max_batches=3, eval_max_batches=2), "cpu")
        assert limited["test_examples"] == 30 and limited["val_examples"] == 20
        assert final["test_majority"] == pytest.approx(np.bincount(d["test"]["labels"]).max() / 96)


# ---------------------------------------------------------------- through train.py


def test_training_run_learns_and_reports_test_accuracy(stub, tmp_path):
    out = tmp_path / "run"
    common = ["--task=classify", "--lra_task=stubtask", "--lra_dir=/nowhere", f"--out_dir={out}", "--num_threads=1",
              "--n_layer=1", "--n_head=2", "--n_embd=16", "--batch_size=16", "--max_iters=40", "--eval_interval=10",
              "--log_interval=1", "--warmup_iters=0", "--learning_rate=3e-3", "--lr_schedule=constant",
              "--pooling=mean"]
    train.main(common)
    log = [json.loads(line) for line in open(out / "log.jsonl")]
    losses = [r["loss"] for r in log if "loss" in r]
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5])  # starts at ln 2 = 0.69
    final = json.load(open(out / "final_metrics.json"))
    evals = {r["iter"]: r["eval"]["val_accuracy"] for r in log if "eval" in r}
    best_iter = max(evals, key=lambda it: (evals[it], -it))  # the first of the best
    assert final["best_iter"] == best_iter and final["best_metric"]["value"] == evals[best_iter]
    # final_evaluate ran on the best weights: its full-split val accuracy is the best one
    assert final["val_accuracy"] == pytest.approx(evals[best_iter])
    assert final["test_accuracy"] > 0.8 and final["test_examples"] == 96
    assert final["iters"] == 40 and final["steps_per_s"] > 0
    assert final["config"]["lra_task"] == "stubtask" and final["config"]["attention"] == "softmax"
    best = torch.load(out / "best.pt", weights_only=False)
    assert best["iter_num"] == best_iter
    # a new run from scratch in the same out_dir does not inherit the old best.pt
    train.main(common + ["--max_iters=2", "--eval_interval=100", "--learning_rate=0.0", "--overwrite=True"])
    final2 = json.load(open(out / "final_metrics.json"))
    assert final2["iters"] == 2 and final2["best_iter"] == 2


def test_missing_data_stops_with_the_file_name(tmp_path):
    with pytest.raises(ConfigError, match="new_aan_pairs.train.tsv"):  # one `error:` line, exit 2
        train.main(["--task=classify", "--lra_task=retrieval", f"--lra_dir={tmp_path}", f"--out_dir={tmp_path}/o"])


def test_classify_selects_by_validation_accuracy():
    # (lm has a final_evaluate since the WikiText-2 sweep; tests/scripts/test_gpt_mini_sweep.py checks its output)
    assert tasks.get("classify").BEST_METRIC == ("val_accuracy", "max")


# ---------------------------------------------------------------- scripts/analysis/lra_table.py (published/lra.py)


def write_run(root, name, lra_task, attention, acc, steps, params=None, iters=100, val=None, majority=None,
              date="2026-11-28T00:00:00+00:00", **cfg_extra):
    d = root / name
    d.mkdir(parents=True)
    cfg = {"task": "classify", "lra_task": lra_task, "attention": attention, "attention_params": params or {},
           "block": "danet" if attention == "dense" else "transformer", "max_len": 0, "lra_options": {},
           "batch_size": 8, **cfg_extra}
    (d / "final_metrics.json").write_text(json.dumps({
        "test_accuracy": acc, "val_accuracy": acc + 0.01 if val is None else val, "steps_per_s": steps,
        "iters": iters, "best_iter": 50, "test_majority": majority, "test_examples": 2000, "config": cfg}))
    if date is not None:
        (d / "manifest.json").write_text(json.dumps({"train": {"date": date}}))
    return d


def test_lra_table(tmp_path):
    from scripts.analysis import lra_table

    runs = tmp_path / "runs"
    write_run(runs, "a", "listops", "softmax", 0.3125, 2.0)
    write_run(runs, "b", "text", "softmax", 0.625, 1.5)
    write_run(runs, "c", "listops", "fastmax", 0.25, 4.0, {"p": 1})
    write_run(runs, "d", "pathfinder", "dense", 0.5, 3.0, lra_options={"resolution": 128})
    write_run(runs, "e", "image", "fastmax", 0.4, 5.0, {"p": 2})
    write_run(runs, "f", "text", "bigbird", 0.57, 2.0, date=None)  # no date: counts as made before its change
    out = tmp_path / "table"
    lra_table.main([str(runs), f"--out={out}"])
    md = (out / "lra_table.md").read_text()
    accuracy_md = md.split("## Training steps per second")[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in accuracy_md.splitlines() if line.startswith("| ")}
    # ours: percent, in the paper's column order; no row of ours has all five tasks, so no Avg
    assert rows["softmax (ours)"][:2] == ["31.25", "62.50"] and rows["softmax (ours)"][-1] == "-"
    assert rows["fastmax1 (ours)"][0] == "25.00" and rows["fastmax2 (ours)"][3] == "40.00"
    assert rows["dense (ours)"][5] == "50.00" and rows["dense (ours)"][4] == "-"  # resolution 128 = Path-X
    assert rows["bigbird (ours; made with random_per_layer=False, one draw of random blocks for all layers, the "
                "default before 2026-11-27)"][1] == "57.00"
    # the published numbers beside ours, labelled by their source
    assert rows["softmax (published: LRA paper, Tay et al. 2021)"][:2] == ["36.37", "64.27"]
    assert rows["fastmax2 (published: FAST Table 1)"][0] == "37.40"
    assert rows["dense (published: DenseAttention Table 1)"][-1] == "77.99"
    order = [name for name in rows if name != "attention"]
    assert order[:3] == ["softmax (ours)", "softmax (published: LRA paper, Tay et al. 2021)",
                         "softmax (published: FAST Table 1)"]
    assert order.index("fastmax2 (published: FAST Table 1)") < order.index("dense (ours)")
    csv = (out / "lra_accuracy.csv").read_text().splitlines()
    assert csv[0] == "attention,source,listops,text,retrieval,image,pathfinder,pathx,avg"
    assert "softmax,ours,31.25,62.50,,,,," in csv
    steps = (out / "lra_steps_per_s.csv").read_text().splitlines()
    assert "fastmax1,ours,4.00,,,,,," in steps and any(s.startswith("fastmax1,published: FAST Table 2") for s in steps)
    with pytest.raises(SystemExit):
        lra_table.main([str(tmp_path / "empty"), f"--out={out}"])


def test_lra_table_runs_name_the_cpu_of_each_run(tmp_path):
    from scripts.analysis import lra_table

    runs = tmp_path / "runs"
    amd = write_run(runs, "a", "text", "softmax", 0.6, 2.0)
    (amd / "manifest.json").write_text(json.dumps({"train": {"machine": {"cpu": "AMD EPYC", "cores": 2}}}))
    write_run(runs, "b", "text", "linear", 0.62, 3.5)  # no manifest
    out = tmp_path / "table"
    lra_table.main([str(runs), f"--out={out}"])
    run_rows = (out / "lra_table.md").read_text().split("## Runs")[1]
    cpu = {line.split("|")[3].strip(): line.split("|")[10].strip()
           for line in run_rows.splitlines() if line.startswith("| ") and "attention" not in line}
    assert cpu == {"softmax": "AMD EPYC", "linear": "not recorded"}


def test_lra_table_baseline_rows_show_beside_our_runs_only(tmp_path):
    from scripts.analysis.published import lra as published_lra
    from scripts.analysis.runs import find_runs

    runs = tmp_path / "runs"
    write_run(runs, "s", "text", "softmax", 0.6, 2.0)
    write_run(runs, "p", "text", "performer", 0.61, 3.0, {"kernel": "relu"})
    write_run(runs, "l", "text", "linear", 0.62, 3.5)
    acc_rows, _, _, _ = published_lra.build_tables(published_lra.read_lra_runs(find_runs([str(runs)])))
    names = [(label, source) for label, source, _, _ in acc_rows]
    published = {(label, source): vals for label, source, vals, _ in acc_rows}
    # a baseline we ran gets its published rows (LRA Table 1, and FAST Table 1 where it has one)
    assert published[("performer", "published: LRA paper, Tay et al. 2021")][1] == 65.40
    assert published[("performer", "published: FAST Table 1")][1] == 64.39
    assert published[("linear", "published: LRA paper, Tay et al. 2021")][1] == 65.90
    # one we did not run gets none; the papers' own methods always keep theirs
    assert not any(label in ("reformer", "informer", "bigbird") for label, _ in names)
    assert ("fastmax1", "published: FAST Table 1") in names
    # the papers' methods first, then the baselines in ORDER (linear before performer)
    labels = list(dict.fromkeys(label for label, _ in names))
    assert labels == ["softmax", "fastmax1", "fastmax2", "dense", "linear", "performer"]


def test_lra_table_avg_fail_marks_and_the_choice_rule(tmp_path):
    from scripts.analysis.published import lra as published_lra
    from scripts.analysis.runs import find_runs

    runs = tmp_path / "runs"
    for i, task in enumerate(("listops", "text", "retrieval", "image", "pathfinder")):
        write_run(runs, f"s{i}", task, "softmax", 0.5 + i / 100, 2.0)  # a complete row: Avg over five tasks
    write_run(runs, "f", "text", "fastmax", 0.7, 3.0, {"p": 1})  # an incomplete row: no Avg
    # at chance: within two standard errors of the majority rate (2,000 examples, m = 0.174: 1.7 points)
    write_run(runs, "fail", "listops", "dense", 0.173, 1.0, majority=0.174)
    write_run(runs, "above", "image", "dense", 0.40, 1.0, majority=0.112)
    # two runs of one cell: the one that saw more examples fills it, whatever the files' times
    longer = write_run(runs, "long", "text", "dense", 0.55, 1.0, iters=5000, val=0.50)
    write_run(runs, "short", "text", "dense", 0.65, 1.0, iters=100, val=0.90)
    os.utime(longer / "final_metrics.json", (0, 0))  # the longer run is the older file
    acc_rows, steps_rows, chosen, _ = published_lra.build_tables(published_lra.read_lra_runs(find_runs([str(runs)])))
    ours = {label: (vals, avg) for label, source, vals, avg in acc_rows if source == "ours"}
    assert ours["softmax"][1] == pytest.approx(100 * (0.5 + 0.51 + 0.52 + 0.53 + 0.54) / 5)
    assert ours["fastmax1"][1] is None
    assert ours["dense"][0][0] == "fail (17.30; majority 17.40)" and ours["dense"][0][3] == pytest.approx(40.0)
    assert ours["dense"][0][1] == pytest.approx(55.0) and chosen[("dense", "text")]["file"].endswith("long/final_metrics.json")
    assert {label: avg for label, source, _, avg in steps_rows if source == "ours"}["softmax"] == pytest.approx(2.0)
    # equal examples: the higher validation accuracy, then the path
    a = dict(examples_seen=10, val_accuracy=0.5, file="b")
    assert published_lra.choose([a, dict(a, val_accuracy=0.6, file="a")])["file"] == "a"
    assert published_lra.choose([a, dict(a, file="c")])["file"] == "c"


# ---------------------------------------------------------------- configs/lra


CONFIGS = os.path.join(ROOT, "configs", "lra")
LRA_ATTENTIONS = ("softmax", "fastmax1", "fastmax2", "dense")  # configs/attention/<name>.py of the LRA runs


def lra_layers(task, attention, size):
    """One LRA run's config files: the task at its size, the attention, the pair's override if any."""
    files = [os.path.join(CONFIGS, f"{task}{size}.py"), os.path.join(ROOT, "configs", "attention", f"{attention}.py")]
    override = os.path.join(CONFIGS, attention, f"{task}{size}.py")
    return files + [override] if os.path.exists(override) else files


def test_lra_configs_parse_and_build():
    import configurator

    runs = [(t, a, s) for t in lra.TASKS for a in LRA_ATTENTIONS for s in ("", "_cpu")]
    for task, attention, size in runs:
        name = f"{task}_{attention}{size}"
        cfg, explicit = configurator.parse_explicit(train.DEFAULTS, [*lra_layers(task, attention, size), "--device=cpu"])
        assert cfg["task"] == "classify" and cfg["lra_task"] == task, name
        tasks.check_task_keys(explicit, "classify")
        training.check_config(cfg)
        module = lra.get(task)
        assert cfg["max_len"] == module.MAX_LEN or (task == "text" and cfg["max_len"] == 4000), name
        classify.split_options(module, cfg["lra_options"])  # every option is accepted by the module
        mc = classify.model_config(cfg, module)
        assert (mc.block, mc.attention) == (("danet", "dense") if attention == "dense" else ("transformer", "fastmax"
                                            if attention.startswith("fastmax") else "softmax"))
        if attention.startswith("fastmax"):
            assert mc.attention_params == {"p": int(attention[-1])}
        if attention != "dense" and not size:  # LRA's TransformerEncoder embeddings
            assert mc.embedding_init_std == 1.0, name
            assert mc.pos_emb == ("learned" if task == "image" else "sinusoidal"), name
        if size == "_cpu":
            Classifier(mc)  # small enough to build here
    same = ("batch_size", "max_iters", "learning_rate", "max_len", "pooling", "n_embd")
    for t in lra.TASKS:  # within a task every attention gets the same budget
        cfgs = [configurator.parse(train.DEFAULTS, lra_layers(t, a, "_cpu")) for a in LRA_ATTENTIONS]
        assert all(all(r[k] == cfgs[0][k] for k in same) for r in cfgs), t


def test_cpu_config_runs_on_real_data(tmp_path, monkeypatch, cifar10_dir):
    """Two steps of the DANet Image config on the real CIFAR-10 ($CIFAR10_DIR, else ../shared's subset), through
    train.py."""
    monkeypatch.setenv("CIFAR10_DIR", cifar10_dir)
    out = tmp_path / "run"
    train.main([*lra_layers("image", "dense", "_cpu"), f"--out_dir={out}", f"--lra_dir={tmp_path / 'lra'}",
                "--num_threads=1", "--batch_size=4", "--max_iters=2", "--eval_interval=2", "--eval_max_batches=2",
                "--test_max_batches=2"])
    final = json.load(open(out / "final_metrics.json"))
    assert final["test_examples"] == 8 and final["val_examples"] == 8 and 0 <= final["test_accuracy"] <= 1
    assert final["config"]["block"] == "danet" and final["best_iter"] == 2


def test_sweep_script(tmp_path, cifar10_dir):
    """scripts/sweeps/lra.sh: runs the grid (a task, an attention and the pair's override where one exists),
    skips finished cells, reports a missing attention file, writes the table."""
    import subprocess

    env = dict(os.environ, TASKS="image", ATTENTIONS="softmax dense bogus", OUT_ROOT=str(tmp_path / "runs"),
               TABLE_OUT=str(tmp_path / "table"), LRA_DIR=str(tmp_path / "lra"), THREADS="1", PYTHONPATH=ROOT,
               PYTHON=sys.executable,  # the test's own interpreter, not whatever python is on PATH
               PATH="/usr/bin:/bin")  # a PATH without this environment's python: PYTHON must be used
    env["CIFAR10_DIR"] = cifar10_dir  # $CIFAR10_DIR, else ../shared's subset (tests/conftest.py)
    args = ["bash", os.path.join(ROOT, "scripts", "sweeps", "lra.sh"), "--max_iters=1", "--batch_size=2",
            "--eval_max_batches=1", "--test_max_batches=1", "--eval_interval=1"]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "no configs/attention/bogus.py" in r.stderr, r.stderr[-2000:]
    final = json.load(open(tmp_path / "runs" / "image_softmax_cpu" / "final_metrics.json"))
    assert final["iters"] == 1 and final["config"]["num_threads"] == 1
    dense = json.load(open(tmp_path / "runs" / "image_dense_cpu" / "final_metrics.json"))["config"]
    assert (dense["block"], dense["n_layer"], dense["window"]) == ("danet", 3, 64)  # configs/lra/dense/image_cpu.py
    assert "softmax (ours)" in (tmp_path / "table" / "lra_table.md").read_text()
    # a sweep of other attentions keeps earlier runs in the table through TABLE_RUNS (archived elsewhere)
    (tmp_path / "archived").mkdir()
    shutil.move(str(tmp_path / "runs" / "image_dense_cpu"), str(tmp_path / "archived"))
    env.update(ATTENTIONS="softmax", TABLE_RUNS=str(tmp_path / "archived"))
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "final_metrics.json exists, skipped" in r.stdout
    table = (tmp_path / "table" / "lra_table.md").read_text()
    assert "softmax (ours)" in table and "dense (ours)" in table


def test_lra_cls_attention(stub, tmp_path):
    """scripts/analysis/cls_attention.py: its layer-0 CLS weights equal a softmax recomputed from the
    block's own projections; constant q and k give the uniform spread exactly; main writes the JSON."""
    from scripts.analysis import cls_attention as script

    out = tmp_path / "run"
    train.main(["--task=classify", "--lra_task=stubtask", "--lra_dir=/nowhere", f"--out_dir={out}",
                "--num_threads=1", "--n_layer=2", "--n_head=2", "--n_embd=16", "--batch_size=8", "--max_iters=2",
                "--eval_interval=100", "--pooling=cls"])
    trained, init, config, iter_num = script.load_run(str(out))
    ckpt = torch.load(out / "ckpt.pt", weights_only=False)
    assert all(torch.equal(p, ckpt["model"][k]) for k, p in trained.state_dict().items())
    assert iter_num == ckpt["iter_num"]
    idx, mask = script.examples(config, "val", 10)
    assert idx.shape == (10, STUB_LEN + 1) and (idx[:, 0] == VOCAB).all() and mask[:, 0].all()

    with torch.no_grad():  # peaky attention, so the check is not between two near-uniform rows
        trained.transformer.h[0].attn.c_attn.weight[:32] *= 40
        x = trained.transformer.wte(idx) + trained.transformer.wpe(torch.arange(idx.shape[1]))
        q, k, _ = trained.transformer.h[0].attn.c_attn(trained.transformer.h[0].ln_1(x)).split(16, dim=2)
        q, k = (t.view(10, -1, 2, 8).transpose(1, 2).double() for t in (q, k))
        scores = (q[:, :, :1] @ k.transpose(-1, -2) / 8 ** 0.5).masked_fill(~mask[:, None, None, :], float("-inf"))
        expected = torch.softmax(scores, dim=-1)[:, :, 0, 3]  # (N, H) weight of CLS on position 3
    stats = script.cls_statistics(trained, idx, mask, position=3, batch_size=4)
    assert stats["ratio"].shape == (2, 2)
    np.testing.assert_allclose(stats["weight_at_position"][0], expected.mean(0).numpy(), rtol=1e-6)
    assert stats["max_weight"][0].max() > 2 * stats["uniform"][0, 0]

    with torch.no_grad():
        for block in init.transformer.h:
            block.attn.c_attn.weight[:32] = 0  # q, k = their biases: one score for every key
    stats = script.cls_statistics(init, idx, mask, position=1)
    uniform = (1.0 / mask.sum(1).double()).mean().item()
    np.testing.assert_allclose(stats["weight_at_position"], uniform, rtol=1e-12)
    np.testing.assert_allclose(stats["ratio"], 1.0, rtol=1e-12)
    np.testing.assert_allclose(stats["uniform"], uniform, rtol=1e-12)

    init.set_attention("dense")  # A = q.k: not a distribution over the keys
    with pytest.raises(ValueError, match="attention 'dense': the CLS row's weights do not sum to one"):
        script.cls_statistics(init, idx, mask, position=1)

    script.main([str(out), "--num=6", f"--out={tmp_path / 'cls.json'}"])
    result = json.load(open(tmp_path / "cls.json"))[str(out)]
    assert result["examples"] == 6 and result["attention"] == "softmax"
    assert set(result["trained"]) == set(script.METRICS) and np.shape(result["init"]["ratio"]) == (2, 2)
