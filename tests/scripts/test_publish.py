"""scripts/analysis/publish.py: blocks of README.md and docs/*.md rendered from results/ files, and
the repository's own docs equal what the command renders (a stale table fails here)."""
import os

import pytest

from scripts.analysis import publish


def test_the_committed_readme_and_docs_equal_their_rendered_tables():
    assert publish.stale() == [], "run python -m scripts.analysis.publish"


def test_a_block_is_refreshed_from_its_file_and_a_stale_one_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "t.md").write_text("| a |\n|---|\n| 2 |\n")
    doc = tmp_path / "docs" / "x.md"
    doc.write_text("before\n<!-- rendered from results/t.md -->\n| a |\n|---|\n| 1 |\n<!-- end rendered -->\nafter\n")
    assert publish.stale(str(tmp_path)) == [(os.path.join("docs", "x.md"), "results/t.md")]
    new, blocks = publish.render(doc.read_text(), str(tmp_path))
    assert new == "before\n<!-- rendered from results/t.md -->\n| a |\n|---|\n| 2 |\n<!-- end rendered -->\nafter\n"
    assert blocks == [("results/t.md", True)]
    doc.write_text(new)
    assert publish.stale(str(tmp_path)) == []


def test_a_block_naming_a_missing_file_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="results/none.md"):
        publish.render("<!-- rendered from results/none.md -->\nx\n<!-- end rendered -->\n", str(tmp_path))
