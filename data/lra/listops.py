"""ListOps (Nangia & Bowman, 2018) as used by Long Range Arena (Tay et al., 2021): generator,
evaluator and loader of the LRA release files ``listops-1000/basic_{train,val,test}.tsv``.

    python -m data.lra.listops [--lra_dir=DIR] [--num_train=96000 --num_val=2000 --num_test=2000 --seed=0 --workers=N]

writes ``DIR/listops-1000/`` (``DIR``: the folder train.py's ``--lra_dir`` takes; default ``$LRA_DIR``,
else ``data/lra/files``).

The LRA release data could not be obtained here, so this module generates data with LRA's
generator (upstream google-research/long-range-arena ``lra_benchmarks/data/listops.py``; Tay et
al., 2021, section 3.1), written from its description:

- a tree is drawn recursively, starting at depth 1: at depth < 10 a uniform draw r decides
  (r > 0.25: a leaf, a digit 0-9 drawn uniformly; else an operator node with 2-10 arguments,
  each a tree one level deeper, and an operator drawn uniformly from MIN, MAX, MED, SM after the
  arguments); at depth 10 always a leaf. Operators therefore nest at most 9 deep.
- its length counts operators, digits and closing brackets (not parentheses); a tree is kept
  iff 500 < length < 2000; kept trees are deduplicated across all three splits.
- the source is written left-nested with parentheses, ``[MAX 2 9]`` as ``( ( ( [MAX 2 ) 9 ) ] )``;
  the target is the value of the expression (``evaluate``).
- files: tab-separated, header ``Source\\tTarget``, written by ``csv.writer`` (``\\r\\n`` line
  ends), one file per split, ``basic_`` prefix.

Differences from the upstream script (none changes the distribution of an example): the random
stream is Python's ``random.Random`` seeded per chunk of 500 kept trees (chunk k uses the seed
``seed * 2**32 + k``), so the output is a pure function of ``--seed`` and the split sizes, the
same for any number of worker processes; the splits are taken in generation order (upstream
collects the trees in a Python ``set`` and takes them in its iteration order, which depends on
the per-process string hash seed); a tree is abandoned as soon as it reaches 2000 symbols.

Cost: about 500 kept examples per second on one core of the development machine (busy with
other jobs), so the full 100,000 take about 3.5 CPU-minutes (``--workers`` splits the chunks).

Tokenisation (LRA ``listops/input_pipeline.py``): ``]`` becomes ``X``, parentheses are dropped,
the rest is split on whitespace; ids (``VOCAB``): PAD 0, digits ``0``-``9`` 1-10, ``[MIN`` 11,
``[MAX`` 12, ``[MED`` 13, ``[SM`` 14, ``X`` 15. LRA builds its vocabulary from the val file
(plus pad/unk); the tokens are the same 15, only the ids differ, which does not matter for a
model trained from scratch. A sequence has 501-1999 tokens, so MAX_LEN = 2000 never truncates.

Manifest (``data/lra/__init__.py``): ``listops-1000/manifest.json`` records source "generated",
``generator`` "data.lra.listops", ``generator_version``, ``seed`` and ``sizes`` {"train", "val",
"test"}; ``ensure`` with another seed or size regenerates the three files (``replace=False``, as
train.py and this command call it: refuses, naming the options that would use them, see
``options_of``). Release files found there without a manifest are used as they are (their row
counts become the sizes; asking for other sizes is a ``DataMismatch``).
"""
import argparse
import csv
import math
import os
import random
import time
from multiprocessing import Pool

import numpy as np

import data
from data.lra import prepare, token_dtype

NUM_CLASSES = 10
MAX_LEN = 2000
TWO_TOWER = False
FOLDER = "listops-1000"  # the release folder name
SPLITS = ("train", "val", "test")

