import csv
import json
import math

import numpy as np
import pytest
import torch

from attention.feature_maps import favor_plus_features
from scripts.analysis import kernel_variance as kv

D = 16


def _scaled_pairs(norm, cosines):
    q, k, _ = kv.pairs(D, [norm], cosines)
    scale = D ** -0.25
    qs, ks = q * scale, k * scale
    return qs, ks, np.exp((qs * ks).sum(-1).numpy()), ((qs + ks) ** 2).sum(-1).numpy()


def test_closed_forms_at_hand_computed_points():
    # Eq. 9 with R = 2, ||q + k||^2 / sqrt(D) = ln 2: cosh(ln 2) = (2 + 1/2) / 2 = 1.25 -> (2 / 2) 0.25
    assert kv.closed_form_relative_variance("favor_plus_iid", math.log(2), 2) == pytest.approx(0.25)
    # Lemma 1 with R = 1: exp(ln 3) - 1 = 2
    assert kv.closed_form_relative_variance("performer_iid", math.log(3), 1) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no closed form"):
        kv.closed_form_relative_variance("rff_clamped", 1.0, 4)


def test_pairs_have_the_requested_norms_and_cosines():
    q, k, meta = kv.pairs(8, [3.0], [-0.5, 0.25])
    assert torch.allclose(q.norm(dim=-1), torch.tensor([3.0, 3.0], dtype=torch.float64))
    assert torch.allclose(k.norm(dim=-1), torch.tensor([3.0, 3.0], dtype=torch.float64))
    assert torch.allclose((q * k).sum(-1) / 9, torch.tensor([-0.5, 0.25], dtype=torch.float64))
    assert meta == [(3.0, -0.5), (3.0, 0.25)]


def test_iid_favor_plus_variance_agrees_with_eq9_within_three_standard_errors():
    # ||q + k||^2 / sqrt(D) = 0.5 and 1.0: the fourth moment is moderate, so the sample SE is sound
    qs, ks, kernel, z_sq = _scaled_pairs(math.sqrt(2), [-0.5, 0.0])
    assert z_sq == pytest.approx([0.5, 1.0])
    for R in (16, 32):
        gen = torch.Generator().manual_seed(1234 + R)
        x = kv.sample_estimates("favor_plus_iid", qs, ks, R, 20000, gen).numpy()
        z = kv.z_scores(x, kernel, kv.closed_form_relative_variance("favor_plus_iid", z_sq, R))
        assert np.all(np.abs(z) < 3), (R, z)
        # unbiased: the mean agrees with exp(q.k / sqrt(D)) too
        mean, mean_se, _, _ = kv.sample_moments(x)
        assert np.all(np.abs(mean - kernel) < 3 * mean_se)


def _wrong_norm_rows(x, W):
    """FAVOR+ with rows of fixed norm sqrt(D) instead of Gaussian lengths (FAVOR+ReLU's rows)."""
    return favor_plus_features(x, W / W.norm(dim=-1, keepdim=True) * math.sqrt(W.shape[-1]))


def _wrong_normaliser(x, W):
    """FAVOR+ divided by sqrt(m) instead of sqrt(2m): every estimate doubles."""
    return favor_plus_features(x, W) * math.sqrt(2)


