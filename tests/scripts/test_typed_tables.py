"""No typed result table in docs/*.md (issue 57, item 4): a markdown table holding a decimal number
is rendered from its artifact under results/ (between ``<!-- rendered: ... -->`` and
``<!-- end rendered -->``, ``python -m scripts.analysis.publish``), or labelled as the dated record
of one run (the nearest non-blank line above it starts with "Dated record", and names the run's
date, commit and artifact), or is a table of design or configuration listed in ``DESIGN_TABLES``
with the reason it holds no result."""
import os
import re

from scripts.analysis import publish

DOCS = os.path.join(publish.ROOT, "docs")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+")  # 0.5, 126.08, 53.6%: not a version-like v1.2 or a word
LABEL = "Dated record"

# (document, the start of the table's header row): why the table is no result table
DESIGN_TABLES = {
    ("benchmark.md", "| syntax | what | label in tables |"):
        "the benchmark's --methods syntax; its decimals are example parameters (tree:E=0.3)",
    ("dense_attention.md", "| `relpe_freqs` | θ_i | source |"):
        "the two frequency formulas; 0.99 is the criterion of a count that tests/test_cosine_relpe.py checks",
    ("dense_attention.md", "| fact | used in | source |"):
        "facts read from the DenseAttention paper and the authors' code (eps, norms, rates), each with its source",
    ("fastmax.md", "| parameter | default | meaning |"): "Fastmax's parameters and their defaults",
    ("generation.md", "| attention | decode | state per layer"): "decode kinds and the size of their state",
    ("gpu.md", "| module | what | tolerance, stated |"):
        "the GPU tests and their stated tolerances (the CPU figures are those of attention/testing.py and tests/gpu/)",
    ("gpu.md", "| aim | status |"):
        "issue 56's GPU targets; the status column holds no measured number (none is measured yet)",
    ("lra.md", "| task | module | data here | notes |"): "the LRA data modules, their data and sizes",
    ("mlm.md", "| | softmax BERT mini | DANet mini |"): "the two MLM configs side by side (schedule, norms)",
    ("mlm.md", "| option | values (default first) |"): "options of the MLM configs and their values",
    ("scorecard.md", "| testbed | quick tier"): "the scorecard's testbeds and their protocols (thresholds, rates)",
    ("tree_attention.md", "| file | what |"): "tree attention's implementation files",
    ("tree_attention.md", "| parameter | default | meaning |"): "tree attention's parameters and their defaults",
    ("tree_attention.md", "| fact | source |"):
        "facts read from the tree attention paper and the authors' code, and the papers' published numbers",
}


def tables(text):
    """[(first line number, header row, lines, the nearest non-blank line above)] of the markdown tables
    of ``text`` outside rendered blocks and code fences (a table: consecutive lines starting with "|",
    indentation aside)."""
    out, lines = [], text.splitlines()
    rendered = fenced = False
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("```"):
            fenced = not fenced
        elif line.startswith("<!-- rendered:"):
            rendered = True
        elif line.startswith("<!-- end rendered"):
            rendered = False
        elif line.startswith("|") and not (rendered or fenced):
            j = i
            while j < len(lines) and lines[j].strip().startswith("|"):
                j += 1
            above = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            out.append((i + 1, line, [x.strip() for x in lines[i:j]], above))
            i = j
            continue
        i += 1
    return out


def typed_tables(docs=DOCS):
    """[(document, line, header)] of the tables of docs/*.md with a decimal number that are neither
    rendered, labelled as a dated record, nor in DESIGN_TABLES; and the DESIGN_TABLES entries that
    match no table (a stale entry)."""
    typed, used = [], set()
    for name in sorted(os.listdir(docs)):
        if not name.endswith(".md"):
            continue
        with open(os.path.join(docs, name)) as f:
            text = f.read()
        for line, header, rows, above in tables(text):
            design = [key for key in DESIGN_TABLES if key[0] == name and header.startswith(key[1])]
            used.update(design)
            if design or above.startswith(LABEL) or not any(DECIMAL.search(row) for row in rows):
                continue
            typed.append((name, line, header))
    return typed, sorted(set(DESIGN_TABLES) - used)


def test_every_table_of_results_in_the_docs_is_rendered_or_a_labelled_record():
    typed, _ = typed_tables()
    assert typed == [], ("typed result tables (render them from results/ with a renderer of "
                         "scripts/analysis/published/, label a one-run record with a 'Dated record' line "
                         "above it, or list a design table in DESIGN_TABLES with its reason): "
                         + "; ".join(f"docs/{d}:{n} {h}" for d, n, h in typed))


def test_every_design_table_entry_names_a_table_and_a_reason():
    _, stale = typed_tables()
    assert stale == [], f"DESIGN_TABLES entries that match no table of docs/: {stale}"
    assert all(reason.strip() for reason in DESIGN_TABLES.values())


def test_the_check_sees_a_typed_table_and_accepts_a_rendered_or_labelled_one(tmp_path):
    typed = "| run | loss |\n|---|---|\n| a | 2.25 |\n"
    (tmp_path / "x.md").write_text(
        f"text\n\n{typed}\n<!-- rendered: r -->\n{typed}<!-- end rendered -->\n\n"
        f"Dated record of one run (2026-11-26, commit abc1234): artifact [log](../results/x.json)\n\n{typed}\n"
        f"```\n{typed}```\n\n| setting | value |\n|---|---|\n| steps | 1,000 |\n")
    found, _ = typed_tables(str(tmp_path))
    assert found == [("x.md", 3, "| run | loss |")]