MIN, MAX, MED, SM = "[MIN", "[MAX", "[MED", "[SM"
OPERATORS = (MIN, MAX, MED, SM)  # upstream also defines [FIRST and [LAST but does not use them
END = "]"
VALUE_P = 0.25  # a node at depth < max_depth is an operator with probability VALUE_P
MAX_DEPTH = 10
MAX_ARGS = 10
MIN_LENGTH = 500  # exclusive
MAX_LENGTH = 2000  # exclusive
CHUNK = 500  # kept trees per independently seeded chunk (fixed: the output depends on it)
GENERATOR_VERSION = 1  # raise when a change of the generator changes its output
HEADER = ["Source", "Target"]

PAD = 0
VOCAB = {**{str(d): d + 1 for d in range(10)}, MIN: 11, MAX: 12, MED: 13, SM: 14, "X": 15}
VOCAB_SIZE = 16


def path(lra_dir, split):
    """``lra_dir/listops-1000/basic_{split}.tsv``."""
    return os.path.join(lra_dir, FOLDER, f"basic_{split}.tsv")


# ---------------------------------------------------------------- evaluator

def apply(op, args):
    """Value of operator ``op`` on the list of digits ``args`` (LRA ``to_value``).

    MIN / MAX as usual; MED = ``int(np.median(args))``, i.e. the middle element of the sorted
    list, or for an even count the floor of the mean of the two middle ones; SM = sum mod 10.

    Raises:
        ValueError: unknown operator or empty ``args``.
    """
    if not args:
        raise ValueError(f"operator {op} without arguments")
    if op == MIN:
        return min(args)
    if op == MAX:
        return max(args)
    if op == SM:
        return sum(args) % 10
    if op == MED:
        s = sorted(args)
        n = len(s)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2
    raise ValueError(f"unknown operator {op!r}")


def evaluate(source):
    """Value (int, 0-9) of a ListOps expression.

    Args:
        source (str or list of str): the release form ``( ( ( [MAX 2 ) 9 ) ] )`` or its
            tokens; parentheses are ignored, ``]`` and ``X`` both close the innermost operator.

    Raises:
        ValueError: unknown token, a digit outside any operator, an unclosed or unopened
            operator, or not exactly one value at the top level.
    """
    tokens = source.split() if isinstance(source, str) else source
    stack = [[None, []]]  # [operator, arguments so far]; the bottom collects the top-level value
    for t in tokens:
        if t in ("(", ")"):
            continue
        if t in OPERATORS:
            stack.append([t, []])
        elif t in ("]", "X"):
            if len(stack) == 1:
                raise ValueError("closing bracket without an open operator")
            op, args = stack.pop()
            stack[-1][1].append(apply(op, args))
        elif len(t) == 1 and t.isdigit():
            stack[-1][1].append(int(t))
        else:
            raise ValueError(f"unknown token {t!r}")
    if len(stack) != 1:
        raise ValueError(f"{len(stack) - 1} operator(s) not closed")
    if len(stack[0][1]) != 1:
        raise ValueError(f"expected one value at the top level, got {len(stack[0][1])}")
    return stack[0][1][0]


# ---------------------------------------------------------------- generator

def generate_tree(rng, depth=1, max_depth=MAX_DEPTH, max_args=MAX_ARGS, limit=math.inf):
    """One random tree with the spec's generator (random calls in the spec's order).

    ``limit`` stops the draw as soon as the tree has ``limit`` or more symbols (it would be
    rejected anyway; the trees that are kept consume exactly the same random numbers, so the
    distribution of the kept trees does not change, and rejected trees cost less).

    Returns:
        (tree, length): a leaf is an int 0-9; a node is ``(op, [children])``; length counts
        operators, leaves and closing brackets. (None, n >= limit) for a stopped draw.
    """
    r = rng.random() if depth < max_depth else 1.0
    if r > VALUE_P:
        return rng.choice(range(10)), 1
    length = 2
    children = []
    for _ in range(rng.randint(2, max_args)):
        child, n = generate_tree(rng, depth + 1, max_depth, max_args, limit - length)
        length += n
        if child is None or length >= limit:
            return None, length
        children.append(child)
    return (rng.choice(OPERATORS), children), length


