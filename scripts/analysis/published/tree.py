"""Tree attention: its benchmark against the authors' code and its sweeps over samplers and E
(docs/tree_attention.md); the samplers' order and short names that the tree sweep's and the recall
tree study's tables and plots use.

Renderers (``RENDERERS``):

- ``tree_sweep <table.csv> [protocol=blocks] [normalization=bud_mean] [quantity=change|value]``: a
  tree sweep's table from ``tree_sweep_table``'s CSV, a row per sampler and a column per E (the
  paired change of perplexity against exact attention, or the metric itself), and the cost row.
- ``tree_bench <run.json> [<run.json> ...] [L=1024] [E=0.5]``: the tree benchmark's seconds per block
  of each implementation, a column per run, our kernel's factor over the authors' code in brackets.
- ``alignment_heads <summary.csv> [quantity=score] [column=frac_negative]``: the alignments tool's
  per-head summary as a layer x head grid (the share of negative query-key scores, in %).
"""
import math
import os
import statistics

from scripts.analysis.published.formatting import markdown_table
from scripts.analysis.published.loading import RenderError, SourceMissing, load_csv, load_json, marker_number, sources


TREE_BENCH = "results/bench_tree/bench_tree_1024_run*.json"
TREE_AIM_SPEEDUP = 100  # issue 27: the CPU kernel 100x the authors' np_attention.py (L 1024, E 0.5, one thread)


def tree_speedups(root):
    """[(threads, speedup, our seconds, their seconds)] of the tree attention CPU kernel (float32)
    against the authors' code (the bench's ``casinoformer`` rows) in the TREE_BENCH runs, and the
    (L, E, H, D) of those rows."""
    out, setting = [], None
    for rel in sources(root, TREE_BENCH):
        data = load_json(root, rel)
        for s in data["speedups"]:
            if s["slow"] == "casinoformer" and s["fast"] == "cpu" and s["fast_dtype"] == "float32":
                out.append((s["fast_threads"], s["speedup"], s["fast_seconds"], s["slow_seconds"]))
                setting = (s["L"], s["E"], data["config"]["H"], data["config"]["D"])
    return out, setting


# the tree benchmark's implementations, as its tables name them: (impl, threads, dtype) -> row label
TREE_BENCH_ROWS = [
    (("casinoformer", 1, "float64"), "authors' `np_attention.py` (float64, 1 thread)"),
    (("numpy_authors", 1, "float64"), "our re-implementation of their NumPy design"),
    (("cpu", 1, "float32"), "CPU kernel, float32, 1 thread"),
    (("cpu", 1, "float64"), "CPU kernel, float64, 1 thread (their precision)"),
    (("cpu", 2, "float32"), "CPU kernel, float32, 2 threads"),
    (("vectorized", 1, "float32"), "`vectorized` (PyTorch ops), float32, 1 thread"),
    (("reference", 1, "float64"), "reference (one query at a time)"),
    (("softmax", 1, ""), "exact attention, SDPA, 1 thread"),
]


def render_tree_bench(root, *files, L="1024", E="0.5"):
    """docs/tree_attention.md's speed tables: seconds per block of each implementation
    (TREE_BENCH_ROWS) at block length ``L`` and ``E`` (exact SDPA at E = 1) in each benchmark run
    (``files``: scripts/bench/tree.py JSONs, a column each, named by file), 3 significant digits,
    "(extrapolated)" where the run timed a subset of queries; in brackets for our kernel and the
    vectorized path, how many times faster than the authors' code in the same run. Raises
    SourceMissing when a file is absent or has no row of the authors' code at (L, E)."""
    L, E = marker_number("tree_bench", L), marker_number("tree_bench", E, float)
    runs = []
    for rel in files:
        rows = load_json(root, rel)["rows"]
        timed = {(r["impl"], r["threads"], r["dtype"]): r for r in rows
                 if r["L"] == L and (r["E"] == E or r["impl"] == "softmax")}
        if ("casinoformer", 1, "float64") not in timed:
            raise SourceMissing(f"a rendered block needs the authors' code at L = {L}, E = {E:g} in {rel}; it has none")
        runs.append((os.path.splitext(os.path.basename(rel))[0], timed))
    table = []
    for key, label in TREE_BENCH_ROWS:
        if not any(key in timed for _, timed in runs):
            continue
        cells = []
        for _, timed in runs:
            row = timed.get(key)
            if row is None:
                cells.append("-")
                continue
            text = f"{row['seconds']:.3g}" + (" (extrapolated)" if row["extrapolated"] else "")
            if key[0] in ("cpu", "vectorized"):
                text += f" ({timed[('casinoformer', 1, 'float64')]['seconds'] / row['seconds']:.1f}x)"
            cells.append(text)
        table.append([label, *cells])
    return markdown_table(["implementation", *(f"`{name}`" for name, _ in runs)], table)


