import csv
import json
import math

import pytest
import torch

from scripts.analysis import fastmax_fs as fs


def _read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_f_of_s_at_hand_computed_points():
    p1, p2 = fs.fastmax_params(1), fs.fastmax_params(2)  # the module's defaults (paper Eq. 8)
    s = torch.tensor([-4.0, -1.0, 0.0, 1.0, 2.0], dtype=torch.float64)
    assert fs.f_of_s(s, p1).tolist() == pytest.approx([-3.0, 0.0, 1.0, 2.0, 3.0])
    assert fs.f_of_s(s, p2).tolist() == pytest.approx([5.0, 0.5, 1.0, 2.5, 5.0])
    assert p2["coefficients"] == [1.0, 1.0, 0.5] and p1["coefficients"] == [1.0, 1.0, 0.0]


def test_temperature_override_divides_the_score():
    p2 = fs.fastmax_params(2, temperature=2.0)
    # s = 2 at T = 2: 1 + 1 + 1/2
    assert float(fs.f_of_s(torch.tensor([2.0], dtype=torch.float64), p2)[0]) == pytest.approx(2.5)
    assert p2["coefficients"] == [1.0, 0.5, 0.125]
    with pytest.raises(ValueError, match="temperature"):
        fs.fastmax_params(2, temperature=0.0)


def test_row_weights_at_hand_computed_points():
    scores = torch.tensor([-3.0, -1.0, 0.0, 1.0, 3.0], dtype=torch.float64)
    # p = 2: f = 2.5, 0.5, 1, 2.5, 8.5 (sum 15); p = 1: f = -2, 0, 1, 2, 4 (sum 5)
    assert fs.row_weights(scores, fs.fastmax_params(2)).tolist() == pytest.approx([2.5 / 15, 0.5 / 15, 1 / 15,
                                                                                   2.5 / 15, 8.5 / 15])
    assert fs.row_weights(scores, fs.fastmax_params(1)).tolist() == pytest.approx([-0.4, 0.0, 0.2, 0.4, 0.8])


def test_cli_writes_curves_row_png_and_manifest(tmp_path):
    out = tmp_path / "fs"
    fs.main(["--s_min=-4", "--s_max=4", "--points=9", "--row=-3,0,3", f"--out={out}"])
    curve = _read(f"{out}.csv")
    assert [float(r["s"]) for r in curve] == [-4, -3, -2, -1, 0, 1, 2, 3, 4]
    at = {float(r["s"]): r for r in curve}
    assert float(at[1.0]["exp"]) == pytest.approx(math.e)
    assert float(at[-3.0]["f_p2"]) == pytest.approx(2.5) and float(at[3.0]["f_p2"]) == pytest.approx(8.5)
    assert float(at[-2.0]["f_p1"]) == pytest.approx(-1.0)
    row = _read(f"{out}_row.csv")
    # p = 2: f = 2.5, 1, 8.5 (sum 12); p = 1: -2, 1, 4 (sum 3); softmax: e^-3, 1, e^3
    assert [float(r["fastmax_p2"]) for r in row] == pytest.approx([2.5 / 12, 1 / 12, 8.5 / 12])
    assert [float(r["fastmax_p1"]) for r in row] == pytest.approx([-2 / 3, 1 / 3, 4 / 3])
    z = math.exp(-3) + 1 + math.exp(3)
    assert [float(r["softmax"]) for r in row] == pytest.approx([math.exp(-3) / z, 1 / z, math.exp(3) / z])
    assert (tmp_path / "fs.png").stat().st_size > 0
    assert json.loads((tmp_path / "manifest.json").read_text())["fs"]["fastmax_p2"]["a2"] == 0.5
    with pytest.raises(SystemExit):
        fs.main(["--row=a,b", f"--out={out}"])
