"""Every relative link of README.md, docs/*.md and results/**/*.md leads somewhere (issue 57, item 7).

A link is an inline link ``[text](target)`` or image ``![alt](target)`` (the text may run over lines), a
reference definition ``[label]: target``, or an HTML ``<a href>`` / ``<img src>``; links in fenced code
blocks, inline code and HTML comments are not links. Web and mail targets (``scheme:``, ``//host``) are
not checked. A relative target must exist, resolved from the linking file's folder (``/path`` from the
repository root, as GitHub resolves it); its ``#anchor``, when the target is a markdown file (a pure
``#anchor``: the linking file itself), must be one of that file's anchors: its headings' slugs under
GitHub's rule (``slug``) or an explicit ``<a id=...>`` / ``<a name=...>``. Anchors into other files
(a ``.tar.xz``, a ``.py``) are not checked: only that the file exists."""
import glob
import html
import os
import re
import time
from urllib.parse import unquote

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
COMMENT = re.compile(r"<!--.*?-->", re.S)
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
REFERENCE = re.compile(r"^ {0,3}\[(?:[^\]\\]|\\.)+\]:[ \t]*(<[^>\n]*>|\S+)", re.M)
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')", re.I)
HTML_ANCHOR = re.compile(r"<a\b[^>]*?\b(?:id|name)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')", re.I)
EXTERNAL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:|//)")
# what GitHub's heading slug keeps: letters, digits and "_" of any script, "-" and " "
SLUG_DROP = re.compile(r"[^\w\- ]")


def markdown_files():
    """The markdown files in scope, relative to the repository root."""
    files = ["README.md", *glob.glob("docs/*.md", root_dir=ROOT), *glob.glob("results/**/*.md", root_dir=ROOT,
                                                                                recursive=True)]
    return sorted(f.replace(os.sep, "/") for f in files if os.path.isfile(os.path.join(ROOT, f)))


def blank(text, start, end):
    """``text`` with ``[start, end)`` replaced by spaces (newlines kept, so offsets and lines stay)."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def without_code(text):
    """``text`` with its fenced code blocks, HTML comments and inline code spans blanked out."""
    lines, fence = text.split("\n"), None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            lines[i] = " " * len(line)
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip(" `~"):
                fence = None
            lines[i] = " " * len(line)
    text = "\n".join(lines)
    for m in reversed(list(COMMENT.finditer(text))):
        text = blank(text, m.start(), m.end())
    i = 0
    while True:  # a run of n backticks opens a code span closed by the next run of exactly n in the paragraph
        m = re.compile(r"(?<![`\\])`+").search(text, i)
        if not m:
            return text
        n = len(m.group())
        close = re.compile(r"(?<!`)`{%d}(?!`)" % n).search(text, m.end())
        paragraph_end = text.find("\n\n", m.end())
        if close and (paragraph_end < 0 or close.start() < paragraph_end):
            text = blank(text, m.start(), close.end())
            i = close.end()
        else:
            i = m.end()


def destination(text, i):
    """The link destination starting at ``text[i]`` (just after "("): (target, end) or None."""
    while i < len(text) and text[i] in " \t\n":
        i += 1
    if i < len(text) and text[i] == "<":
        end = text.find(">", i)
        return (text[i + 1:end], end + 1) if end > 0 and "\n" not in text[i:end] else None
    depth, j = 0, i
    while j < len(text) and not text[j].isspace():
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                break
            depth -= 1
        j += 1
    return (text[i:j], j) if j > i else None


def links(text):
    """The links of markdown ``text`` outside code: (line number, target) in order of appearance."""
    text = without_code(text)
    found = []
    for m in re.finditer(r"(?<!\\)\]\(", text):
        d = destination(text, m.end())
        if d:
            found.append((m.start(), d[0]))
    found += [(m.start(1), m.group(1).strip("<>")) for m in REFERENCE.finditer(text)]
    found += [(m.start(), m.group(1) if m.group(1) is not None else m.group(2)) for m in HTML_LINK.finditer(text)]
    return [(text.count("\n", 0, at) + 1, target) for at, target in sorted(found)]


def heading_text(raw):
    """The text GitHub renders for a heading's markdown ``raw``: links and images by their text, code
    without its backticks, no HTML tags, no emphasis marks."""
    raw = re.sub(r"!?\[((?:[^\]\\]|\\.)*)\]\([^)]*\)", r"\1", raw)
    raw = re.sub(r"(`+)(.+?)\1", r"\2", raw)
    raw = re.sub(r"<[^>]+>", "", raw)
    raw = re.sub(r"(?<!\w)_+|_+(?!\w)", "", raw)  # emphasis underscores; snake_case keeps its own
    return html.unescape(raw.replace("\\", "")).strip()


def slug(heading, seen):
    """GitHub's anchor of a heading with rendered text ``heading``: lower case, every character but
    letters, digits, "_", "-" and " " dropped, each space a "-"; the n-th repeat of a slug gets "-n".
    ``seen`` (a dict) holds the slugs of the file's earlier headings and is updated."""
    base = SLUG_DROP.sub("", heading.lower()).replace(" ", "-")
    name, n = base, seen.get(base, 0)
    while name in seen:
        n += 1
        name = f"{base}-{n}"
    seen[base] = n
    seen[name] = seen.get(name, 0)
    return name


