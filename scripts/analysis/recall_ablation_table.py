"""The MQAR ablation table (issue 42, item 1; ``scripts/sweeps/recall_ablation.sh``): one row per run,
what it changes from its base row, and how far it got.

    python -m scripts.analysis.recall_ablation_table out/recall_ablation --out=results/recall/ablation_64_4

A row is a run ``<root>/<row>`` (a run folder, or its packed file ``<row>.tar.xz``: ``runs.py``) with
train.py's ``final_metrics.json`` and ``log.jsonl``. Its
base is the row named by the part of its name before the first "_" (``zoology_mlp`` -> ``zoology``),
or the row ``--base`` names for every row;
"changes" lists the configuration keys (``published.recall.ABLATION_COMPARED``) whose values differ from the
base's, read from both runs' ``final_metrics.json`` (nothing typed by hand; the rows and the markdown
are ``scripts/analysis/published/recall.py``'s, which also renders them into docs/recall.md). Columns: test accuracy (the whole
test split, weights of the best validation step), the best validation accuracy and its step, the
first evaluated step with validation accuracy >= 0.5 ("-" if none: the plateau), the last
training loss logged, the run's CPU, and the run path (its packed file or folder, with the logs, is
linked from the markdown). The links are relative to the folder of the table.md that holds them
(``--out``), so that they work where the file lies; ``--links_from`` names the folder the table will be
read from when it is written elsewhere first (tests/scripts/test_results_rebuild.py rebuilds the
committed tables in a temporary folder). The copy of the table in docs/recall.md is
``published/recall.py``'s ``recall_ablation`` block, whose ``link_root`` is relative to docs/.

Writes ``<out>/summary.csv``, ``<out>/table.md`` and their entry ``table`` in ``<out>/manifest.json``;
prints the markdown (the same as table.md).

Raises SystemExit (status 2) when the root holds no run.
"""
import argparse
import csv
import io
import os
import sys

import provenance
from scripts.analysis.published.recall import ABLATION_COLUMNS, ablation_markdown, ablation_rows


def link_root(root, links_from):
    """The prefix that makes the link of a run under ``root`` (its file or folder name) relative to the
    folder ``links_from``: "" when they are the same folder, else the relative path and "/"."""
    rel = os.path.relpath(root, links_from).replace(os.sep, "/")
    return "" if rel == "." else rel + "/"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="folder of the runs (OUT_ROOT of recall_ablation.sh, or the archive in results/)")
    ap.add_argument("--out", default="", help="folder for summary.csv and table.md ('' = print only)")
    ap.add_argument("--links_from", default=None,
                    help="the folder the run links are relative to, for a table read from another folder than "
                         "the one it is written to (default: --out, the table's own folder; the current folder "
                         "when only printing)")
    ap.add_argument("--base", default="", help="the row every row is compared with ('' = its name's first part)")
    a = ap.parse_args(argv)
    table = ablation_rows(a.root, a.base)
    if not table:
        print(f"error: no run (final_metrics.json) under {a.root}", file=sys.stderr)
        raise SystemExit(2)
    text = ablation_markdown(table, link_root(a.root, a.links_from if a.links_from is not None else a.out or "."))
    if a.out:
        from data import write_text

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=ABLATION_COLUMNS, extrasaction="ignore", lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(table)
        write_text(os.path.join(a.out, "summary.csv"), buffer.getvalue())
        write_text(os.path.join(a.out, "table.md"), text)
        provenance.record(os.path.join(a.out, "table"), extra={"outputs": ["summary.csv", "table.md"]})
    print(text, end="")
    return table


if __name__ == "__main__":
    main()