def _emit(tree, out):
    # release form of (op, [v0, ..., vn-1]): ( x (n+1)  op v0 )  v1 ) ... vn-1 )  ] )
    if isinstance(tree, int):
        out.append(str(tree))
        return
    op, children = tree
    out.append("( " * (len(children) + 1) + op)
    _emit(children[0], out)
    out.append(")")
    for c in children[1:]:
        _emit(c, out)
        out.append(")")
    out.append("] )")


def to_string(tree):
    """The release's source string of a tree from ``generate_tree``."""
    out = []
    _emit(tree, out)
    return " ".join(out)


def tree_value(tree):
    """Value of a tree from ``generate_tree`` (same rules as ``evaluate``)."""
    if isinstance(tree, int):
        return tree
    op, children = tree
    return apply(op, [tree_value(c) for c in children])


def generate_chunk(seed, k, n=CHUNK, min_length=MIN_LENGTH, max_length=MAX_LENGTH):
    """The ``n`` kept examples of chunk ``k``: a list of (source, target) in generation order.

    Chunk k draws from ``random.Random`` seeded with ``seed * 2**32 + k`` (``0 <= k < 2**32``),
    so it is the same in every process.
    """
    rng = random.Random(int(seed) * 2 ** 32 + int(k))
    out = []
    while len(out) < n:
        tree, length = generate_tree(rng, limit=max_length)
        if min_length < length < max_length:
            out.append((to_string(tree), tree_value(tree)))
    return out


def _chunk_job(args):
    return generate_chunk(*args)


def generate(num_train=96000, num_val=2000, num_test=2000, seed=0, workers=1, progress=True,
             min_length=MIN_LENGTH, max_length=MAX_LENGTH, chunk=CHUNK):
    """Generate the three splits.

    Chunks 0, 1, 2, ... (``generate_chunk``) are concatenated in order and deduplicated (first
    occurrence kept) until ``num_train + num_val + num_test`` examples are held; train, val and
    test are the consecutive slices. The result depends on ``seed`` and the sizes only.

    Args:
        workers (int): processes (``multiprocessing.Pool``); 1 runs in this process.
        min_length, max_length (int): kept iff min_length < length < max_length (LRA: 500, 2000).
        chunk (int): kept trees per seeded chunk; the output depends on it (default CHUNK = 500).

    Returns:
        dict split -> list of (source str, target int).
    """
    from tqdm import tqdm

    total = num_train + num_val + num_test
    kept = {}
    k = 0
    bar = tqdm(total=total, unit="ex", desc="listops", disable=not progress)
    pool = Pool(workers) if workers > 1 else None
    try:
        while len(kept) < total:
            n_chunks = -(-(total - len(kept)) // chunk)
            jobs = [(seed, k + i, chunk, min_length, max_length) for i in range(n_chunks)]
            k += n_chunks
            results = pool.imap(_chunk_job, jobs) if pool else map(_chunk_job, jobs)
            for rows in results:
                for src, tgt in rows:
                    if len(kept) < total and src not in kept:
                        kept[src] = tgt
                        bar.update(1)
    finally:
        if pool:
            pool.close()
            pool.join()
        bar.close()
    items = list(kept.items())
    return {"train": items[:num_train], "val": items[num_train:num_train + num_val],
            "test": items[num_train + num_val:]}


def write_tsv(file, rows):
    """Write ``rows`` of (source, target) as a release tsv (header ``Source\\tTarget``,
    ``csv.writer`` with tab delimiter), atomically (``data.atomic_write``)."""
    def write(tmp):
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, delimiter="\t")
            w.writerow(["Source", "Target"])
            w.writerows(rows)
    data.atomic_write(file, write)


