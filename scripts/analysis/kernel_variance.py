"""Monte Carlo mean and variance of random-feature estimates of the softmax kernel, against the
query-key score and the number of features R, with the closed forms beside them ("High Attention
Scores and Where to Find Them", sections 4.4-4.6, Eq. 9 and Figure 4; Choromanski et al. 2021,
"Rethinking Attention with Performers", Lemma 1).

    python -m scripts.analysis.kernel_variance [--D=64] [--R=16,32,64,128,256] [--norms=8,4,2] \\
        [--cosines=19] [--cos_max=0.9] [--draws=2000] [--seed=0] [--reference_R=64] \\
        [--out=results/kernel_variance/kernel_variance] [--num_threads=1]

The kernel is GPT-2's attention score before normalisation, kappa(q, k) = exp(q.k / sqrt(D)). Every
estimator gets q' = q D^(-1/4) and k' = k D^(-1/4) (so exp(q'.k') = kappa, as tree attention's
samplers and the Performer baseline do) and draws a fresh projection W for every sample:

- ``favor_plus_iid``, ``favor_plus_orthogonal``: the tree paper's FAVOR+ (Eq. 6, the hyperbolic
  positive features of Lemma 1, ``attention.feature_maps.favor_plus_features``), R features from
  R/2 rows of W; rows i.i.d. N(0, I_D), or orthogonal blocks with chi(D) row norms
  (``orthogonal_gaussian_matrices(..., norms="chi")``, what tree attention draws). Eq. 9 gives the
  relative variance for i.i.d. rows only:
  Var / kappa^2 = (2 / R) (cosh(||q + k||^2 / sqrt(D)) - 1).
- ``performer_iid``, ``performer_orthogonal``: Lemma 1's positive map exp(w.x - ||x||^2/2) / sqrt(m)
  with m = R rows (``performer_softmax_features``, the Performer baseline's map); for i.i.d. rows
  Lemma 1 gives Var / kappa^2 = (exp(||q + k||^2 / sqrt(D)) - 1) / R.
- ``rff``: random Fourier features (Eq. 5, ``rff_features``), R features from R/2 orthogonal
  chi-norm rows (as tree attention draws them); unbiased, values may be negative.
- ``rff_clamped``: the same estimate clamped to (.)_+, the mass tree attention's ``rff`` sampler
  uses for a bud of one key (section 2.3, 4.6). Biased upwards (E max(0, X) >= max(0, E X));
  no closed form.

For every (estimator, R, ||q||, ||k||, cos(q, k)) the n = ``--draws`` samples give the mean, the
unbiased sample variance and its standard error from the sample fourth central moment m4:
SE(s^2) = sqrt((m4 - s^4 (n - 3) / (n - 1)) / n). For the i.i.d. rows, whose feature moments are
known, the exact SE of the sample variance is given too (``rel_var_se_closed_form``): the estimates
are heavy-tailed (the kurtosis grows like exp(4 ||q + k||^2 / sqrt(D)) / R), so where it is large
the Monte Carlo variance is unreliable and usually far BELOW the true one; ``mc_reliable`` marks
rows whose exact relative SE is below 0.25.

Outputs: ``<out>.csv`` (one row per estimator, R, norm, cosine), ``<out>.png`` (rows = norms;
columns: mean / kappa and std / mean against q.k / sqrt(D) at ``--reference_R``, and Var / kappa^2
against R at cos = 0 and 0.5), and the manifest entry (``provenance.record``).
"""
import argparse
import csv
import math
import os

import numpy as np
import torch

import provenance
from attention.feature_maps import (favor_plus_features, orthogonal_gaussian_matrices, performer_softmax_features,
                                    position_seed, rff_features)

ESTIMATORS = ("favor_plus_iid", "favor_plus_orthogonal", "performer_iid", "performer_orthogonal", "rff",
              "rff_clamped")
