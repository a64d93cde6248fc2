"""scripts/analysis/recall_ablation_table.py: rows, their changes from the base read from the runs'
configurations, the plateau column, and the files it writes."""
import json
import os

import pytest

from scripts.analysis import recall_ablation_table as table


def fake_run(root, name, accs, test, **cfg):
    d = root / name
    d.mkdir(parents=True)
    config = {"mlp": False, "tie_lm_head": False, "beta2": 0.999, "learning_rate": 3e-3, **cfg}
    (d / "final_metrics.json").write_text(json.dumps({"test_accuracy": test, "config": config}))
    lines = [{"start": {"iter": 0}}]
    for i, acc in enumerate(accs, 1):
        lines += [{"iter": 100 * i, "loss": 5.0 - i}, {"iter": 100 * i, "eval": {"val_accuracy": acc}}]
    (d / "log.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_rows_name_what_differs_from_the_base_and_where_the_plateau_ends(tmp_path, capsys):
    fake_run(tmp_path, "zoology", [0.2, 0.6, 0.99], 0.995)
    fake_run(tmp_path, "zoology_mlp", [0.0, 0.1, 0.2], 0.21, mlp=True)
    fake_run(tmp_path, "zoology_beta2_0.99", [0.3, 0.7, 0.7], 0.7, beta2=0.99)
    out = tmp_path / "out"
    rows = table.main([str(tmp_path), f"--out={out}"])
    by = {r["row"]: r for r in rows}
    assert [r["row"] for r in rows][0] == "zoology" and by["zoology"]["changes"] == "(the base)"
    assert by["zoology_mlp"]["changes"] == "mlp=True" and by["zoology_mlp"]["first_iter_val_acc_0.5"] == "-"
    assert by["zoology_beta2_0.99"]["changes"] == "beta2=0.99"
    assert by["zoology_beta2_0.99"]["best_iter"] == 200 and by["zoology_beta2_0.99"]["first_iter_val_acc_0.5"] == 200
    assert by["zoology"]["last_train_loss"] == pytest.approx(2.0)
    text = (out / "table.md").read_text()
    assert "[zoology_mlp](../zoology_mlp/)" in text and "| 0.2100 |" in text
    assert (out / "summary.csv").read_text().splitlines()[0].startswith("row,base,changes")
    assert capsys.readouterr().out == text


def test_an_empty_root_is_one_error_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        table.main([str(tmp_path)])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("error: no run")


def test_one_base_for_every_row(tmp_path):
    fake_run(tmp_path, "zoology_s0", [0.0, 0.01], 0.01)
    fake_run(tmp_path, "gpt_s0", [0.0, 0.02], 0.02, mlp=True, tie_lm_head=True)
    by = {r["row"]: r for r in table.main([str(tmp_path), "--base=zoology_s0"])}
    assert by["gpt_s0"]["changes"] == "mlp=True tie_lm_head=True" and by["zoology_s0"]["changes"] == "(the base)"


def test_the_links_work_from_the_folder_of_the_written_table(tmp_path):
    runs = tmp_path / "results" / "ablation"
    fake_run(runs, "zoology", [0.2, 0.6], 0.7)
    table.main([str(runs), f"--out={runs}"])  # the documented use: the table beside its runs
    assert "[zoology](zoology/)" in (runs / "table.md").read_text()
    table.main([str(runs), f"--out={tmp_path / 'docs'}"])
    assert "[zoology](../results/ablation/zoology/)" in (tmp_path / "docs" / "table.md").read_text()
    table.main([str(runs), f"--out={tmp_path / 'tmp'}", f"--links_from={runs}"])  # read from runs/ later
    assert "[zoology](zoology/)" in (tmp_path / "tmp" / "table.md").read_text()
