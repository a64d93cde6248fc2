"""Every committed table under results/ that its tool makes from committed files is rebuilt here from
those files, with the tool's own command line (the one in the folder's manifest.json and
docs/results.md, its ``--out`` moved to a temporary folder), and must equal the committed file byte
for byte: a table that no longer follows from the runs (a packed run changed, a reader changed)
fails here. Figures (.png) are drawn but not compared (their bytes depend on matplotlib's version).

docs/*.md and README.md's rendered blocks are checked the same way by tests/scripts/test_publish.py
(``publish.stale``). Tables made from checkpoints or data that are not in the repository (the MLM
summaries, attention maps, alignments, benchmarks) cannot be rebuilt here and are not listed."""
import os
import shlex

import pytest

import provenance
from scripts.analysis import (gpt_mini_table, loss_curves, lra_table, per_position_table, recall_ablation_table,
                              recall_table, tree_sweep_table)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LRA_CPU = " ".join(f"results/lra/{task}_{attention}_cpu" for task in ("listops", "text", "image", "pathfinder")
                   for attention in ("dense", "fastmax1", "softmax") + (("fastmax2",) if task == "text" else ()))
MAXNORM_NOTE = ("Fastmax p = 1 with the default before 2026-11-27 (normalization max_norm, lim 1, temperature 1), the "
                "runs of the sweep made before the change (docs/recall.md; the current default's rows are in "
                "results/recall/summary.csv).")
TEXT_8K = "results/lra/text_8k"

# The LRA loss curves of results/lra were drawn from the runs in out/lra before they were archived in
# results/lra under the same names: their CSV's out_dir column says out/lra/<run>, the rebuild results/lra/<run>.
PLOTTED_FROM_OUT = (b",out/lra/", b",results/lra/")

# (tool, its arguments (OUT: the temporary output folder), the committed folder, the files compared[, (old, new):
# a path the committed files name where the rebuild names another])
REBUILDS = [
    (recall_table, "table results/recall/sweep_64_4 results/recall/sweep_64_4_w128 results/recall/sweep_256_16 "
                   "results/recall/sweep_1024_64 results/recall/fastmax_default_64_4 results/recall/fastmax_default_256_16 "
                   "results/recall/noshift_256_16 results/scorecard/runs --out=OUT", "results/recall",
     ("summary.csv", "recall_table.md")),
    (recall_table, "table results/recall/fastmax_default_64_4 --out=OUT", "results/recall/fastmax_default_64_4",
     ("summary.csv", "recall_table.md")),
    (recall_table, "table results/recall/fastmax_default_256_16 --out=OUT", "results/recall/fastmax_default_256_16",
     ("summary.csv", "recall_table.md")),
    (recall_table, "table results/recall/fastmax_maxnorm/sweep_256_16 results/recall/fastmax_maxnorm/sweep_64_4 "
                   f"results/recall/fastmax_maxnorm/sweep_64_4_w128 {shlex.quote('--note=' + MAXNORM_NOTE)} --out=OUT",
     "results/recall/fastmax_maxnorm", ("summary.csv", "recall_table.md")),
    (recall_table, "table results/recall/fastmax_norm --label_params=normalization,temperature,lim --out=OUT",
     "results/recall/fastmax_norm", ("summary.csv", "recall_table.md")),
    # --links_from: the table's run links as read from the committed folder, not from OUT
    (recall_ablation_table, "results/recall/ablation_64_4 --out=OUT --links_from=results/recall/ablation_64_4",
     "results/recall/ablation_64_4", ("summary.csv", "table.md")),
    (recall_ablation_table, "results/recall/ablation_256_16 --base=zoology_s0 --out=OUT "
                            "--links_from=results/recall/ablation_256_16",
     "results/recall/ablation_256_16", ("summary.csv", "table.md")),
    (gpt_mini_table, "results/gpt_mini_baselines --out=OUT", "results/gpt_mini_baselines",
     ("summary.csv", "gpt_mini_table.md")),
    (lra_table, f"{LRA_CPU} --out=OUT", "results/lra", ("lra_table.md", "lra_accuracy.csv", "lra_steps_per_s.csv")),
    (lra_table, f"{TEXT_8K} --out=OUT", TEXT_8K, ("lra_table.md", "lra_accuracy.csv", "lra_steps_per_s.csv")),
    (loss_curves, "results/lra/image_softmax_cpu results/lra/image_fastmax1_cpu results/lra/image_dense_cpu "
                  "--labels=softmax,fastmax1,dense --train_loss=step --out OUT/loss_curves_image",
     "results/lra", ("loss_curves_image.csv",), PLOTTED_FROM_OUT),
    (loss_curves, " ".join(f"results/lra/{task}_{a}_cpu" for task in ("listops", "pathfinder")
                           for a in ("softmax", "fastmax1", "dense")) +
     " --labels=listops_softmax,listops_fastmax1,listops_dense,pathfinder_softmax,pathfinder_fastmax1,pathfinder_dense"
     " --train_loss=step --out OUT/loss_curves_listops_pathfinder",
     "results/lra", ("loss_curves_listops_pathfinder.csv",), PLOTTED_FROM_OUT),
    (loss_curves, " ".join(f"results/lra/text_{a}_cpu" for a in ("softmax", "fastmax1", "fastmax2", "dense")) +
     " --labels=softmax,fastmax1,fastmax2,dense --train_loss=step --out OUT/loss_curves_text",
     "results/lra", ("loss_curves_text.csv",), PLOTTED_FROM_OUT),
    (loss_curves, " ".join(f"{TEXT_8K}/text_{a}_cpu" for a in ("softmax", "fastmax1", "fastmax2", "dense")) +
     " --labels=softmax,fastmax1,fastmax2,dense --train_loss=step --out OUT/loss_curves_text_8k",
     TEXT_8K, ("loss_curves_text_8k.csv",)),
    (loss_curves, " ".join(f"{TEXT_8K}/text_{a}_cpu" for a in ("softmax", "linear", "performer", "linformer", "informer",
                                                               "longformer", "bigbird", "reformer")) +
     " --labels=softmax,linear,performer,linformer,informer,longformer,bigbird,reformer --train_loss=step "
     "--out OUT/loss_curves_text_8k_baselines", TEXT_8K, ("loss_curves_text_8k_baselines.csv",)),
    (tree_sweep_table, "--in_dir results/tree_sweep --out OUT/tree_sweep_table", "results/tree_sweep",
     ("tree_sweep_table.csv", "tree_sweep_table.md")),
    (tree_sweep_table, "--in_dir results/tree_sweep_casino --out OUT/tree_sweep_casino_table", "results/tree_sweep_casino",
     ("tree_sweep_casino_table.csv", "tree_sweep_casino_table.md")),
    (per_position_table, "results/gpt_mini_wikitext2/test_blocks.json results/fastmax_gpt_mini_wikitext2/fastmax1_test_blocks.json "
                         "results/fastmax_gpt_mini_wikitext2/fastmax2_test_blocks.json --labels=softmax,fastmax1,fastmax2 "
                         "--out OUT/per_position", "results/fastmax_gpt_mini_wikitext2", ("per_position.csv", "per_position.md")),
]
# every file the rebuilds above compare, relative to the repository root
REBUILT = {os.path.join(folder, name) for _, _, folder, files, *_ in REBUILDS for name in files}


