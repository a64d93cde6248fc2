"""The scorecard's leaderboard in README.md and docs/scorecard.md: the table, its notes and the
noise-floor sentence that ``scripts/scorecard/leaderboard.py`` makes from the cards (which
``python -m scripts.scorecard`` also writes to ``FOLDER/leaderboard.md``). That module imports the
package's base modules only (``formatting``, ``papers``, ``verdicts``), never a renderer.

Renderers (``RENDERERS``):

- ``leaderboard FOLDER [part=table|floor]``: the scorecard's leaderboard from ``FOLDER/cards/*.json``
  with the notes under it, or its noise-floor sentence.
"""
import os

from scripts.analysis.published.loading import RenderError
from scripts.scorecard.leaderboard import read_cards, sections


def render_leaderboard(root, folder, part="table"):
    """The scorecard's leaderboard of the cards under ``root/folder/cards``
    (``scripts.scorecard.leaderboard.sections``): ``part`` "table" is the table with the notes under
    it (the recall and speed rules, the noise floor); "floor" the noise-floor sentence alone (computed
    from softmax's control cells). The cells still to run and the published rows stay in
    ``folder/leaderboard.md``, which the README links (it keeps to a summary)."""
    parts = sections(read_cards(os.path.join(root, folder)), root=root)
    if part not in ("table", "floor"):
        raise RenderError(f"renderer leaderboard: part must be table or floor, not {part!r}")
    return parts["table"] + "\n" + parts["notes"] if part == "table" else parts["floor"]


RENDERERS = {"leaderboard": render_leaderboard}