CLOSED_FORMS = {"favor_plus_iid": "Eq. 9 (tree paper)", "performer_iid": "Lemma 1 (Performer)"}
MC_RELIABLE_SE = 0.25  # exact relative SE of the Monte Carlo variance below which a row is marked reliable
COLUMNS = ("estimator", "D", "R", "rows", "norm_q", "norm_k", "cosine", "score", "kernel", "draws", "mean",
           "mean_se", "mean_over_kernel", "var", "rel_var", "rel_var_se", "std_over_mean", "closed_form",
           "rel_var_closed_form", "rel_var_se_closed_form", "mc_reliable")


def _spec(estimator):
    """(feature kind, projection kind, clamp) of an estimator name; ValueError if unknown."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator {estimator!r} unknown; allowed: {', '.join(ESTIMATORS)}")
    if estimator.startswith("favor_plus"):
        return "favor_plus", estimator.split("_")[-1], False
    if estimator.startswith("performer"):
        return "performer", estimator.split("_")[-1], False
    return "rff", "orthogonal", estimator == "rff_clamped"


def rows_of(estimator, R):
    """Rows m of W for R features: R / 2 for the two-sided maps (FAVOR+ Eq. 6, RFF Eq. 5), R for
    Performer's positive map. Raises ValueError for R < 1, or R odd with a two-sided map."""
    feature, _, _ = _spec(estimator)
    if feature == "performer":
        if R < 1:
            raise ValueError(f"R must be >= 1; got {R}")
        return R
    if R < 2 or R % 2:
        raise ValueError(f"{estimator} needs an even R >= 2 (R/2 rows give R features); got {R}")
    return R // 2


def draw_projections(kind, n, m, D, generator):
    """n independent projections W (n, m, D) float64: "iid" rows N(0, I_D), or "orthogonal" blocks of
    min(m, D) orthogonal rows with chi(D) norms (``orthogonal_gaussian_matrices``). Every row is
    marginally N(0, I_D) either way, so the estimators stay unbiased."""
    if kind == "iid":
        return torch.randn(n, m, D, generator=generator, dtype=torch.float64)
    if kind == "orthogonal":
        return orthogonal_gaussian_matrices(n, m, D, generator, norms="chi")
    raise ValueError(f"projection kind {kind!r} unknown; allowed: iid, orthogonal")


def feature_estimate(feature_fn, q, k, W):
    """<phi(q), phi(k)> for every pair and every projection.

    Args:
        feature_fn: phi(x, W) with x (..., n, D) and W (n, m, D) -> (..., n, R) (the maps of
            ``attention.feature_maps`` accept one projection per row of the second-to-last dim).
        q, k: (P, D) float64, already scaled (the kernel estimated is exp(q.k)).
        W: (n, m, D) float64.

    Returns:
        (P, n) float64.
    """
    n = W.shape[0]
    fq = feature_fn(q[:, None, :].expand(-1, n, -1), W)
    fk = feature_fn(k[:, None, :].expand(-1, n, -1), W)
    return (fq * fk).sum(-1)


FEATURE_FNS = {"favor_plus": favor_plus_features, "rff": rff_features, "performer": performer_softmax_features}


def sample_estimates(estimator, q, k, R, n, generator, chunk=250):
    """n Monte Carlo samples of an estimator of exp(q.k) for every pair (q_p, k_p).

    Args:
        estimator: one of ESTIMATORS.
        q, k: (P, D) float64 (scaled: the target is exp(q_p . k_p)).
        R: number of features.
        n: number of samples (independent projections), >= 2.
        generator: torch.Generator of the projections.
        chunk: projections drawn at once (memory: 2 P chunk R float64 numbers).

    Returns:
        (P, n) float64.

    Raises:
        ValueError: unknown estimator, bad R, n < 2, or q, k of different shapes.
    """
    feature, kind, clamp = _spec(estimator)
    m = rows_of(estimator, R)
    if n < 2:
        raise ValueError(f"need at least 2 samples for a variance; got {n}")
    if q.shape != k.shape or q.dim() != 2:
        raise ValueError(f"q and k must both be (P, D); got {tuple(q.shape)} and {tuple(k.shape)}")
    fn = FEATURE_FNS[feature]
    out = []
    for start in range(0, n, chunk):
        W = draw_projections(kind, min(chunk, n - start), m, q.shape[1], generator)
        est = feature_estimate(fn, q, k, W)
        out.append(est.clamp_min(0.0) if clamp else est)
    return torch.cat(out, dim=1)