# tree attention's samplers in the order of the paper's Figure 2, and their short names there
# (the tree sweep's and the recall tree study's tables and plots)
SAMPLER_ORDER = ["uniform", "edh", "alignment", "positive_alignment", "rff", "favor_plus", "favor_plus_relu"]
SAMPLER_LABEL = {"uniform": "Uniform", "edh": "EDH", "alignment": "Align.", "positive_alignment": "Pos. Align.",
                 "rff": "RFF", "favor_plus": "FAVOR+", "favor_plus_relu": "FAVOR+ReLU"}


def render_tree_sweep(root, table_csv, protocol="blocks", normalization="bud_mean", quantity="change"):
    """A tree sweep's table (docs/tree_attention.md) from the "config" rows of ``tree_sweep_table``'s
    CSV (``table_csv``) for ``protocol`` and ``normalization``: a row per sampler, a column per E,
    each cell mean ± sd across sampling seeds of ``quantity``, "change" (the paired change of
    perplexity against exact attention, 100 (exp(NLL_tree - NLL_exact) - 1) %) or "value" (the
    protocol's metric); then the inner products as a fraction of exact attention's. Raises
    SourceMissing when the CSV has no such rows, RenderError for another ``quantity``."""
    if quantity not in ("change", "value"):
        raise RenderError(f"tree_sweep: quantity={quantity!r}; allowed: change, value")
    rows = [r for r in load_csv(root, table_csv) if r["row"] == "config" and r["attention"] == "tree"
            and r["protocol"] == protocol and r["normalization"] == normalization]
    if not rows:
        raise SourceMissing(f"a rendered block needs the tree rows ({protocol}, {normalization}) of {table_csv}")
    Es = sorted({float(r["E"]) for r in rows})
    by = {(r["sampler"], float(r["E"])): r for r in rows}
    samplers = sorted({r["sampler"] for r in rows}, key=lambda s: (SAMPLER_ORDER.index(s) if s in SAMPLER_ORDER
                                                                  else len(SAMPLER_ORDER), s))
    columns = {"change": ("change_pct", "change_pct_std", "+.2f", ".2f"), "value": ("value", "std", ".1f", ".1f")}
    mean_key, sd_key, mean_format, sd_format = columns[quantity]

    def cell(r):
        mean, sd = float(r[mean_key]), float(r[sd_key] or "nan")
        return f"{mean:{mean_format}}" if math.isnan(sd) else f"{mean:{mean_format}} ± {sd:{sd_format}}"

    table = [[SAMPLER_LABEL.get(s, s), *(cell(by[(s, E)]) if (s, E) in by else "–" for E in Es)] for s in samplers]
    cost = [statistics.fmean(float(r["cost_fraction"]) for r in rows if float(r["E"]) == E) for E in Es]
    table.append(["inner products / exact", *(f"{c:.3f}" for c in cost)])
    return markdown_table(["sampler", *(f"E = {E:g}" for E in Es)], table)


ALIGNMENT_COLUMNS = ("frac_negative", "negative_share")  # fractions, written in %


def render_alignment_heads(root, summary_csv, quantity="score", column="frac_negative"):
    """scripts/analysis/alignments.py's per-head summary (``summary_csv``) as a grid: a row per layer,
    a column per head, the ``column`` (a fraction: ``ALIGNMENT_COLUMNS``) of ``quantity`` (score or
    cosine) in % with one decimal. Raises SourceMissing when the file has no row of ``quantity``,
    RenderError for another column."""
    if column not in ALIGNMENT_COLUMNS:
        raise RenderError(f"alignment_heads: column={column!r}: one of {', '.join(ALIGNMENT_COLUMNS)}")
    rows = [r for r in load_csv(root, summary_csv) if r["quantity"] == quantity]
    if not rows:
        raise SourceMissing(f"a rendered block needs rows of {quantity} in {summary_csv}; it has none")
    by = {(int(r["layer"]), int(r["head"])): float(r[column]) for r in rows}
    layers, heads = sorted({k[0] for k in by}), sorted({k[1] for k in by})
    table = [[layer, *(f"{100 * by[layer, h]:.1f}%" if (layer, h) in by else "-" for h in heads)] for layer in layers]
    return markdown_table(["layer", *(f"head {h}" for h in heads)], table)


RENDERERS = {"tree_sweep": render_tree_sweep, "tree_bench": render_tree_bench, "alignment_heads": render_alignment_heads}
