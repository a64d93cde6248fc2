"""Copy rendered tables from ``results/`` into the README and the docs, so that no published number
is typed by hand (issue 42, item 5).

    python -m scripts.analysis.publish            # refresh every block
    python -m scripts.analysis.publish --check    # exit 1, naming each stale block, if any differs

A block in ``README.md`` or ``docs/*.md`` is

    <!-- rendered from results/<path> -->
    ...the file's text, verbatim...
    <!-- end rendered -->

where ``results/<path>`` is a file a table tool wrote (e.g. ``results/recall/ablation_64_4/table.md``
by ``scripts.analysis.recall_ablation_table``). The command replaces what is between the two
markers by the file's text; ``--check`` (and ``tests/scripts/test_publish.py``) fails when they
differ. Paths are relative to the repository root.
"""
import argparse
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK = re.compile(r"(<!-- rendered from (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- end rendered -->)", re.S)


def documents(root=ROOT):
    """The files that may hold blocks: README.md and docs/*.md."""
    return [os.path.join(root, "README.md"), *sorted(glob.glob(os.path.join(root, "docs", "*.md")))]


def render(text, root=ROOT):
    """(new text, [(source path, whether it changed)]) of a document's text with every block refreshed.

    Raises:
        FileNotFoundError: a block names a file that does not exist (the message names it).
    """
    blocks = []

    def refresh(match):
        source = os.path.join(root, match.group("path"))
        if not os.path.isfile(source):
            raise FileNotFoundError(f"a rendered block names {match.group('path')}, which does not exist")
        with open(source) as f:
            body = f.read()
        body = body if body.endswith("\n") else body + "\n"
        blocks.append((match.group("path"), body != match.group("body")))
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(refresh, text), blocks


def stale(root=ROOT):
    """[(document, source path)] of every block whose text differs from its source file."""
    out = []
    for doc in documents(root):
        if os.path.exists(doc):
            with open(doc) as f:
                _, blocks = render(f.read(), root)
            out += [(os.path.relpath(doc, root), path) for path, changed in blocks if changed]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    a = ap.parse_args(argv)
    try:
        if a.check:
            found = stale()
            for doc, path in found:
                print(f"{doc}: the block rendered from {path} differs from it (python -m scripts.analysis.publish)")
            raise SystemExit(1 if found else 0)
        from data import write_text

        for doc in documents():
            if not os.path.exists(doc):
                continue
            with open(doc) as f:
                text = f.read()
            new, blocks = render(text)
            if new != text:
                write_text(doc, new)
                print(f"{os.path.relpath(doc, ROOT)}: refreshed {', '.join(p for p, changed in blocks if changed)}")
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
