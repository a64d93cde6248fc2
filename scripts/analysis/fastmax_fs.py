"""Fastmax's score function f(s) against softmax's exp(s), and the normalised weights of one example
row ("FAST: Factorizable Attention for Speeding up Transformers", Gerami, Hoover, Dulepet,
Duraiswami 2024, section 2.2, Eq. 7-8).

    python -m scripts.analysis.fastmax_fs [--s_min=-4] [--s_max=4] [--points=161] \\
        [--row=-3,-1,-0.5,0,0.5,1,2,3] [--a0= --a1= --a2= --temperature=] \\
        [--out=results/fastmax_fs/fastmax_fs]

f(s) = a0 + a1 s / T (p = 1) or a0 + a1 s / T + a2 (s / T)^2 (p = 2), with a0, a1, a2 and the
temperature T taken from a ``Fastmax`` module built with the given overrides (its defaults: 1, 1,
1/2, the paper's Eq. 8; T = 1 unless given, so that s is the score after the module's temperature,
whose default depends on the head dim) and evaluated by the specification,
``attention.fastmax.reference.kernel``; the factorized code's (c0, c1, c2)
(``attention.fastmax.function.coefficients``) are recorded beside them. The example row's weights
are the module's own implied attention matrix
(``reference.fastmax_weights``, normalization "none", so the scores are exactly the given ones):
w_j = f(s_j) / sum_n f(s_n), beside softmax's exp(s_j) / sum_n exp(s_n).

With normalization "max_norm" (lim = 1) at temperature 1, and with the default "paper" at the
default temperature for p = 1 (D), every score lies in [-1, 1] (shaded in the figure); "paper" at
temperature sqrt(D) (the default for p = 2) allows [-sqrt(D), sqrt(D)]. For p = 1, f(s) < 0 when
s < -a0 T / a1, which gives negative weights; for p = 2, f has its minimum a0 - a1^2 / (4 a2) at
s = -a1 T / (2 a2) and rises again below it, so a strongly negative score weighs as much as a positive one.

Outputs: ``<out>.csv`` (s, exp(s), f for p = 1 and 2, each divided by its value at s = 0),
``<out>_row.csv`` (the example row's scores and weights), ``<out>.png`` and the manifest entry.
"""
import argparse
import csv
import math
import os

import torch

import provenance
from attention.fastmax import Fastmax
from attention.fastmax.function import coefficients
from attention.fastmax.reference import fastmax_weights, kernel

DEFAULT_ROW = (-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0)


def fastmax_params(p, a0=None, a1=None, a2=None, temperature=None):
    """The coefficients of a ``Fastmax(p, ...)`` module built with the given overrides (None = the
    module's default; temperature None = 1, the score after the module's temperature): dict p, a0,
    a1, a2, temperature, plus "coefficients" = the factorized code's (c0, c1, c2) with the
    temperature folded in. Raises the module's ValueError on bad values."""
    overrides = {k: v for k, v in dict(a0=a0, a1=a1, a2=a2).items() if v is not None}
    overrides["temperature"] = 1.0 if temperature is None else temperature
    module = Fastmax(p=p, **overrides)
    params = dict(p=module.p, a0=module.a0, a1=module.a1, a2=module.a2, temperature=module.temperature)
    params["coefficients"] = list(coefficients(module.p, module.a0, module.a1, module.a2, module.temperature))
    return params


def f_of_s(s, params):
    """Fastmax's f at scores s (any shape, float64 tensor): ``reference.kernel(s / T, p, a0, a1, a2)``."""
    return kernel(s / params["temperature"], params["p"], params["a0"], params["a1"], params["a2"])


def row_weights(scores, params):
    """Normalised Fastmax weights of one query whose scores against T keys are ``scores``.

    Built as the module's implied attention matrix (``fastmax_weights``) with D = 1, q = 1 and
    k_j = s_j, normalization "none", non-causal, so s_j is exactly the score of key j.

    Args:
        scores: (T,) float64 tensor.
    Returns:
        (T,) float64 tensor summing to one (entries may be negative for p = 1).
    """
    T = scores.shape[0]
    q = torch.ones(1, 1, T, 1, dtype=torch.float64)
    k = scores.to(torch.float64).reshape(1, 1, T, 1)
    return fastmax_weights(q, k, causal=False, p=params["p"], a0=params["a0"], a1=params["a1"], a2=params["a2"],
                           temperature=params["temperature"], normalization="none")[0, 0, 0]


def curve_rows(s, p1, p2):
    """Rows of ``<out>.csv``: s, exp(s), f_p1, f_p2 and each divided by its value at s = 0."""
    e, f1, f2 = torch.exp(s), f_of_s(s, p1), f_of_s(s, p2)
    zero = torch.zeros(1, dtype=torch.float64)
    f1_0, f2_0 = float(f_of_s(zero, p1)), float(f_of_s(zero, p2))
    return [{"s": float(s[i]), "exp": float(e[i]), "f_p1": float(f1[i]), "f_p2": float(f2[i]),
             "exp_rel0": float(e[i]), "f_p1_rel0": float(f1[i]) / f1_0 if f1_0 else math.nan,
             "f_p2_rel0": float(f2[i]) / f2_0 if f2_0 else math.nan} for i in range(len(s))]


def example_rows(scores, p1, p2):
    """Rows of ``<out>_row.csv``: key index, score, softmax, fastmax p = 1 and p = 2 weights."""
    soft, w1, w2 = torch.softmax(scores, 0), row_weights(scores, p1), row_weights(scores, p2)
    return [{"key": j, "score": float(scores[j]), "softmax": float(soft[j]), "fastmax_p1": float(w1[j]),
             "fastmax_p2": float(w2[j])} for j in range(len(scores))]