@pytest.mark.parametrize("wrong_map", [_wrong_norm_rows, _wrong_normaliser])
def test_a_wrong_feature_map_fails_the_same_check(wrong_map):
    qs, ks, kernel, z_sq = _scaled_pairs(math.sqrt(2), [-0.5, 0.0])
    R = 16
    W = kv.draw_projections("iid", 20000, R // 2, D, torch.Generator().manual_seed(1234 + R))
    x = kv.feature_estimate(wrong_map, qs, ks, W).numpy()
    z = kv.z_scores(x, kernel, kv.closed_form_relative_variance("favor_plus_iid", z_sq, R))
    assert np.max(np.abs(z)) > 3, z
    # and the right map on the very same draws passes
    right = kv.feature_estimate(favor_plus_features, qs, ks, W).numpy()
    assert np.all(np.abs(kv.z_scores(right, kernel, kv.closed_form_relative_variance("favor_plus_iid", z_sq, R))) < 3)


def test_closed_form_standard_error_matches_the_spread_of_repeated_monte_carlo_variances():
    qs, ks, kernel, z_sq = _scaled_pairs(1.0, [0.0])  # ||q + k||^2 / sqrt(D) = 0.5
    R, n, reps = 4, 50, 400
    x = kv.sample_estimates("favor_plus_iid", qs, ks, R, n * reps, torch.Generator().manual_seed(7)).numpy()
    rel_vars = x.reshape(reps, n).var(axis=1, ddof=1) / kernel[0] ** 2
    exact_se = kv.closed_form_se_of_relative_variance("favor_plus_iid", z_sq, R, n)[0]
    assert rel_vars.mean() == pytest.approx(kv.closed_form_relative_variance("favor_plus_iid", z_sq[0], R), rel=0.1)
    assert rel_vars.std(ddof=1) == pytest.approx(exact_se, rel=0.25)


def test_orthogonal_rows_stay_unbiased_with_lower_variance_and_clamping_biases_rff_upwards():
    qs, ks, kernel, z_sq = _scaled_pairs(math.sqrt(2), [-0.5, 0.0])
    R, n = 16, 20000
    orth = kv.sample_estimates("favor_plus_orthogonal", qs, ks, R, n, torch.Generator().manual_seed(3)).numpy()
    mean, mean_se, var, _ = kv.sample_moments(orth)
    assert np.all(np.abs(mean - kernel) < 3 * mean_se)
    assert np.all(var / kernel ** 2 < kv.closed_form_relative_variance("favor_plus_iid", z_sq, R))
    rff = kv.sample_estimates("rff", qs, ks, R, n, torch.Generator().manual_seed(4)).numpy()
    clamped = kv.sample_estimates("rff_clamped", qs, ks, R, n, torch.Generator().manual_seed(4)).numpy()
    assert np.all(clamped >= 0) and np.all(clamped >= rff)
    assert np.array_equal(clamped, np.maximum(rff, 0.0))  # same draws, only the clamp differs
    assert np.all(clamped.mean(1) >= rff.mean(1))


def test_bad_arguments_are_refused():
    qs, ks, _, _ = _scaled_pairs(1.0, [0.0])
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="unknown"):
        kv.sample_estimates("favor", qs, ks, 16, 10, gen)
    with pytest.raises(ValueError, match="even R"):
        kv.sample_estimates("rff", qs, ks, 15, 10, gen)
    with pytest.raises(ValueError, match="at least 2"):
        kv.sample_estimates("rff", qs, ks, 16, 1, gen)
    with pytest.raises(ValueError, match="cosines"):
        kv.pairs(8, [1.0], [1.5])


def test_cli_writes_csv_png_and_manifest(tmp_path):
    out = tmp_path / "kv"
    kv.main(["--D=8", "--R=4,8", "--norms=2", "--cosines=3", "--cos_max=0.5", "--draws=50",
             "--reference_R=8", f"--out={out}"])
    with open(f"{out}.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(kv.ESTIMATORS) * 2 * 3
    assert tuple(rows[0]) == kv.COLUMNS
    eq9 = [r for r in rows if r["estimator"] == "favor_plus_iid"]
    assert all(r["closed_form"].startswith("Eq. 9") and float(r["rel_var_closed_form"]) > 0 for r in eq9)
    assert all(r["rel_var_closed_form"] == "nan" for r in rows if r["estimator"] == "rff_clamped")
    assert (tmp_path / "kv.png").stat().st_size > 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["kv"]["draws"] == 50
    with pytest.raises(SystemExit):
        kv.main(["--R=4,8", "--reference_R=16", f"--out={out}"])