def sample_moments(x):
    """Mean, its SE, the unbiased variance and the SE of that variance from the fourth central
    moment, along the last axis of x (..., n) (numpy float64).

    SE(s^2)^2 = (m4 - s^4 (n - 3) / (n - 1)) / n, m4 = mean((x - mean)^4) (the large-sample variance of
    the sample variance, with s^2 in place of sigma^2)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    mean = x.mean(-1)
    dev = x - mean[..., None]
    var = (dev ** 2).sum(-1) / (n - 1)
    m4 = (dev ** 4).mean(-1)
    se_var = np.sqrt(np.maximum(m4 - var ** 2 * (n - 3) / (n - 1), 0.0) / n)
    return mean, np.sqrt(var / n), var, se_var


def closed_form_relative_variance(estimator, z_sq, R):
    """Var / kappa^2 of an i.i.d. estimator with R features; z_sq = ||q' + k'||^2 = ||q + k||^2 / sqrt(D).

    favor_plus_iid (Eq. 9): (2 / R) (cosh(z_sq) - 1) = (4 / R) sinh(z_sq / 2)^2.
    performer_iid (Lemma 1): (exp(z_sq) - 1) / R.

    Raises:
        ValueError: an estimator without a closed form (orthogonal rows, RFF).
    """
    z_sq = np.asarray(z_sq, dtype=np.float64)
    if estimator == "favor_plus_iid":
        return 4.0 / R * np.sinh(z_sq / 2) ** 2
    if estimator == "performer_iid":
        return np.expm1(z_sq) / R
    raise ValueError(f"no closed form for {estimator!r}; only for {', '.join(CLOSED_FORMS)}")


def _relative_raw_moments(estimator, z_sq, j):
    """E[(Y / E Y)^j] of ONE random direction's term Y (one w ~ N(0, I)), w.z ~ N(0, z_sq):
    Y ∝ cosh(w.z) (FAVOR+), Y ∝ exp(w.z) (Performer)."""
    if estimator == "performer_iid":
        return np.exp((j * j - j) * z_sq / 2)
    return sum(math.comb(j, l) * np.exp(((j - 2 * l) ** 2 - j) * z_sq / 2) for l in range(j + 1)) / 2 ** j


def closed_form_se_of_relative_variance(estimator, z_sq, R, n):
    """Exact standard error of the Monte Carlo relative variance (sample variance of n estimates,
    divided by kappa^2) for the i.i.d. estimators, from the moments of one direction's term:
    with mu2, mu4 the central moments of the mean of m i.i.d. terms (mu4 = (mu4_1 + 3 (m - 1) mu2_1^2)
    / m^3), Var(s^2) = mu4 / n - mu2^2 (n - 3) / (n (n - 1)).

    Raises:
        ValueError: an estimator without a closed form.
    """
    if estimator not in CLOSED_FORMS:
        raise ValueError(f"no closed form for {estimator!r}; only for {', '.join(CLOSED_FORMS)}")
    z_sq = np.asarray(z_sq, dtype=np.float64)
    m = rows_of(estimator, R)
    m2, m3, m4 = (_relative_raw_moments(estimator, z_sq, j) for j in (2, 3, 4))
    mu2_1 = m2 - 1.0
    mu4_1 = m4 - 4.0 * m3 + 6.0 * m2 - 3.0
    mu2 = mu2_1 / m
    mu4 = (mu4_1 + 3.0 * (m - 1) * mu2_1 ** 2) / m ** 3
    return np.sqrt(np.maximum(mu4 / n - mu2 ** 2 * (n - 3) / (n * (n - 1)), 0.0))


def z_scores(samples, kernel, rel_var_closed_form):
    """(Monte Carlo relative variance - closed form) / its standard error from the sample fourth
    moment (``sample_moments``), per pair: the check of Eq. 9 (|z| < 3 expected for a correct
    i.i.d. FAVOR+ map where the fourth moment is moderate).

    Args:
        samples: (P, n) estimates; kernel: (P,) exp(q.k / sqrt(D)); rel_var_closed_form: (P,).
    Returns:
        (P,) float64 numpy array.
    """
    _, _, var, var_se = sample_moments(samples)
    kernel = np.asarray(kernel, dtype=np.float64)
    return (var / kernel ** 2 - np.asarray(rel_var_closed_form)) / (var_se / kernel ** 2)


def pairs(D, norms, cosines):
    """Query-key pairs q = N e_1, k = N (c e_1 + sqrt(1 - c^2) e_2) for every norm N and cosine c
    (both distributions of W are rotation invariant, so only the norms and the angle matter).

    Returns:
        (q, k, meta): q, k (P, D) float64 UNSCALED; meta a list of (norm, cosine) per pair.

    Raises:
        ValueError: D < 2, a norm < 0, or a cosine outside [-1, 1].
    """
    if D < 2:
        raise ValueError(f"D must be >= 2 (q and k span a plane); got {D}")
    qs, ks, meta = [], [], []
    for N in norms:
        if N < 0:
            raise ValueError(f"norms must be >= 0; got {N}")
        for c in cosines:
            if not -1.0 <= c <= 1.0:
                raise ValueError(f"cosines must lie in [-1, 1]; got {c}")
            q = torch.zeros(D, dtype=torch.float64)
            k = torch.zeros(D, dtype=torch.float64)
            q[0] = N
            k[0], k[1] = N * c, N * math.sqrt(max(0.0, 1.0 - c * c))
            qs.append(q)
            ks.append(k)
            meta.append((float(N), float(c)))
    return torch.stack(qs), torch.stack(ks), meta


def run(D, Rs, norms, cosines, draws, seed=0, estimators=ESTIMATORS):
    """All rows of the CSV (dicts keyed by COLUMNS). The generator of (estimator, R) is seeded with a
    hash of (seed, estimator index, R), so each estimator's draws do not depend on the others."""
    q, k, meta = pairs(D, norms, cosines)
    scale = D ** -0.25
    qs, ks = q * scale, k * scale
    score = (qs * ks).sum(-1).numpy()  # q.k / sqrt(D)
    z_sq = ((qs + ks) ** 2).sum(-1).numpy()  # ||q + k||^2 / sqrt(D)
    kernel = np.exp(score)
    rows = []
    for estimator in estimators:
        for R in Rs:
            gen = torch.Generator().manual_seed(position_seed(position_seed(seed, ESTIMATORS.index(estimator)), R))
            x = sample_estimates(estimator, qs, ks, R, draws, gen).numpy()
            mean, mean_se, var, var_se = sample_moments(x)
            closed = estimator in CLOSED_FORMS
            cf = closed_form_relative_variance(estimator, z_sq, R) if closed else None
            cf_se = closed_form_se_of_relative_variance(estimator, z_sq, R, draws) if closed else None
            for p, (N, c) in enumerate(meta):
                rel_se = cf_se[p] / cf[p] if closed and cf[p] > 0 else math.nan
                rows.append({
                    "estimator": estimator, "D": D, "R": R, "rows": rows_of(estimator, R), "norm_q": N, "norm_k": N,
                    "cosine": c, "score": score[p], "kernel": kernel[p], "draws": draws, "mean": mean[p],
                    "mean_se": mean_se[p], "mean_over_kernel": mean[p] / kernel[p], "var": var[p],
                    "rel_var": var[p] / kernel[p] ** 2, "rel_var_se": var_se[p] / kernel[p] ** 2,
                    "std_over_mean": math.sqrt(var[p]) / mean[p] if mean[p] > 0 else math.nan,
                    "closed_form": CLOSED_FORMS.get(estimator, ""),
                    "rel_var_closed_form": cf[p] if closed else math.nan,
                    "rel_var_se_closed_form": cf_se[p] if closed else math.nan,
                    "mc_reliable": (bool(rel_se < MC_RELIABLE_SE) if closed and cf[p] > 0 else ""),
                })
    return rows


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({c: (f"{v:.6g}" if isinstance(v, float) else v) for c, v in row.items()})


