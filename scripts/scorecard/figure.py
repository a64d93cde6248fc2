"""The leaderboard's figure (issue 57, item 5): recall against speed, one panel per recall cell, drawn
from the cards (a library: the renderer ``leaderboard_figure`` of
``scripts/analysis/published/leaderboard.py`` writes it beside the cards).

- ``figure_points(cards, T)``: the plotted points, a JSON-able list with one entry per full-tier card
  (sorted by label): ``{"attention", "recall": {"64/4" | "256/16": {"protocol", "seeds", "solved",
  "n", "fraction"}}, "speed": {"T", "causal", "mode", "ratio", "q1", "q3", "version"} or None}``.
  A recall cell is the leaderboard's (``leaderboard.recall_column``: the card's newest protocol, its
  reported seeds, check seeds left out); "solved" counts its seeds at test accuracy
  ``testbeds.RECALL_SOLVED`` or more, "fraction" is solved / n. The speed cell is the card's
  causal forward + backward call at ``T`` (time / SDPA; its interquartile range ``q1``-``q3`` where
  the cell records one: version 2 cells do, version 1 cells do not, so those are None); None where
  the card has no such cell. An entry without a recall cell or without that speed cell is not drawn
  (``not_drawn`` says why).
- ``draw_figure(points, path)``: the PNG (matplotlib, Agg): recall's solved fraction (y) against
  time / SDPA (x, log scale, the interquartile range as an error bar), one panel per recall cell,
  each attention with its marker of ``scripts.plot_style``; the cells' protocol and version in a
  footnote (``versions_note``).

This module imports only names that ``leaderboard.py`` and ``testbeds.py`` have long had, and
matplotlib only when drawing.
"""
import os

from scripts.analysis.published.verdicts import solved
from scripts.scorecard import testbeds as tb
from scripts.scorecard.leaderboard import recall_column

FIGURE_T = 16384  # the longest T of the full tier's speed cells
PANELS = (("recall_small", "64/4"), ("recall_reference", "256/16"))  # (card role, panel name), left to right
SPREAD = 0.02  # vertical distance between two attentions' markers at one solved fraction (figure only)


def figure_points(cards, T=FIGURE_T):
    """The plotted points of the full-tier ``cards`` (the module docstring says what each holds)."""
    points = []
    for card in sorted((c for c in cards if c["tier"] == "full"), key=lambda c: c["label"]):
        recall = {}
        for role, panel in PANELS:
            column = recall_column(card, role)  # no root: budgets are not read, only the cells' values
            if column and column["values"]:
                k, n = solved(column["values"], tb.RECALL_SOLVED), len(column["values"])
                recall[panel] = {"protocol": column["version"], "seeds": column["seeds"], "solved": k, "n": n,
                                 "fraction": k / n}
        cell = next((c for c in card["cells"] if c["role"] == "speed" and c["T"] == T and c["causal"]
                     and c["mode"] == "forward_backward" and c.get("ratio") is not None), None)
        speed = cell and {"T": T, "causal": True, "mode": "forward_backward", "ratio": cell["ratio"],
                          "q1": cell.get("ratio_q1"), "q3": cell.get("ratio_q3"), "version": cell.get("version", 1)}
        points.append({"attention": card["label"], "recall": recall, "speed": speed})
    return points


def not_drawn(points):
    """[(attention, why)] of the points the figure leaves out: no recall cell, or no causal forward +
    backward speed cell."""
    out = []
    for p in points:
        if not p["recall"]:
            out.append((p["attention"], "no recall cell"))
        elif not p["speed"]:
            out.append((p["attention"], "no causal forward + backward time"))
    return out


def versions_note(points):
    """The protocol of the drawn recall cells and the version of the drawn speed cells, in words, with
    "(dated)" for those older than the testbeds' current ``RECALL_VERSION`` / ``SPEED_VERSION``."""
    drawn = [p for p in points if p["recall"] and p["speed"]]
    protocols = sorted({r["protocol"] for p in drawn for r in p["recall"].values()})
    versions = sorted({p["speed"]["version"] for p in drawn})

    def words(what, numbers, current, old):
        if not numbers:
            return f"{what}: none"
        dated = [n for n in numbers if n < current]
        if len(numbers) == 1:
            return f"{what} {numbers[0]}" + (f" (dated{old})" if dated else "")
        return (f"{what}s {' and '.join(map(str, numbers))}"
                + (f" ({' and '.join(map(str, dated))} dated{old})" if dated else ""))

    return (words("recall protocol", protocols, tb.RECALL_VERSION, "")
            + "; " + words("speed version", versions, tb.SPEED_VERSION, ": one median, no range"))


def draw_figure(points, path):
    """Draw the figure of ``points`` (``figure_points``) to the PNG ``path``. Markers of one panel at
    one solved fraction are spread ``SPREAD`` apart vertically (in the order of the attentions) so that
    none hides another; the footnote says so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    from scripts.plot_style import figure_styles, legend_outside

    drawn = [p for p in points if p["recall"] and p["speed"]]
    styles = figure_styles([p["attention"] for p in drawn])
    T = drawn[0]["speed"]["T"] if drawn else FIGURE_T
    ratios = [x for p in drawn for x in (p["speed"]["ratio"], p["speed"]["q1"], p["speed"]["q3"]) if x] or [1.0]
    low, high = min(min(ratios), 1.0) / 1.4, max(max(ratios), 1.0) * 1.4
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100) if low <= t <= high]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(9.0, 3.8), sharey=True)
    fractions = {}
    for ax, (_, panel) in zip(axes, PANELS):
        at = [p for p in drawn if panel in p["recall"]]
        for p in at:
            r, s, style = p["recall"][panel], p["speed"], styles[p["attention"]]
            fractions.setdefault(r["fraction"], f"{r['solved']}/{r['n']}")
            same = [q["attention"] for q in at if q["recall"][panel]["fraction"] == r["fraction"]]
            y = r["fraction"] + SPREAD * (same.index(p["attention"]) - (len(same) - 1) / 2)
            xerr = None
            if s["q1"] is not None and s["q3"] is not None:
                xerr = [[max(s["ratio"] - s["q1"], 0)], [max(s["q3"] - s["ratio"], 0)]]
            ax.errorbar(s["ratio"], y, xerr=xerr, marker=style["marker"], color=style["color"], linestyle="none",
                        markersize=7, capsize=3, label=p["attention"])
        ax.axvline(1.0, color="gray", linewidth=0.8, linestyle=":")
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"recall {panel}", fontsize=10)
        ax.set_xlabel(f"time / SDPA at T = {T:,} (causal, fwd + bwd; lower is better)", fontsize=8)
        ax.grid(True, axis="y", linewidth=0.4, alpha=0.5)
    fractions = {0.0: "0", 1.0: "1", **fractions}
    axes[0].set_ylim(-0.12, 1.12)
    axes[0].yaxis.set_major_locator(FixedLocator(sorted(fractions)))
    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: fractions.get(v, f"{v:g}")))
    axes[0].set_ylabel(f"seeds solved (test >= {tb.RECALL_SOLVED:g}; higher is better)", fontsize=8)
    legend_outside(fig, fontsize=8)
    left = not_drawn(points)
    foot = (f"{versions_note(points)}. The dotted line is SDPA's time; error bars: interquartile range where the "
            f"cell has one. Markers at one solved fraction are spread {SPREAD:g} apart vertically."
            + (f" Not drawn: {', '.join(f'{a} ({why})' for a, why in left)}." if left else ""))
    fig.text(0.0, -0.02, foot, fontsize=7, ha="left", va="top", wrap=True)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path