def expected_manifest(num_train=96000, num_val=2000, num_test=2000, seed=0):
    """The manifest fields that identify generated files (see the module docstring)."""
    return {"dataset": "LRA ListOps", "source": "generated", "generator": "data.lra.listops",
            "generator_version": GENERATOR_VERSION, "seed": int(seed),
            "sizes": {"train": int(num_train), "val": int(num_val), "test": int(num_test)}}


def _count_rows(file):
    with open(file, "rb") as f:
        return max(sum(1 for line in f if line.strip()) - 1, 0)  # minus the header


def _found(directory):
    """Manifest of release files present without a manifest, None when there are none."""
    files = [os.path.join(directory, f"basic_{s}.tsv") for s in SPLITS]
    present = [os.path.exists(f) for f in files]
    if not any(present):
        return None
    if not all(present):
        missing = [f for f, p in zip(files, present) if not p]
        raise FileNotFoundError(f"ListOps files incomplete, missing {', '.join(missing)}; put the release's "
                                f"listops-1000/ there or delete the folder to generate all three splits")
    return {"dataset": "LRA ListOps", "sizes": {s: _count_rows(f) for s, f in zip(SPLITS, files)}}


def ensure(lra_dir, num_train=96000, num_val=2000, num_test=2000, seed=0, workers=None, replace=True):
    """Make ``lra_dir/listops-1000/basic_{train,val,test}.tsv`` hold the asked data: nothing to do
    when its manifest matches (or release files are there, see the module docstring), otherwise
    generate them (into a temporary folder renamed into place when complete).

    Args:
        workers (int or None): generator processes; None = ``os.cpu_count()`` (the output does
            not depend on it).
        replace (bool): False: data generated with other options are kept and refused
            (``data.DataMismatch``) instead of being generated again.

    Returns:
        dict: the folder's manifest.

    Raises:
        FileNotFoundError: some but not all three files exist without a manifest (mixing
            generations would break the deduplication across splits); names the missing ones.
        data.DataMismatch: release files found in place hold other sizes than asked, or (not
            ``replace``) the folder was generated with other options.
    """
    def build(directory):
        splits = generate(num_train, num_val, num_test, seed, workers or os.cpu_count() or 1)
        for s in SPLITS:
            write_tsv(os.path.join(directory, f"basic_{s}.tsv"), splits[s])

    return prepare(os.path.join(lra_dir, FOLDER), expected_manifest(num_train, num_val, num_test, seed), build,
                   "LRA ListOps", found=_found, rebuild=replace)


def options_of(manifest):
    """The ``ensure`` options (train.py's ``lra_options`` entries) that ask for what ``manifest``
    describes: the sizes, and the seed when it is known (not for files found in place)."""
    sizes = manifest.get("sizes") or {}
    options = {f"num_{s}": int(sizes[s]) for s in SPLITS if s in sizes}
    if "seed" in manifest:
        options["seed"] = manifest["seed"]
    return options


def manifest(lra_dir):
    """The manifest of ``lra_dir/listops-1000/`` (None if there is none)."""
    return data.read_manifest(os.path.join(lra_dir, FOLDER))


# ---------------------------------------------------------------- loader

def tokenize(source):
    """LRA's tokenisation: ``]`` -> ``X``, parentheses dropped, whitespace split (list of str)."""
    return [t for t in source.replace("]", "X").split() if t not in ("(", ")")]


