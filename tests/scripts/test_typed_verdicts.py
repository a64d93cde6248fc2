"""No verdict typed in the prose of README.md and docs/*.md (issue 58, "every verdict in README and docs
computed"): a verdict phrase ("not met", "is met", "at chance", "not reliably", "separable from")
stands only inside a rendered block (``<!-- rendered: ... -->`` ... ``<!-- end rendered -->``), where a
renderer of scripts/analysis/published/ computes it from its artifact through a rule of verdicts.py and
``publish --check`` sees it go stale, or inside a code fence, or where ``ALLOWED`` says why the phrase
is no live verdict (a definition of a rule's words, a quotation of a withdrawn claim).

A phrase is found in the paragraphs of a document (lines joined, so a phrase broken over two lines is
found too), case-insensitively."""
import os
import re

from scripts.analysis import publish

PHRASES = ("not met", "is met", "at chance", "not reliably", "separable from")
PATTERN = re.compile(r"\b(" + "|".join(re.escape(p) for p in PHRASES) + r")\b", re.I)

# (document, a text of the paragraph around the phrase, or "## <heading>" for a whole section up to the
# next heading of the same or a higher level): why the phrase there is no live verdict
ALLOWED = {
    ("docs/results.md", "## Withdrawn or corrected"):
        "the list of withdrawn or corrected claims quotes the old verdicts it withdrew",
    ("docs/scorecard.md", "\"separable from softmax\" only where the range"):
        "defines the scorecard's rule and its words (verdicts.separable), no verdict on a result",
    ("docs/scorecard.md", "the cells separable from softmax's seeds or not"):
        "says what the rendered findings report, no verdict on a result",
}


def paragraphs(text):
    """[(first line number, heading path, paragraph text)] of ``text`` outside rendered blocks and code
    fences: consecutive non-blank lines joined by spaces; the heading path is the list of the headings
    ("## Title") the paragraph is under, outermost first."""
    out, lines, para, headings = [], text.splitlines(), [], []
    rendered = fenced = False

    def flush():
        if para:
            out.append((para[0][0], list(headings), " ".join(line for _, line in para)))
            para.clear()

    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if line.startswith("```"):
            flush()
            fenced = not fenced
        elif line.startswith("<!-- rendered:"):
            flush()
            rendered = True
        elif line.startswith("<!-- end rendered"):
            rendered = False
        elif rendered or fenced:
            continue
        elif not line:
            flush()
        elif re.match(r"#{1,6} ", line):
            flush()
            level = len(line) - len(line.lstrip("#"))
            headings[:] = [h for h in headings if len(h) - len(h.lstrip("#")) < level] + [line]
        else:
            para.append((number, line))
    flush()
    return out


def allowed_by(document, headings, paragraph, span, allowed=ALLOWED):
    """The ``allowed`` entries of ``document`` that cover the phrase at ``span`` (start, end) of
    ``paragraph`` under ``headings``: a section entry whose heading is among ``headings``, or a text
    entry with an occurrence in the paragraph that contains the span."""
    found = []
    for doc, text in allowed:
        if doc != document:
            continue
        if text.startswith("#"):
            if text in headings:
                found.append((doc, text))
            continue
        starts = [m.start() for m in re.finditer(re.escape(text), paragraph)]
        if any(start <= span[0] and span[1] <= start + len(text) for start in starts):
            found.append((doc, text))
    return found


def typed_verdicts(root=publish.ROOT, allowed=ALLOWED):
    """([(document, line, phrase, context)] of the verdict phrases typed outside rendered blocks and
    code fences of README.md and docs/*.md under ``root`` that no ``allowed`` entry covers, the
    ``allowed`` entries that cover nothing there)."""
    typed, used = [], set()
    for path in publish.documents(root):
        if not os.path.exists(path):
            continue
        document = os.path.relpath(path, root).replace(os.sep, "/")
        with open(path) as f:
            text = f.read()
        for line, headings, paragraph in paragraphs(text):
            for match in PATTERN.finditer(paragraph):
                covering = allowed_by(document, headings, paragraph, match.span(), allowed)
                used.update(covering)
                if not covering:
                    context = paragraph[max(0, match.start() - 60):match.end() + 60]
                    typed.append((document, line, match.group(1), context))
    return typed, sorted(key for key in allowed if key not in used)


def test_no_verdict_phrase_is_typed_outside_a_rendered_block():
    typed, _ = typed_verdicts()
    assert typed == [], ("verdict phrases typed in prose (render the sentence with a renderer of "
                         "scripts/analysis/published/ through a rule of verdicts.py, date it as a record "
                         "without a live verdict, or list it in ALLOWED with its reason): "
                         + "; ".join(f"{d}:{n} {p!r}: ...{c}..." for d, n, p, c in typed))


def test_every_allowed_entry_covers_a_phrase_and_gives_a_reason():
    _, stale = typed_verdicts()
    assert stale == [], f"ALLOWED entries that cover no verdict phrase: {stale}"
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_check_sees_a_typed_verdict_and_accepts_a_rendered_fenced_or_allowed_one(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("The aim is\nnot met: 1.47.\n")
    (tmp_path / "docs" / "x.md").write_text(
        "# X\n\n<!-- rendered: r -->\nThe aim is not met.\n<!-- end rendered -->\n\n```\nat chance\n```\n\n"
        "## Withdrawn or corrected\n\n- \"at chance\" -> each seed shown\n\n## Next\n\nIt stays at Chance; "
        "the word \"separable from\" means apart, and it is separable from softmax.\n")
    allowed = {("docs/x.md", "## Withdrawn or corrected"): "quotes", ("docs/x.md", "\"separable from\" means"): "defines"}
    typed, stale = typed_verdicts(str(tmp_path), allowed)
    assert [(d, n, p) for d, n, p, _ in typed] == [("README.md", 1, "not met"), ("docs/x.md", 17, "at Chance"),
                                                   ("docs/x.md", 17, "separable from")]  # the allowed text covers its own
    assert stale == []
    typed, stale = typed_verdicts(str(tmp_path), {("docs/x.md", "## Next"): "the whole section"})
    assert [(d, n) for d, n, _, _ in typed] == [("README.md", 1), ("docs/x.md", 13)]
    typed, stale = typed_verdicts(str(tmp_path), {("docs/x.md", "## Missing"): "covers nothing"})
    assert stale == [("docs/x.md", "## Missing")]
