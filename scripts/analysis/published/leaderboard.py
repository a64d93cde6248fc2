"""The scorecard's leaderboard in README.md and docs/scorecard.md: the table, its notes and the
noise-floor sentence that ``scripts/scorecard/leaderboard.py`` makes from the cards (which
``python -m scripts.scorecard`` also writes to ``FOLDER/leaderboard.md``), and its figure
(``scripts/scorecard/figure.py``). Those modules import the package's base modules only
(``formatting``, ``papers``, ``verdicts``), never a renderer.

Renderers (``RENDERERS``):

- ``leaderboard FOLDER [part=table|floor]``: the scorecard's leaderboard from ``FOLDER/cards/*.json``
  with the notes under it, or its noise-floor sentence.
- ``leaderboard_figure FOLDER [T=16384] [link_root=PREFIX]``: the leaderboard's figure (recall's
  solved fraction at 64/4 and 256/16 against time / SDPA at T, ``scripts/scorecard/figure.py``) as
  ``![...](PREFIX + FOLDER/leaderboard.png)`` with a one-line caption; ``PREFIX`` is the way from the
  document to the repository root ("" for README.md, "../" for docs/*.md). A renderer that writes
  files (``published.writes_files``): with ``write`` (``publish`` without ``--check``) it writes
  ``FOLDER/leaderboard_points.json`` (the plotted points) and ``FOLDER/leaderboard.png`` when the
  points differ from the file's or the PNG is absent (a figure of unchanged points is not redrawn);
  without (``--check``) it writes nothing, compares the points with the JSON file (never the PNG's
  pixels) and adds a "stale" line to its text when they differ or a file is absent, so the block
  reads stale.
"""
import json
import os

from scripts.analysis.published.loading import RenderError, marker_number, source
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


def render_leaderboard_figure(root, folder, T="16384", link_root="", *, write=False):
    """The leaderboard's figure of the full-tier cards under ``root/folder/cards`` as markdown (the
    image and a one-line caption) and, with ``write``, its files (the module docstring says which
    and when). Raises SourceMissing when ``folder/cards`` is absent."""
    from data import atomic_write, write_json
    from scripts.scorecard import testbeds as tb
    from scripts.scorecard.figure import PANELS, draw_figure, figure_points, not_drawn, versions_note

    source(root, os.path.join(folder, "cards"))
    T = marker_number("leaderboard_figure", T)
    points = json.loads(json.dumps(figure_points(read_cards(os.path.join(root, folder)), T)))  # as the JSON reads
    png, data = os.path.join(folder, "leaderboard.png"), os.path.join(folder, "leaderboard_points.json")
    stored = None
    if os.path.exists(os.path.join(root, data)):
        with open(os.path.join(root, data)) as f:
            stored = json.load(f)
    fresh = stored == points and os.path.exists(os.path.join(root, png))
    if write and not fresh:
        os.makedirs(os.path.dirname(os.path.join(root, png)), exist_ok=True)
        atomic_write(os.path.join(root, png), lambda tmp: draw_figure(points, tmp))  # the figure first, then
        write_json(os.path.join(root, data), points)  # the points that say it is drawn
        fresh = True
    left, cells = not_drawn(points), " and ".join(panel for _, panel in PANELS)
    lines = [f"![Recall (seeds solved at {cells}) against time / SDPA at T = {T:,}]({link_root}{png})", "",
             f"Recall's solved fraction of seeds (test accuracy >= {tb.RECALL_SOLVED:g}) at {cells} against "
             f"time / SDPA at T = {T:,} (causal, forward + backward; the interquartile range where the cell has "
             f"one), from the cards of {folder}: {versions_note(points)}"
             + (f"; not drawn: {', '.join(f'{a} ({why})' for a, why in left)}" if left else "")
             + f"; the points: [{os.path.basename(data)}]({link_root}{data})."]
    if not fresh:
        lines += ["", f"**Stale:** {data} or {png} differs from the cards or is absent "
                      f"(`python -m scripts.analysis.publish` redraws them)."]
    return "\n".join(lines) + "\n"


RENDERERS = {"leaderboard": render_leaderboard, "leaderboard_figure": render_leaderboard_figure}