def load(lra_dir, split, max_len=MAX_LEN):
    """Read ``lra_dir/listops-1000/basic_{split}.tsv``.

    Args:
        split: "train", "val" or "test".
        max_len (int): sequences are truncated to / right-padded (PAD = 0) to this length.

    Returns:
        dict with ``tokens`` uint8 (N, max_len) (ids in ``VOCAB``), ``lengths`` int64 (N,)
        (tokens before padding, at most max_len), ``labels`` int64 (N,) in [0, 10).

    Raises:
        ValueError: bad split.
        FileNotFoundError: the file is missing (``ensure`` generates it).
        data.DataFormatError: not UTF-8, missing or wrong header, a row without exactly two
            fields, a label not an integer in [0, 10), an unknown token or an empty source; the
            message names the file and line and quotes at most 80 characters.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; available: {', '.join(SPLITS)}")
    file = path(lra_dir, split)
    if not os.path.exists(file):
        raise FileNotFoundError(f"{file} not found; data.lra.listops.ensure({lra_dir!r}) generates it "
                                f"(or put the LRA release's listops-1000/ folder there)")
    seqs, labels = [], []
    line = 0
    try:
        with open(file, newline="", encoding="utf-8") as f:
            reader = csv.reader(f, delimiter="\t")
            for row in reader:
                line = reader.line_num
                if not seqs and not labels and line == 1:
                    if row != HEADER:
                        raise data.DataFormatError(file, "expected the header 'Source<TAB>Target' (LRA's ListOps "
                                                   "files start with it)", line=1, content="\t".join(row))
                    continue
                seqs.append(_parse_row(file, line, row, max_len))
                labels.append(int(row[1]))
    except UnicodeDecodeError as e:
        raise data.DataFormatError(file, f"not UTF-8 text ({e.reason} at byte {e.start}); ListOps files hold "
                                   f"ASCII tokens", line=line + 1) from None
    except csv.Error as e:
        raise data.DataFormatError(file, f"not a tab-separated file ({e})", line=line + 1) from None
    tokens = np.zeros((len(seqs), max_len), dtype=token_dtype(VOCAB_SIZE))
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    for i, s in enumerate(seqs):
        tokens[i, :len(s)] = s
    return {"tokens": tokens, "lengths": lengths, "labels": np.array(labels, dtype=np.int64)}


def _parse_row(file, line, row, max_len):
    """Token ids of one data row (checked; the label is checked here too)."""
    if len(row) != 2:
        raise data.DataFormatError(file, f"expected 2 tab-separated fields (source, target), got {len(row)}",
                                   line=line, content="\t".join(row))
    src, tgt = row
    try:
        label = int(tgt)
    except ValueError:
        raise data.DataFormatError(file, f"the target must be an integer in [0, {NUM_CLASSES})", line=line,
                                   content=tgt) from None
    if not 0 <= label < NUM_CLASSES:
        raise data.DataFormatError(file, f"target {label} outside [0, {NUM_CLASSES})", line=line)
    toks = tokenize(src)
    if not toks:
        raise data.DataFormatError(file, "empty source (an expression of digits and [MIN [MAX [MED [SM ] is "
                                   "expected)", line=line, content=src)
    try:
        return [VOCAB[t] for t in toks[:max_len]]
    except KeyError as e:
        raise data.DataFormatError(file, f"unknown token {e.args[0]!r} (allowed: digits 0-9, [MIN [MAX [MED [SM, ], "
                                   f"parentheses)", line=line, content=src) from None


def main(argv=None):
    p = data.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lra_dir", default=None, help="the LRA root, as train.py's --lra_dir: the files go to "
                   f"LRA_DIR/{FOLDER}/basic_{{train,val,test}}.tsv (default: $LRA_DIR, else data/lra/files)")
    p.add_argument("--num_train", type=int, default=96000)
    p.add_argument("--num_val", type=int, default=2000)
    p.add_argument("--num_test", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (output does not depend on it)")
    a = p.parse_args(argv)
    for name in ("num_train", "num_val", "num_test", "workers"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    from data.lra import default_lra_dir

    lra_dir = a.lra_dir or default_lra_dir()
    t0 = time.time()
    with data.command_errors():
        m = ensure(lra_dir, a.num_train, a.num_val, a.num_test, a.seed, a.workers, replace=False)
    n, dt = sum(m["sizes"].values()), time.time() - t0
    print(f"{os.path.join(lra_dir, FOLDER)}: {n:,} examples ({m['source']}, seed {m.get('seed', 'unknown')}), "
          f"{dt:.1f} s with {a.workers} worker(s)")


if __name__ == "__main__":
    main()
