"""Render the published tables and numbers of README.md and docs/*.md from the files under
``results/``, so that no published number is typed by hand (issue 42, item 5).

    python -m scripts.analysis.publish            # refresh every block
    python -m scripts.analysis.publish --check    # change nothing; exit 1, naming each stale block

A block in ``README.md`` or ``docs/*.md`` is

    <!-- rendered: <renderer> [arg ...] [key=value ...] -->
    ...the renderer's output...
    <!-- end rendered -->

where ``<renderer>`` names a function of ``scripts.analysis.published.RENDERERS`` (the list, their
arguments and the files each reads are in the docstrings of the package's renderer modules, which
its own docstring names); paths in the arguments are relative to the repository root, e.g.
``<!-- rendered: recall_ablation results/recall/ablation_64_4 link_root=../results/recall/ablation_64_4/ -->``.
The command replaces what is between the two markers by the renderer's output; ``--check`` (and
``tests/scripts/test_publish.py``) fails when they differ. A renderer that writes files (a figure
and its points, ``leaderboard_figure``) writes them only under the command without ``--check``
(``render(..., write=True)``); under ``--check`` it writes nothing and compares its data file (the
figure's points as JSON, never its pixels), its block reading stale when they differ. A missing
results file or an unknown renderer is one error line naming it, exit status 2.
"""
import argparse
import glob
import os
import re
import sys

from scripts.analysis import published

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK = re.compile(r"(<!-- rendered: (?P<spec>[^\n]*?) -->\n)(?P<body>.*?)(<!-- end rendered -->)", re.S)


def documents(root=None):
    """The files that may hold blocks: README.md and docs/*.md of ``root`` (default ROOT; absolute paths)."""
    root = root or ROOT
    return [os.path.join(root, "README.md"), *sorted(glob.glob(os.path.join(root, "docs", "*.md")))]


def render(text, root=None, write=False):
    """(new text, [(block spec, whether it changed)]) of a document's text with every block refreshed
    by ``published.render(spec, root, write)`` (``write``: renderers that write files may write them).

    Raises:
        published.SourceMissing (a FileNotFoundError): a block needs a results file that does not exist.
        published.RenderError (a ValueError): a block names an unknown renderer or wrong arguments.
    """
    root, blocks = root or ROOT, []

    def refresh(match):
        body = published.render(match.group("spec"), root, write)
        body = body if body.endswith("\n") else body + "\n"
        blocks.append((match.group("spec"), body != match.group("body")))
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(refresh, text), blocks


def stale(root=None):
    """[(document relative to ``root`` (default ROOT), block spec)] of every block whose text differs
    from what its renderer returns now. Raises what ``render`` raises."""
    root, out = root or ROOT, []
    for doc in documents(root):
        if os.path.exists(doc):
            with open(doc) as f:
                _, blocks = render(f.read(), root)
            out += [(os.path.relpath(doc, root), spec) for spec, changed in blocks if changed]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    a = ap.parse_args(argv)
    try:
        if a.check:
            found = stale()
            for doc, spec in found:
                print(f"{doc}: the block '{spec}' differs from what it renders (python -m scripts.analysis.publish)")
            raise SystemExit(1 if found else 0)
        from data import write_text

        for doc in documents():
            if not os.path.exists(doc):
                continue
            with open(doc) as f:
                text = f.read()
            new, blocks = render(text, write=True)
            if new != text:
                write_text(doc, new)
                print(f"{os.path.relpath(doc, ROOT)}: refreshed {', '.join(s for s, changed in blocks if changed)}")
    except (FileNotFoundError, published.RenderError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
