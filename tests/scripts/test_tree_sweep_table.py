"""scripts/analysis/tree_sweep_table.py on a few fake eval_ppl JSON files."""
import csv
import json
import math
import os

import pytest

def _load():
    from scripts.analysis import tree_sweep_table
    return tree_sweep_table


def _write(d, name, attention, params, protocol, offset, value, ips=None, full=None, nll=1.0, seed=0):
    rec = {"metric": "casino" if protocol == "casino" else "perplexity", "value": value, "mean_nll": nll,
           "tokens_scored": 100, "seconds": 1.0, "protocol": protocol, "attention": attention,
           "attention_params": params, "split": "test", "fraction": 0.2, "offset": offset, "seed": seed,
           "attention_stats": {} if ips is None else {"alignment_inner_products": ips,
                                                      "full_attention_inner_products": full}}
    with open(os.path.join(d, name), "w") as f:
        json.dump(rec, f)


def test_values_average_slices_then_spread_across_seeds(tmp_path):
    mod = _load()
    d = str(tmp_path)
    edh = {"sampler": "edh", "E": 0.5, "normalization": "bud_mean"}
    # seed 0: slices 20, 22 -> 21; seed 1: slices 24, 26 -> 25; across seeds 23 ± 2.83
    for seed, base in ((0, 20.0), (1, 24.0)):
        for off, delta in ((0.2, 0.0), (0.4, 2.0)):
            _write(d, f"a{off}_{seed}.json", "tree", edh, "blocks", off, base + delta, 25, 100, seed=seed)
    for off in (0.2, 0.4):
        _write(d, f"c{off}.json", "softmax", {}, "blocks", off, 11.0 + off)
        _write(d, f"w{off}.json", "softmax", {"window": 32}, "blocks", off, 13.0 + off)
    _write(d, "e.json", "tree", {**edh, "E": 0.8}, "blocks", 0.2, 15.0, 60, 100)
    with open(os.path.join(d, "junk.json"), "w") as f:
        f.write("{not json")
    mod.main(["--in_dir", d, "--out", os.path.join(d, "t")])
    md = open(os.path.join(d, "t.md")).read()
    assert "| 32 (0.5) | 256 (0.8) |" in md
    assert f"| EDH | 23.0 ± {8 ** 0.5:.1f} | 15.0 |" in md
    assert "| cost fraction | 0.250 | 0.600 |" in md
    assert "- softmax: 11.3 (slices at offsets [0.2, 0.4], 1 seed(s))" in md
    assert "- softmax_window32: 13.3" in md
    rows = list(csv.DictReader(open(os.path.join(d, "t.csv"))))
    assert sum(r["row"] == "run" for r in rows) == 9
    cfg = [r for r in rows if r["row"] == "config" and r["sampler"] == "edh" and float(r["E"]) == 0.5]
    assert len(cfg) == 1 and float(cfg[0]["value"]) == pytest.approx(23.0)
    assert float(cfg[0]["std"]) == pytest.approx(8 ** 0.5) and cfg[0]["n_seeds"] == "2"
    assert os.path.getsize(os.path.join(d, "t.png")) > 1000


def test_paired_change_against_exact_on_the_same_slice(tmp_path):
    mod = _load()
    d = str(tmp_path)
    tree = {"sampler": "edh", "E": 0.5, "normalization": "bud_mean"}
    # seed 0: slice 0.2 +0.01 nats, slice 0.4 +0.03 nats; seed 1: +0.02 and +0.04
    for off, exact_nll in ((0.2, 3.0), (0.4, 4.0)):
        _write(d, f"s{off}.json", "softmax", {}, "blocks", off, 1.0, nll=exact_nll)
    for seed, (d2, d4) in ((0, (0.01, 0.03)), (1, (0.02, 0.04))):
        _write(d, f"t0.2_{seed}.json", "tree", tree, "blocks", 0.2, 1.0, 25, 100, nll=3.0 + d2, seed=seed)
        _write(d, f"t0.4_{seed}.json", "tree", tree, "blocks", 0.4, 1.0, 25, 100, nll=4.0 + d4, seed=seed)
    _write(d, "c.json", "tree", tree, "casino", 0.2, 1.0, 25, 100, nll=9.0)  # casino: no paired change
    agg = mod.aggregate(mod.load_runs(d))
    per_seed = [100 * (math.expm1(0.01) + math.expm1(0.03)) / 2, 100 * (math.expm1(0.02) + math.expm1(0.04)) / 2]
    entry = agg[("blocks", "tree", "edh", "bud_mean", 0.5)]
    assert entry["change_mean"] == pytest.approx(sum(per_seed) / 2)
    assert entry["change_std"] == pytest.approx(abs(per_seed[0] - per_seed[1]) / 2 ** 0.5)
    assert math.isnan(agg[("casino", "tree", "edh", "bud_mean", 0.5)]["change_mean"])
    mod.main(["--in_dir", d, "--out", os.path.join(d, "t")])
    md = open(os.path.join(d, "t.md")).read()
    assert f"| edh | {sum(per_seed) / 2:+.2f} ± {abs(per_seed[0] - per_seed[1]) / 2 ** 0.5:.2f} |" in md


def test_empty_dir_fails(tmp_path):
    with pytest.raises(SystemExit):
        _load().main(["--in_dir", str(tmp_path)])
