"""The scorecard's leaderboard in README.md and docs/scorecard.md: the table and its notes, its short
version, the sentences of what the testbeds say and the noise-floor sentence that
``scripts/scorecard/leaderboard.py`` makes from the cards (the full table, which ``python -m
scripts.scorecard`` writes to ``FOLDER/leaderboard.md``, is linked from the short one), and its figure
(``scripts/scorecard/figure.py``). Those modules import the package's base modules only
(``formatting``, ``papers``, ``verdicts``), never a renderer.

Renderers (``RENDERERS``):

- ``leaderboard FOLDER [part=table|compact|findings|floor] [link_root=PREFIX]``: the scorecard's
  leaderboard from ``FOLDER/cards/*.json`` with the notes under it (``table``: every column, its
  budgets in the headers); its short version (``compact``, the README's: the columns that apply to
  most rows, short headers that each say whether lower or higher is better, short notes and a link
  to ``PREFIX + FOLDER/leaderboard.md``, the full one); a few sentences of what the testbeds say
  (``findings``: computed from the cells through the rules of ``verdicts``); or its noise-floor
  sentence (``floor``).
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
from scripts.scorecard.leaderboard import RECALL_COLUMNS, leaderboard_rows, read_cards, sections, span


LEADERBOARD_PARTS = ("table", "compact", "findings", "floor")


def render_leaderboard(root, folder, part="table", link_root=""):
    """The scorecard's leaderboard of the cards under ``root/folder/cards``
    (``scripts.scorecard.leaderboard.sections``): ``part`` "table" is the table with the notes under
    it (the recall and speed rules, the noise floor); "compact" the short table with its short notes
    and the link (``link_root``: the way from the document to the repository root) to
    ``folder/leaderboard.md``, the full leaderboard with the cells still to run and the published
    rows; "findings" the sentences of what the testbeds say; "floor" the noise-floor sentence alone
    (computed from softmax's control cells)."""
    if part not in LEADERBOARD_PARTS:
        raise RenderError(f"renderer leaderboard: part must be one of {', '.join(LEADERBOARD_PARTS)}, not {part!r}")
    cards = read_cards(os.path.join(root, folder))
    parts = sections(cards, root=root)
    if part == "table":
        return parts["table"] + "\n" + parts["notes"]
    if part == "compact":
        full = f"{folder}/leaderboard.md"
        budgets = compact_budgets(leaderboard_rows(cards, root))
        return (parts["compact"] + "\n" + parts["compact_notes"] + "\n" + (budgets + "\n\n" if budgets else "")
                + f"The rules of each column, softmax's check seeds, training speeds, the swap cell, the "
                  f"cells not run yet and the papers' numbers: [{full}]({link_root}{full}).\n")
    return parts[part]


def compact_budgets(rows):
    """The budgets of the full tier's training cells in one sentence (the README's short leaderboard,
    whose headers do not hold them), read from the cells' runs as the full leaderboard's headers are
    (``scripts.scorecard.leaderboard.leaderboard_rows``): per recall protocol the steps, the early stop
    and the test sequences (the two recall columns once when they agree), WikiText-2's steps, tokens
    per step and the test tokens scored of the split's, LRA Text's steps and test reviews scored of
    the split's. "" when no cell has a budget."""
    full = [r for r in rows if r["tier"] == "full"]
    recall = {}
    for _, column, (T, N, _) in RECALL_COLUMNS:
        by_version = {}
        for r in full:
            if r[column]:
                by_version.setdefault(r[column]["version"], []).extend(r[column]["budgets"])
        texts = []
        for version in sorted(by_version, reverse=True):
            budgets = by_version[version]
            steps, tests = span(b.get("max_steps") for b in budgets), span(b.get("test_sequences") for b in budgets)
            stop = span((b.get("stop_at") or None for b in budgets), "g")
            texts.append(f"protocol {version} " + " and ".join(part for part in (
                steps and f"{steps} steps" + (f" (stopped at validation accuracy {stop})" if stop else ""),
                tests and f"{tests} test sequences") if part))
        if texts:
            recall.setdefault(", ".join(texts), []).append(f"{T}/{N}")
    parts = [f"recall {' and '.join(cells)}: {text}" for text, cells in recall.items()]
    wikitext2 = [b for r in full for b in r["wikitext2_budgets"]]
    if wikitext2:
        parts.append(f"WikiText-2: {span(b.get('steps') for b in wikitext2)} steps of "
                     f"{span(b.get('tokens_per_step') for b in wikitext2)} tokens, "
                     f"{span(b.get('test_tokens') for b in wikitext2)} of {span(b.get('split_tokens') for b in wikitext2)} "
                     "test tokens scored")
    lra = [r["lra_budget"] for r in full if r["lra_budget"]]
    if lra:
        parts.append(f"LRA Text: {span(b.get('steps') for b in lra)} steps, {span(b.get('test_examples') for b in lra)} "
                     f"of {span(b.get('test_size') for b in lra)} test reviews")
    return ("Budgets: " + "; ".join(parts) + ".") if parts else ""


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
             f"Seeds solved (test accuracy >= {tb.RECALL_SOLVED:g}) at {cells} against time / SDPA at T = {T:,} "
             f"(causal, forward + backward; the interquartile range where a cell has one); {versions_note(points)}"
             + (f"; not drawn: {'; '.join(f'{names} ({why})' for why, names in not_drawn_by_reason(left))}"
                if left else "")
             + f"; the points: [{os.path.basename(data)}]({link_root}{data})."]
    if not fresh:
        lines += ["", f"**Stale:** {data} or {png} differs from the cards or is absent "
                      f"(`python -m scripts.analysis.publish` redraws them)."]
    return "\n".join(lines) + "\n"


def not_drawn_by_reason(left):
    """[(why, "a, b")]: the attentions ``left`` ((attention, why) pairs) out of the figure, grouped by
    why, in the order of each reason's first attention."""
    groups = {}
    for attention, why in left:
        groups.setdefault(why, []).append(attention)
    return [(why, ", ".join(names)) for why, names in groups.items()]


RENDERERS = {"leaderboard": render_leaderboard, "leaderboard_figure": render_leaderboard_figure}