def _write(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.8g}" if isinstance(v, float) else v) for k, v in row.items()})


def _label(params):
    a = f"a0 {params['a0']:g}, a1 {params['a1']:g}" + (f", a2 {params['a2']:g}" if params["p"] == 2 else "")
    return f"p = {params['p']} ({a}, T {params['temperature']:g})"


def plot(curve, row, path, bound, p1, p2):
    """Three panels: f and exp against s (linear), the same relative to s = 0 (log, positive values
    only), and the example row's weights as bars. ``bound`` shades |s| <= bound (max_norm's range);
    p1, p2 are the ``fastmax_params`` of the two curves (for the labels)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = [r["s"] for r in curve]
    fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(16, 4.6))
    for ax in (ax0, ax1):
        ax.axvspan(-bound, bound, color="0.92", label=f"|s| <= {bound:g} (max_norm, lim 1)")
        ax.plot(s, [r["exp"] for r in curve], "k-", label="exp(s) (softmax)")
    ax0.plot(s, [r["f_p1"] for r in curve], "C0-", label=_label(p1))
    ax0.plot(s, [r["f_p2"] for r in curve], "C1-", label=_label(p2))
    ax0.axhline(0, color="0.5", lw=0.6)
    ax0.set_ylim(min(-1.0, min(r["f_p1"] for r in curve) * 1.05), max(r["f_p2"] for r in curve) * 1.05)
    ax0.set_xlabel("score s")
    ax0.set_ylabel("unnormalised weight")
    ax0.set_title("f(s) against exp(s)", fontsize=10)
    ax0.legend(fontsize=8)
    for key, color in (("f_p1_rel0", "C0"), ("f_p2_rel0", "C1")):
        pts = [(r["s"], r[key]) for r in curve if r[key] > 0]
        ax1.plot([x for x, _ in pts], [y for _, y in pts], color=color, label=key.replace("_rel0", " / f(0)"))
    ax1.set_yscale("log")
    ax1.set_ylim(bottom=min(r["exp"] for r in curve) / 3)  # p = 1's f(s) -> 0 near s = -a0 T / a1
    ax1.set_xlabel("score s")
    ax1.set_ylabel("weight relative to a score of 0 (positive part)")
    ax1.set_title("dynamic range: f(s) / f(0) and exp(s) (log)", fontsize=10)
    ax1.legend(fontsize=8)
    n = len(row)
    width = 0.27
    x = list(range(n))
    for i, (key, color, label) in enumerate((("softmax", "k", "softmax"), ("fastmax_p1", "C0", "fastmax p = 1"),
                                             ("fastmax_p2", "C1", "fastmax p = 2"))):
        ax2.bar([j + (i - 1) * width for j in x], [r[key] for r in row], width, color=color, label=label)
    ax2.axhline(0, color="0.5", lw=0.6)
    ax2.set_xticks(x, [f"{r['score']:g}" for r in row])
    ax2.set_xlabel("scores of one query's keys")
    ax2.set_ylabel("normalised weight")
    ax2.set_title("weights of one example row (sum to 1)", fontsize=10)
    ax2.legend(fontsize=8)
    fig.suptitle("Fastmax f(s) against softmax exp(s) (FAST, section 2.2, Eq. 7-8)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--s_min", type=float, default=-4.0)
    ap.add_argument("--s_max", type=float, default=4.0)
    ap.add_argument("--points", type=int, default=161, help="grid points of s")
    ap.add_argument("--row", default=",".join(f"{x:g}" for x in DEFAULT_ROW), help="scores of the example row")
    for name in ("a0", "a1", "a2", "temperature"):
        ap.add_argument(f"--{name}", type=float, default=None, help="Fastmax parameter (default: the module's)")
    ap.add_argument("--out", default="results/fastmax_fs/fastmax_fs", help="output path without extension")
    args = ap.parse_args(argv)
    if not args.s_min < args.s_max or args.points < 2:
        ap.error("need --s_min < --s_max and --points >= 2")
    try:
        row_scores = torch.tensor([float(x) for x in args.row.split(",") if x.strip()], dtype=torch.float64)
    except ValueError:
        ap.error(f"--row must be comma-separated numbers; got {args.row!r}")
    if row_scores.numel() < 1:
        ap.error("--row needs at least one score")
    commit = provenance.git_commit()
    overrides = dict(a0=args.a0, a1=args.a1, a2=args.a2, temperature=args.temperature)
    try:
        p1, p2 = fastmax_params(1, **overrides), fastmax_params(2, **overrides)
    except ValueError as e:
        ap.error(str(e))
    s = torch.linspace(args.s_min, args.s_max, args.points, dtype=torch.float64)
    curve, row = curve_rows(s, p1, p2), example_rows(row_scores, p1, p2)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    _write(curve, args.out + ".csv")
    _write(row, args.out + "_row.csv")
    plot(curve, row, args.out + ".png", 1.0 / p2["temperature"], p1, p2)
    provenance.record(args.out, commit=commit, extra={"fastmax_p1": p1, "fastmax_p2": p2})
    print("key  score  softmax  fastmax_p1  fastmax_p2")
    for r in row:
        print(f"{r['key']:3d}  {r['score']:5g}  {r['softmax']:.4f}  {r['fastmax_p1']:.4f}  {r['fastmax_p2']:.4f}")
    print(f"wrote {args.out}.csv, {args.out}_row.csv, {args.out}.png")


if __name__ == "__main__":
    main()
