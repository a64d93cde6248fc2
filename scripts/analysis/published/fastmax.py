"""Fastmax's own small studies (docs/fastmax.md): the weights f(s) gives one row of scores beside
softmax's, and the dropout variants on Tiny Shakespeare. Its benchmarks are ``benchmark``'s, its
language-model runs ``lm``'s and its normalization study on recall ``recall``'s.

Renderers (``RENDERERS``):

- ``fastmax_fs_row <row.csv>``: the example row of ``scripts.analysis.fastmax_fs``: each key's score
  and its weight under softmax and fastmax p = 1 and p = 2 (4 decimals).
- ``dropout_variants <curves.csv>``: the lowest validation loss of each run of the dropout study
  (``scripts/sweeps/shakespeare_dropout.sh``'s CSV of curves).
"""
from scripts.analysis.published.formatting import markdown_table
from scripts.analysis.published.loading import SourceMissing, load_csv

FS_COLUMNS = (("softmax", "softmax"), ("fastmax_p1", "fastmax p = 1"), ("fastmax_p2", "fastmax p = 2"))


def render_fastmax_fs_row(root, row_csv):
    """The example row of scripts/analysis/fastmax_fs.py (``row_csv``: a line per key, its ``score``
    and the weight each method gives it): a column per key (its score, %g), a row per method, the
    weights with 4 decimals. Raises SourceMissing when the file is absent, empty or lacks a method."""
    rows = load_csv(root, row_csv)
    if not rows or any(column not in rows[0] for column, _ in FS_COLUMNS):
        raise SourceMissing(f"a rendered block needs the columns score, "
                            f"{', '.join(c for c, _ in FS_COLUMNS)} in {row_csv}")
    header = ["score s_j", *(f"{float(r['score']):g}" for r in rows)]
    return markdown_table(header, [[name, *(f"{float(r[column]):.4f}" for r in rows)] for column, name in FS_COLUMNS])


def render_dropout_variants(root, curves_csv):
    """The dropout study (``curves_csv``: label, curve, iter, loss), a row per run in the file's order:
    its lowest validation loss (4 decimals) and the iteration of it. Raises SourceMissing when the
    file is absent or holds no validation curve."""
    lowest = {}
    for r in load_csv(root, curves_csv):
        if r["curve"] == "val":
            loss, it = float(r["loss"]), int(r["iter"])
            if r["label"] not in lowest or loss < lowest[r["label"]][0]:
                lowest[r["label"]] = (loss, it)
    if not lowest:
        raise SourceMissing(f"a rendered block needs validation curves (curve val) in {curves_csv}; it has none")
    return markdown_table(["variant", "lowest val loss", "at iteration"],
                          [[label, f"{loss:.4f}", it] for label, (loss, it) in lowest.items()])


RENDERERS = {"fastmax_fs_row": render_fastmax_fs_row, "dropout_variants": render_dropout_variants}