def anchors(text):
    """The anchors of markdown ``text``: its headings' slugs and its explicit HTML anchors."""
    lines, seen, found = without_code(text).split("\n"), {}, set()
    raw = text.split("\n")
    for i, line in enumerate(lines):
        m = ATX.match(line)
        if m:
            found.add(slug(heading_text(raw[i][m.start(2):m.end(2)] if m.group(2) else ""), seen))
        elif (i > 0 and SETEXT.match(line) and lines[i - 1].strip() and not ATX.match(lines[i - 1])
              and not re.match(r"^ {0,3}([-*_|])", lines[i - 1]) and "|" not in lines[i - 1]):
            found.add(slug(heading_text(raw[i - 1].strip()), seen))
    found.update(a or b for a, b in HTML_ANCHOR.findall(text))
    return found


def dead_links(files, root=ROOT):
    """``file:line: target (why)`` for each relative link of ``files`` (paths relative to ``root``) that leads
    nowhere."""
    texts, anchor_sets, dead = {}, {}, []

    def read(path):
        if path not in texts:
            with open(path, encoding="utf-8") as f:
                texts[path] = f.read()
        return texts[path]

    for name in files:
        path = os.path.join(root, name)
        for line, target in links(read(path)):
            if not target or EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            file_part = unquote(file_part.split("?", 1)[0])
            if not file_part:
                linked = path
            elif file_part.startswith("/"):
                linked = os.path.join(root, file_part.lstrip("/"))
            else:
                linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            why = None
            if not os.path.exists(linked):
                why = "no such file"
            elif os.path.relpath(linked, root).startswith(".."):
                why = "outside the repository"
            elif anchor and linked.endswith(".md") and os.path.isfile(linked):
                if linked not in anchor_sets:
                    anchor_sets[linked] = anchors(read(linked))
                if unquote(anchor) not in anchor_sets[linked]:
                    why = f"no heading or anchor #{anchor} in {os.path.relpath(linked, root)}"
            if why:
                dead.append(f"{name}:{line}: {target} ({why})")
    return dead


def test_slugs_follow_githubs_rule():
    seen = {}
    assert slug(heading_text("The reference cell 256/16: a *stochastic* transition"), seen) == \
        "the-reference-cell-25616-a-stochastic-transition"
    assert slug(heading_text("Fastmax (`p = 2`) vs. [softmax](x.md)"), seen) == "fastmax-p--2-vs-softmax"
    assert slug(heading_text("token_shift and _emphasis_"), seen) == "token_shift-and-emphasis"
    assert [slug("Runs", seen) for _ in range(3)] == ["runs", "runs-1", "runs-2"]
    assert slug("Runs 1", seen) == "runs-1-1"


def test_links_skip_code_and_find_wrapped_text():
    text = ("See [the\nrecall doc](recall.md#a-b) and `[no](link.md)`.\n\n```\n[no](fenced.md)\n```\n"
            "<!-- [no](comment.md) -->\n![plot](a_(b).png \"title\") [web](https://x.org) [top](#intro)\n"
            "[ref]: <other.md>\n")
    assert links(text) == [(2, "recall.md#a-b"), (8, "a_(b).png"), (8, "https://x.org"), (8, "#intro"),
                           (9, "other.md")]


def test_anchors_are_headings_outside_code_and_explicit_ones():
    text = "# Intro\n```\n# not a heading\n```\n## Intro\n<a id=\"kept\"></a>\nSetext\n------\n"
    assert anchors(text) == {"intro", "intro-1", "kept", "setext"}


def test_dead_links_name_the_file_the_line_and_why(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n[ok](../b.md#b) [ok](#a) [bad](#z)\n[gone](c.md) "
                                            "[bad](../b.md#a) [ok](../run.tar.xz#x)\n")
    (tmp_path / "b.md").write_text("# B\n")
    (tmp_path / "run.tar.xz").write_bytes(b"")
    assert dead_links(["docs/a.md"], str(tmp_path)) == [
        "docs/a.md:3: #z (no heading or anchor #z in docs/a.md)",
        "docs/a.md:4: c.md (no such file)",
        "docs/a.md:4: ../b.md#a (no heading or anchor #a in b.md)",
    ]


def test_every_relative_link_of_readme_docs_and_results_leads_somewhere():
    start = time.perf_counter()
    files = markdown_files()
    assert "README.md" in files and "docs/results.md" in files
    dead = dead_links(files)
    assert not dead, f"{len(dead)} dead link(s) in README.md, docs/*.md, results/**/*.md:\n" + "\n".join(dead)
    assert time.perf_counter() - start < 5
