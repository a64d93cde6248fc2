"""Multi-query associative recall (MQAR): the synthetic task on which efficient attentions are
ranked by how well they recall (Arora et al. 2023, "Zoology: Measuring and Improving Recall in
Efficient Language Models", section 3 and Figure 2; their generator is
HazyResearch/zoology ``zoology/data/multiquery_ar.py``, read, not copied).

An example of length T with N key-value pairs over a vocabulary of V tokens:

    positions 0 .. 2N-1      k_1 v_1 k_2 v_2 ... k_N v_N     (the context)
    positions 2N .. T-1      queries and filler

- keys are drawn without replacement from ``1 .. V/2 - 1``, values without replacement from
  ``V/2 .. V-1`` (token 0 is never a key);
- each key is queried once, at an even offset ``2 g`` of the query region (T - 2N positions),
  with the gaps g drawn without replacement from ``0 .. (T - 2N)/2 - 1`` with probabilities
  proportional to ``(g + 1)^(a - 1)`` (a power law, ``power_a`` = 0.01: most queries come soon
  after the context, as repeated bigrams do in text);
- the label of a query position is the queried key's value (the model predicts it as the next
  token); every other position has label -1 (ignored by loss and accuracy);
- every other position of the query region holds a filler: token 0 (``filler="zero"``, the
  default: Zoology's Figure 2 runs, ``random_non_queries=False`` in their configs) or a token drawn
  uniformly from the vocabulary minus this example's keys (``filler="random"``, their generator's
  default ``random_non_queries=True``).

With random fillers the query region looks like more key-value pairs, and a model must tell the
queries from the noise; with token 0 it need not. A softmax GPT learns the zero-filler task far
sooner (docs/recall.md). Difference from Zoology's random fillers: theirs are drawn from the whole
vocabulary, so a filler can repeat a key and make a query ambiguous (rarely); ours never do, so
every query's key occurs exactly once before it, in the context. The data is a pure function of the options and
the seed (``numpy.random.default_rng([seed, split index])``), the same on every machine.

Files: ``data/mqar/<name>/{train,val,test}_{inputs,labels}.npy`` (inputs uint16 (n, T),
labels int16 (n, T)) and ``manifest.json`` with the options; a folder whose manifest differs
from the options asked for is generated again (``data.ensure_manifest``).

    python -m data.recall --seq_len=256 --num_pairs=16 [--vocab_size=8192 --power_a=0.01 --seed=0]
"""
import os

import numpy as np

import data

DATA_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mqar")
SPLITS = ("train", "val", "test")
GENERATOR_VERSION = 2  # 2: the filler option
FILLERS = ("zero", "random")
IGNORE = -1  # label of every position that is not a query
DEFAULT_SIZES = {"train": 20000, "val": 1000, "test": 1000}


def check_options(seq_len, num_pairs, vocab_size, power_a, filler="zero"):
    """Raise ValueError naming the option and what is allowed when the task cannot be built."""
    if filler not in FILLERS:
        raise ValueError(f"filler must be one of {', '.join(FILLERS)}; got {filler!r}")
    if num_pairs < 1:
        raise ValueError(f"num_pairs must be >= 1, got {num_pairs}")
    if seq_len % 2 or seq_len < 4 * num_pairs:
        raise ValueError(f"seq_len must be even and at least 4 x num_pairs = {4 * num_pairs} (the context of "
                         f"{2 * num_pairs} tokens plus a query region with room for every query); got {seq_len}")
    if not 2 * (num_pairs + 1) <= vocab_size <= 65536:
        raise ValueError(f"vocab_size must lie in [{2 * (num_pairs + 1)}, 65536] (keys and values each need "
                         f"num_pairs distinct tokens, ids are stored as uint16); got {vocab_size}")
    if not power_a > 0:
        raise ValueError(f"power_a must be > 0, got {power_a}")


def generate(num_examples, seq_len, num_pairs, vocab_size=8192, power_a=0.01, seed=0, filler="zero"):
    """``num_examples`` MQAR examples (the rules in the module docstring).

    Args:
        num_examples (int): n.
        seq_len (int): T, even, >= 4 num_pairs.
        num_pairs (int): N key-value pairs per example.
        vocab_size (int): V, keys from 1 .. V/2 - 1, values from V/2 .. V-1.
        power_a (float): exponent a of the gap distribution p(g) ~ (g + 1)^(a - 1).
        seed: anything ``numpy.random.default_rng`` accepts.
        filler (str): "zero" (token 0 between the queries) or "random" (uniform over the
            vocabulary without this example's keys).

    Returns:
        (inputs, labels): int64 arrays of shape (n, T); labels are -1 except at the N query
        positions of each example, where they hold the queried key's value.

    Raises:
        ValueError: options outside what ``check_options`` allows.
    """
    check_options(seq_len, num_pairs, vocab_size, power_a, filler)
    rng = np.random.default_rng(seed)
    half = vocab_size // 2
    context = 2 * num_pairs
    space = (seq_len - context) // 2
    p = np.arange(1, space + 1, dtype=np.float64) ** (power_a - 1)
    p /= p.sum()
    inputs = np.empty((num_examples, seq_len), dtype=np.int64)
    labels = np.full((num_examples, seq_len), IGNORE, dtype=np.int64)
    for i in range(num_examples):
        keys = 1 + rng.choice(half - 1, size=num_pairs, replace=False)
        values = half + rng.choice(vocab_size - half, size=num_pairs, replace=False)
        gaps = rng.choice(space, size=num_pairs, replace=False, p=p)
        # fillers: uniform over the vocabulary without this example's keys: the r-th token of the
        # complement is r shifted up once for every key at or below it (keys in ascending order)
        fill = rng.integers(0, vocab_size - num_pairs, size=seq_len - context)
        for key in np.sort(keys):
            fill += fill >= key
        if filler == "zero":
            fill[:] = 0  # drawn all the same, so both fillers share every other draw of a seed
        row = inputs[i]
        row[0:context:2], row[1:context:2] = keys, values
        row[context:] = fill
        query_positions = context + 2 * gaps
        row[query_positions] = keys
        labels[i, query_positions] = values
    return inputs, labels


