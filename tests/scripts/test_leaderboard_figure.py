"""The leaderboard's figure (issue 57, item 5): its points computed from the cards
(``scripts/scorecard/figure.py``), and the renderer ``leaderboard_figure`` that writes the PNG and
the points' JSON only under ``publish`` (not ``--check``, which compares the JSON, never the pixels)."""
import json
import os

import pytest

from scripts.analysis import publish, published
from scripts.scorecard import testbeds as tb
from scripts.scorecard.__main__ import refresh_documents
from scripts.scorecard.figure import figure_points, not_drawn, versions_note

SPEC = "leaderboard_figure results/scorecard"
FOLDER = os.path.join("results", "scorecard")


def recall(role, seed, accuracy, rate=1e-2, version=1):
    return {"role": role, "seed": seed, "learning_rate": rate, "test_accuracy": accuracy, "version": version}


def speed(ratio, T=16384, causal=True, mode="forward_backward", q=None):
    cell = {"role": "speed", "T": T, "causal": causal, "mode": mode, "ratio": ratio}
    if q:
        cell.update(ratio_q1=q[0], ratio_q3=q[1], version=2, pairs=7)
    return cell


def cards():
    """softmax: protocol 1 cells (the selection seed reported), a version 1 speed cell; fast: protocol 2
    cells at its picked rates (seed 0 picks), a version 2 speed cell with its range; plus a card
    whose recall does not apply."""
    softmax = {"label": "softmax", "tier": "full", "not_applicable": {}, "recall_rate": 1e-2, "cells": [
        recall("recall_reference_selection", 0, 0.999), recall("recall_reference", 1, 0.98),
        recall("recall_reference", 2, 0.025), *(recall("recall_small", s, 0.995) for s in range(3)),
        speed(1.2, causal=False), speed(0.97)]}
    fast = {"label": "fast", "tier": "full", "not_applicable": {},
            "recall_rates": {"recall_small": 3e-3, "recall_reference": 1e-2}, "cells": [
                recall("recall_small_selection", 0, 0.2, 1e-3, 2), recall("recall_small_selection", 0, 0.99, 3e-3, 2),
                *(recall("recall_small", s, a, 3e-3, 2) for s, a in ((1, 0.991), (2, 0.5), (3, 0.999))),
                *(recall("recall_reference", s, 0.01, 1e-2, 2) for s in (1, 2, 3)),
                speed(0.4, T=4096, q=(0.3, 0.5)), speed(0.5, q=(0.45, 0.6))]}
    other = {"label": "other", "tier": "full", "not_applicable": {"recall": "not causal"}, "cells": [speed(2.0)]}
    quick = {"label": "fast", "tier": "quick", "not_applicable": {}, "cells": [recall("recall_small", 0, 1.0)]}
    return [softmax, fast, other, quick]


def write_cards(root, cards_):
    folder = root / FOLDER / "cards"
    folder.mkdir(parents=True, exist_ok=True)
    for card in cards_:
        (folder / f"{card['label']}_{card['tier']}.json").write_text(json.dumps(card))


def test_points_follow_the_cells_solved_fraction_and_the_speed_range():
    points = {p["attention"]: p for p in figure_points(cards())}
    assert sorted(points) == ["fast", "other", "softmax"]  # the full tier only
    softmax, fast = points["softmax"], points["fast"]
    assert softmax["recall"]["256/16"] == {"protocol": 1, "seeds": [0, 1, 2], "solved": 1, "n": 3, "fraction": 1 / 3}
    assert softmax["recall"]["64/4"]["fraction"] == 1.0
    assert softmax["speed"] == {"T": 16384, "causal": True, "mode": "forward_backward", "ratio": 0.97, "q1": None,
                                "q3": None, "version": 1}  # version 1: no range
    assert fast["recall"]["64/4"] == {"protocol": 2, "seeds": [1, 2, 3], "solved": 2, "n": 3, "fraction": 2 / 3}
    assert fast["recall"]["256/16"]["solved"] == 0
    assert [fast["speed"][k] for k in ("ratio", "q1", "q3", "version")] == [0.5, 0.45, 0.6, 2]
    assert points["other"]["recall"] == {} and not_drawn(figure_points(cards())) == [("other", "no recall cell")]
    assert tb.RECALL_VERSION == tb.SPEED_VERSION == 2
    assert versions_note(figure_points(cards())) == ("recall protocols 1 and 2 (1 dated); "
                                                     "speed versions 1 and 2 (1 dated: one median, no range)")
    assert versions_note(figure_points(cards()[:1])) == ("recall protocol 1 (dated); "
                                                         "speed version 1 (dated: one median, no range)")
    changed = cards()
    changed[0]["cells"][2]["test_accuracy"] = 0.995  # softmax's seed 2 now solves 256/16
    changed[1]["cells"][-1]["ratio_q3"] = 0.7
    points = {p["attention"]: p for p in figure_points(changed)}
    assert points["softmax"]["recall"]["256/16"]["solved"] == 2 and points["fast"]["speed"]["q3"] == 0.7
    json.dumps(figure_points(changed))  # JSON-able


