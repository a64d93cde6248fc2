"""scripts/tree_sweep_table.py on a few fake eval_ppl JSON files."""
import csv
import importlib.util
import json
import math
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "scripts", "tree_sweep_table.py")


def _load():
    spec = importlib.util.spec_from_file_location("tree_sweep_table", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write(d, name, attention, params, protocol, offset, value, ips=None, full=None, nll=1.0):
    rec = {"metric": "casino" if protocol == "casino" else "perplexity", "value": value, "mean_nll": nll,
           "tokens_scored": 100, "seconds": 1.0, "protocol": protocol, "attention": attention,
           "attention_params": params, "split": "test", "fraction": 0.2, "offset": offset,
           "attention_stats": {} if ips is None else {"alignment_inner_products": ips,
                                                      "full_attention_inner_products": full}}
    with open(os.path.join(d, name), "w") as f:
        json.dump(rec, f)


def test_table_from_fake_runs(tmp_path):
    mod = _load()
    d = str(tmp_path)
    for off, val in ((0.2, 20.0), (0.4, 22.0)):
        _write(d, f"a{off}.json", "tree", {"sampler": "edh", "E": 0.5, "normalization": "consistent"}, "blocks", off, val, 25, 100)
        _write(d, f"b{off}.json", "tree", {"sampler": "rff", "E": 0.5, "normalization": "consistent"}, "blocks", off, val + 10, 25, 100)
        _write(d, f"c{off}.json", "softmax", {}, "blocks", off, 11.0 + off)
    _write(d, "e.json", "tree", {"sampler": "edh", "E": 0.8, "normalization": "consistent"}, "blocks", 0.2, 15.0, 60, 100)
    with open(os.path.join(d, "junk.json"), "w") as f:
        f.write("{not json")
    mod.main(["--in_dir", d, "--out", os.path.join(d, "t")])
    md = open(os.path.join(d, "t.md")).read()
    assert "| 32 (0.5) | 256 (0.8) |" in md
    assert "| EDH | 21.0 ± 1.4 | 15.0 |" in md
    assert "| RFF | 31.0 ± 1.4 | – |" in md
    assert "| cost fraction | 0.250 | 0.600 |" in md
    assert "Exact softmax attention: 11.3 ± 0.1" in md
    rows = list(csv.DictReader(open(os.path.join(d, "t.csv"))))
    assert sum(r["row"] == "run" for r in rows) == 7
    means = [r for r in rows if r["row"] == "mean" and r["sampler"] == "edh" and float(r["E"]) == 0.5]
    assert len(means) == 1 and float(means[0]["value"]) == pytest.approx(21.0)
    assert float(means[0]["std"]) == pytest.approx(2 ** 0.5)
    assert os.path.getsize(os.path.join(d, "t.png")) > 1000


def test_paired_change_against_exact_on_the_same_slice(tmp_path):
    mod = _load()
    d = str(tmp_path)
    tree = {"sampler": "edh", "E": 0.5, "normalization": "consistent"}
    # slice 0.2: +0.01 nats, slice 0.4: +0.03 nats; casino runs and slices without exact run are ignored
    for off, exact_nll, tree_nll in ((0.2, 3.0, 3.01), (0.4, 4.0, 4.03)):
        _write(d, f"s{off}.json", "softmax", {}, "blocks", off, 1.0, nll=exact_nll)
        _write(d, f"t{off}.json", "tree", tree, "blocks", off, 1.0, 25, 100, nll=tree_nll)
    _write(d, "t0.6.json", "tree", tree, "blocks", 0.6, 1.0, 25, 100, nll=9.0)
    _write(d, "c.json", "tree", tree, "casino", 0.2, 1.0, 25, 100, nll=9.0)
    changes = mod.paired_changes(mod.load_runs(d))
    want = 100 * ((math.exp(0.01) - 1) + (math.exp(0.03) - 1)) / 2
    assert changes == {("blocks", "edh", "consistent", 0.5): pytest.approx(want)}
    mod.main(["--in_dir", d, "--out", os.path.join(d, "t")])
    assert f"| edh | {want:+.2f} |" in open(os.path.join(d, "t.md")).read()


def test_empty_dir_fails(tmp_path):
    with pytest.raises(SystemExit):
        _load().main(["--in_dir", str(tmp_path)])
