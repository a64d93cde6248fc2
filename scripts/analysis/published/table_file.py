"""The ``table_file`` renderer: a table of a table tool's markdown output, copied verbatim.

Renderers (``RENDERERS``):

- ``table_file <tool output .md> [n=1]``: the n-th table of a table tool's markdown output, verbatim
  (only files that tests/scripts/test_results_rebuild.py rebuilds from the runs).
"""
from scripts.analysis.published.loading import RenderError, marker_number, read_text


def render_table_file(root, path, n="1"):
    """The ``n``-th markdown table (1-based) of a table tool's output ``path`` (a .md under results/),
    verbatim. Only for a file that ``tests/scripts/test_results_rebuild.py`` makes again from the
    committed runs (its test checks that every such block names one), so the table stays the
    tool's. Raises SourceMissing when the file is absent, RenderError when it has fewer tables."""
    tables, current = [], []
    for line in read_text(root, path).splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    k = marker_number("table_file", n)
    if not 1 <= k <= len(tables):
        raise RenderError(f"table_file: {path} has {len(tables)} table(s), not a table number {n}")
    return "\n".join(tables[k - 1]) + "\n"


RENDERERS = {"table_file": render_table_file}