def test_render_mode_writes_the_png_and_the_points_check_mode_writes_nothing(tmp_path):
    write_cards(tmp_path, cards())
    out = tmp_path / FOLDER
    checked = published.render(SPEC, str(tmp_path))  # check mode (publish --check, publish.stale)
    assert "**Stale:**" in checked and sorted(os.listdir(out)) == ["cards"]
    text = published.render(SPEC, str(tmp_path), write=True)
    png, data = out / "leaderboard.png", out / "leaderboard_points.json"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(data.read_text()) == json.loads(json.dumps(figure_points(cards())))
    assert text.startswith("![Recall (seeds solved at 64/4 and 256/16) against time / SDPA at T = 16,384]"
                           "(results/scorecard/leaderboard.png)\n\n") and "**Stale:**" not in text
    assert "not drawn: other (no recall cell)" in text and "recall protocols 1 and 2" in text
    assert published.render(SPEC, str(tmp_path)) == text  # check mode now agrees, still writing nothing
    stamp = png.stat().st_mtime_ns
    assert published.render(SPEC, str(tmp_path), write=True) == text and png.stat().st_mtime_ns == stamp  # not redrawn
    docs = published.render(SPEC + " link_root=../", str(tmp_path))
    assert "(../results/scorecard/leaderboard.png)" in docs and "(../results/scorecard/leaderboard_points.json)" in docs


def test_publish_draws_the_figure_and_check_fails_on_a_changed_point_not_on_pixels(tmp_path, monkeypatch, capsys):
    write_cards(tmp_path, cards())
    (tmp_path / "README.md").write_text(f"| table |\n\n<!-- rendered: {SPEC} -->\n<!-- end rendered -->\n")
    out = tmp_path / FOLDER
    monkeypatch.setattr(publish, "ROOT", str(tmp_path))
    with pytest.raises(SystemExit) as e:
        publish.main(["--check"])
    assert e.value.code == 1 and sorted(os.listdir(out)) == ["cards"]  # stale, nothing written
    publish.main([])
    assert (out / "leaderboard.png").exists() and publish.stale(str(tmp_path)) == []
    (out / "leaderboard.png").write_bytes(b"\x89PNG other pixels")  # pixels are not compared
    assert publish.stale(str(tmp_path)) == []
    changed = cards()
    changed[1]["cells"][-1]["ratio"] = 0.55  # a point moves
    write_cards(tmp_path, changed)
    before = (out / "leaderboard_points.json").read_text()
    assert publish.stale(str(tmp_path)) == [("README.md", SPEC)]
    with pytest.raises(SystemExit) as e:
        publish.main(["--check"])
    assert e.value.code == 1 and (out / "leaderboard_points.json").read_text() == before  # check wrote nothing
    publish.main([])
    assert json.loads((out / "leaderboard_points.json").read_text())[0]["speed"]["ratio"] == 0.55
    assert publish.stale(str(tmp_path)) == []


def test_the_scorecards_refresh_writes_the_figure_and_a_marker_cannot_ask_to_write(tmp_path):
    write_cards(tmp_path, cards())
    (tmp_path / "README.md").write_text(f"<!-- rendered: {SPEC} -->\n<!-- end rendered -->\n")
    refreshed, left = refresh_documents(str(tmp_path), set())
    assert refreshed == [("README.md", SPEC)] and left == []
    assert (tmp_path / FOLDER / "leaderboard.png").exists() and publish.stale(str(tmp_path)) == []
    with pytest.raises(published.RenderError, match="write="):
        published.render(SPEC + " write=True", str(tmp_path))
    with pytest.raises(published.SourceMissing):
        published.render("leaderboard_figure results/nothing", str(tmp_path))