def folder(seq_len, num_pairs, vocab_size=8192, power_a=0.01, seed=0, sizes=None, root=DATA_ROOT, filler="zero"):
    """The prepared folder of one option set, e.g. ``<root>/T256_N16_V8192_a0.01_zero_s0_20000-1000-1000``
    (``sizes`` default DEFAULT_SIZES)."""
    sizes = DEFAULT_SIZES if sizes is None else sizes
    return os.path.join(root, f"T{seq_len}_N{num_pairs}_V{vocab_size}_a{power_a:g}_{filler}_s{seed}_"
                        + "-".join(str(sizes[split]) for split in SPLITS))


def prepare(seq_len, num_pairs, vocab_size=8192, power_a=0.01, seed=0, sizes=None, root=DATA_ROOT, filler="zero"):
    """Generate the train / val / test sets of one option set once (a folder per option set,
    reused while its manifest matches) and return the folder.

    Args:
        sizes (dict | None): examples per split, default {"train": 20000, "val": 1000, "test": 1000}.
        root (str): where the folders go (default ``data/mqar/``).
        filler (str): "zero" | "random" (see ``generate``).

    Raises:
        ValueError: options outside what ``check_options`` allows, or a negative size.
    """
    sizes = dict(DEFAULT_SIZES if sizes is None else sizes)
    if sorted(sizes) != sorted(SPLITS) or min(sizes.values()) < 1:
        raise ValueError(f"sizes must give a positive count for each of {', '.join(SPLITS)}; got {sizes}")
    check_options(seq_len, num_pairs, vocab_size, power_a, filler)
    directory = folder(seq_len, num_pairs, vocab_size, power_a, seed, sizes, root, filler)
    expected = {"generator": "data.recall", "generator_version": GENERATOR_VERSION, "seq_len": seq_len,
                "num_pairs": num_pairs, "vocab_size": vocab_size, "power_a": power_a, "filler": filler, "seed": seed, "sizes": sizes}

    def build(out):
        for index, split in enumerate(SPLITS):
            inputs, labels = generate(sizes[split], seq_len, num_pairs, vocab_size, power_a, seed=[seed, index],
                                      filler=filler)
            for name, array, dtype in (("inputs", inputs, np.uint16), ("labels", labels, np.int16)):
                path = os.path.join(out, f"{split}_{name}.npy")
                data.atomic_write(path, lambda tmp, a=array.astype(dtype): _save_npy(tmp, a))

    data.ensure_manifest(directory, expected, build, what="MQAR data")
    return directory


def _save_npy(path, array):
    with open(path, "wb") as f:  # a file object: np.save would append ".npy" to the temporary name
        np.save(f, array)


def load(directory, split):
    """(inputs, labels) of one split of a prepared folder: uint16 / int16 arrays (n, T), memory-mapped.

    Raises:
        data.DataUnavailable: the folder or the split's files are missing (prepare first).
    """
    paths = [os.path.join(directory, f"{split}_{name}.npy") for name in ("inputs", "labels")]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise data.DataUnavailable(f"{missing[0]} not found; prepare the data with python -m data.recall "
                                   f"(or let train.py do it)")
    return tuple(np.load(p, mmap_mode="r") for p in paths)


def main(argv=None):
    ap = data.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq_len", type=int, default=256)
    ap.add_argument("--num_pairs", type=int, default=16)
    ap.add_argument("--vocab_size", type=int, default=8192)
    ap.add_argument("--power_a", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--filler", default="zero", choices=FILLERS)
    ap.add_argument("--sizes", default="20000,1000,1000", help="train,val,test examples")
    args = ap.parse_args(argv)
    try:
        counts = [int(x) for x in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes must be three comma-separated integers (train,val,test); got {args.sizes!r}")
    if len(counts) != len(SPLITS):
        ap.error(f"--sizes must give {len(SPLITS)} counts (train,val,test); got {args.sizes!r}")
    with data.command_errors():
        print(prepare(args.seq_len, args.num_pairs, args.vocab_size, args.power_a, args.seed,
                      dict(zip(SPLITS, counts)), filler=args.filler))


if __name__ == "__main__":
    main()