def _id(rebuild):
    tool, _, folder, files, *_ = rebuild
    return f"{tool.__name__.rsplit('.', 1)[-1]}:{folder}/{files[0]}"


@pytest.mark.parametrize("rebuild", REBUILDS, ids=[_id(r) for r in REBUILDS])
def test_a_committed_table_is_what_its_tool_makes_from_the_committed_files(rebuild, tmp_path, monkeypatch):
    tool, args, folder, files, *moved = rebuild
    monkeypatch.chdir(ROOT)  # the tools write the paths they are given into some tables
    monkeypatch.setattr(provenance, "record", lambda *a, **k: None)  # the temporary folder needs no manifest
    out = str(tmp_path / "out")
    os.makedirs(out)
    tool.main([a.replace("OUT", out) for a in shlex.split(args)])
    for name in files:
        with open(os.path.join(out, name), "rb") as f:
            rebuilt = f.read()
        with open(os.path.join(ROOT, folder, name), "rb") as f:
            committed = f.read()
        for old, new in moved:
            committed = committed.replace(old, new)
        assert rebuilt == committed, f"{folder}/{name} differs from what `{tool.__name__} {args}` makes of the committed files"


def test_every_committed_table_of_these_tools_is_rebuilt():
    """A new table of one of these tools in results/ gets its line in REBUILDS (or this test says why not)."""
    names = ("summary.csv", "recall_table.md", "table.md", "gpt_mini_table.md", "lra_table.md", "per_position.md")
    found = set()
    for d, _, fs in os.walk(os.path.join(ROOT, "results")):
        for name in fs:
            rel = os.path.relpath(os.path.join(d, name), ROOT)
            if name in names or name.endswith("_table.md") or name.startswith("loss_curves_") and name.endswith(".csv"):
                found.add(rel)
    # made from checkpoints or data outside the repository: the MLM summaries (mlm_summary evaluates ckpt.pt)
    outside = {p for p in found if p.startswith("results/mlm_wikitext2/")}
    assert sorted(found - REBUILT - outside) == []


def test_a_table_file_block_names_a_table_rebuilt_here():
    """docs' and README's ``table_file`` blocks copy a tool's table verbatim: only tables that this
    module rebuilds from the committed runs may be copied so (else the copy could hold any numbers)."""
    import re

    from scripts.analysis import publish

    named = []
    for doc in publish.documents(ROOT):
        with open(doc) as f:
            named += re.findall(r"<!-- rendered: table_file (\S+)", f.read())
    assert named and sorted(set(named) - REBUILT) == []
