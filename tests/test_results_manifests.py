"""results/: every folder of outputs has a manifest.json whose entries say how its outputs were made, and
docs/results.md links every folder's manifest and only files that exist."""
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results")
RESULTS_MD = os.path.join(ROOT, "docs", "results.md")
FIELDS = ("command", "commit", "machine", "date", "versions")


def result_folders():
    """Every directory under results/ that holds files, relative to the root (results/ itself and a
    folder that only groups other folders, like results/recall/, hold no outputs)."""
    return sorted(os.path.relpath(d, ROOT) for d, _, files in os.walk(RESULTS) if d != RESULTS and files)


def relative_links():
    """(line number, target) of every relative link of docs/results.md, anchors dropped."""
    links = []
    with open(RESULTS_MD) as f:
        for number, line in enumerate(f, 1):
            for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", line):
                if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#"):
                    links.append((number, target.split("#", 1)[0]))
    return links


def test_there_are_results_folders():
    assert result_folders(), "no folder under results/"


@pytest.mark.parametrize("folder", result_folders())
def test_every_results_folder_has_a_manifest(folder):
    path = os.path.join(ROOT, folder, "manifest.json")
    assert os.path.isfile(path), f"{folder}/ has no manifest.json"
    with open(path) as f:
        manifest = json.load(f)
    assert isinstance(manifest, dict) and manifest, f"{path}: not a non-empty JSON object"
    for name, entry in manifest.items():
        assert isinstance(entry, dict), f"{path}: entry {name!r} is not an object"
        missing = [key for key in FIELDS if key not in entry]
        assert not missing, f"{path}: entry {name!r} lacks {missing}"
        assert isinstance(entry["command"], str) and entry["command"], f"{path}: entry {name!r} has no command"
        if entry.get("reconstructed"):
            assert entry.get("sources"), f"{path}: reconstructed entry {name!r} does not say where its fields come from"


def test_results_md_links_every_folder():
    linked = {os.path.normpath(os.path.join(os.path.dirname(RESULTS_MD), target)) for _, target in relative_links()}
    unlinked = [folder for folder in result_folders()
                if os.path.join(ROOT, folder, "manifest.json") not in linked and os.path.join(ROOT, folder) not in linked]
    assert not unlinked, f"docs/results.md does not link these results folders (or their manifest.json): {unlinked}"


def test_results_md_links_exist():
    links = relative_links()
    assert links
    broken = [f"line {number}: {target}" for number, target in links
              if not os.path.exists(os.path.join(os.path.dirname(RESULTS_MD), target))]
    assert not broken, f"docs/results.md links to missing files: {broken}"