STYLE = {"favor_plus_iid": ("C0", "o"), "favor_plus_orthogonal": ("C1", "s"), "performer_iid": ("C2", "^"),
         "performer_orthogonal": ("C3", "v"), "rff": ("C4", "P"), "rff_clamped": ("C5", "D")}


def plot(rows, path, reference_R, versus_R_cosines=(0.0, 0.5)):
    """The figure: one row of panels per norm; columns (a) mean / kappa and (b) std / mean against
    q.k / sqrt(D) at R = reference_R (closed forms as lines), (c) Var / kappa^2 against R at the
    grid cosines nearest to ``versus_R_cosines`` (closed forms as lines). Unreliable Monte Carlo points of the
    i.i.d. estimators (``mc_reliable`` False) are drawn hollow."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    norms = sorted({r["norm_q"] for r in rows}, reverse=True)
    estimators = [e for e in ESTIMATORS if any(r["estimator"] == e for r in rows)]
    grid = sorted({r["cosine"] for r in rows})
    versus_R_cosines = [min(grid, key=lambda g: abs(g - c)) for c in versus_R_cosines]  # nearest on the grid
    D = rows[0]["D"]
    fig, axes = plt.subplots(len(norms), 3, figsize=(16, 4.2 * len(norms)), squeeze=False)
    for i, N in enumerate(norms):
        ax_mean, ax_std, ax_R = axes[i]
        for e in estimators:
            color, marker = STYLE[e]
            sel = sorted((r for r in rows if r["estimator"] == e and r["norm_q"] == N and r["R"] == reference_R),
                         key=lambda r: r["score"])
            if not sel:
                continue
            s = np.array([r["score"] for r in sel])
            hollow = np.array([r["mc_reliable"] is False for r in sel])
            for ax, y in ((ax_mean, [r["mean_over_kernel"] for r in sel]),
                          (ax_std, [r["std_over_mean"] for r in sel])):
                y = np.array(y, dtype=float)
                ax.plot(s, y, color=color, lw=0.8, alpha=0.6)
                ax.scatter(s[~hollow], y[~hollow], color=color, marker=marker, s=16, label=e)
                ax.scatter(s[hollow], y[hollow], facecolors="none", edgecolors=color, marker=marker, s=16)
            if e in CLOSED_FORMS:
                rel = np.array([r["rel_var_closed_form"] for r in sel])
                ax_std.plot(s, np.sqrt(rel), color=color, ls="--", lw=1.2, label=f"{e}: {CLOSED_FORMS[e]}")
            for c, ls in zip(versus_R_cosines, ("-", ":")):
                selR = sorted((r for r in rows if r["estimator"] == e and r["norm_q"] == N
                               and abs(r["cosine"] - c) < 1e-9), key=lambda r: r["R"])
                if not selR:
                    continue
                Rs = np.array([r["R"] for r in selR])
                y = np.array([r["rel_var"] for r in selR])
                hollowR = np.array([r["mc_reliable"] is False for r in selR])
                ax_R.plot(Rs, y, color=color, ls=ls, lw=0.8)
                ax_R.scatter(Rs[~hollowR], y[~hollowR], color=color, marker=marker, s=14)
                ax_R.scatter(Rs[hollowR], y[hollowR], facecolors="none", edgecolors=color, marker=marker, s=14)
                if e in CLOSED_FORMS:
                    ax_R.plot(Rs, [r["rel_var_closed_form"] for r in selR], color=color, ls="--", lw=1.2)
        ax_mean.axhline(1.0, color="k", lw=0.6)
        ax_mean.set_yscale("log")
        ax_mean.set_xlabel("q.k / sqrt(D)")
        ax_mean.set_ylabel("MC mean / exp(q.k / sqrt(D))")
        ax_mean.set_title(f"mean, ||q|| = ||k|| = {N:g}, D = {D}, R = {reference_R}", fontsize=9)
        ax_std.axhline(1.0, color="k", lw=0.6)
        ax_std.set_yscale("log")
        ax_std.set_xlabel("q.k / sqrt(D)")
        ax_std.set_ylabel("std / mean (dashed: closed form, i.i.d.)")
        ax_std.set_title(f"relative spread, ||q|| = ||k|| = {N:g}, R = {reference_R} (hollow: MC unreliable)",
                         fontsize=9)
        ax_R.set_xscale("log", base=2)
        ax_R.set_yscale("log")
        ax_R.set_xlabel("R (features)")
        ax_R.set_ylabel("Var / exp(q.k / sqrt(D))^2 (dashed: closed form)")
        ax_R.set_title(f"against R, ||q|| = ||k|| = {N:g}; cos(q, k) = {versus_R_cosines[0]:g} solid, "
                       f"{versus_R_cosines[1]:g} dotted", fontsize=9)
    draws = rows[0]["draws"]
    handles, labels = axes[0, 1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"Random-feature estimates of exp(q.k / sqrt(D)): {draws} projections per point "
                 f"(tree paper sections 4.4-4.6, Eq. 9, Figure 4)", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _floats(text, name):
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--{name} must be comma-separated numbers; got {text!r}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--D", type=int, default=64, help="head dimension")
    ap.add_argument("--R", default="16,32,64,128,256", help="feature counts (even)")
    ap.add_argument("--norms", default="8,4,2", help="||q|| = ||k|| values (Figure 4: sqrt(D) = 8)")
    ap.add_argument("--cosines", type=int, default=19, help="cosine grid points from -cos_max to cos_max")
    ap.add_argument("--cos_max", type=float, default=0.9,
                    help="largest |cos(q, k)| (at +-1 some estimators are exact, which hides the log scale)")
    ap.add_argument("--draws", type=int, default=2000, help="Monte Carlo samples (projections) per point")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference_R", type=int, default=64, help="R of the panels against the score (Figure 4: 64)")
    ap.add_argument("--estimators", default=",".join(ESTIMATORS), help="comma-separated subset of " + ", ".join(ESTIMATORS))
    ap.add_argument("--out", default="results/kernel_variance/kernel_variance", help="output path without extension")
    ap.add_argument("--num_threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.num_threads)
    Rs = [int(r) for r in _floats(args.R, "R")]
    estimators = [e for e in args.estimators.split(",") if e]
    for e in estimators:
        _spec(e)
    if args.reference_R not in Rs:
        ap.error(f"--reference_R={args.reference_R} must be one of --R ({args.R})")
    if args.cosines < 2:
        ap.error("--cosines must be >= 2")
    commit = provenance.git_commit()
    if not 0 < args.cos_max <= 1:
        ap.error("--cos_max must lie in (0, 1]")
    cosines = np.linspace(-args.cos_max, args.cos_max, args.cosines).round(12).tolist()
    rows = run(args.D, Rs, _floats(args.norms, "norms"), cosines, args.draws, args.seed, estimators)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_csv(rows, args.out + ".csv")
    plot(rows, args.out + ".png", args.reference_R)
    provenance.record(args.out, commit=commit, extra={"num_threads": args.num_threads, "seed": args.seed,
                                                      "draws": args.draws})
    checked = [r for r in rows if r["estimator"] == "favor_plus_iid" and r["mc_reliable"] is True]
    if checked:
        z = [abs(r["rel_var"] - r["rel_var_closed_form"]) / r["rel_var_se_closed_form"] for r in checked]
        print(f"favor_plus_iid vs Eq. 9 where the Monte Carlo is reliable ({len(checked)} points): "
              f"median |z| {np.median(z):.2f}, max {max(z):.2f} (exact SE)")
    print(f"wrote {args.out}.csv, {args.out}.png")


if __name__ == "__main__":
    main()
