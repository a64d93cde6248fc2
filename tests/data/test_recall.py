"""data/recall.py: the MQAR generator against an independent check of the task's definition."""
import json

import numpy as np
import pytest

from data import recall


def check_example(inputs, labels, num_pairs, vocab_size):
    """The task's definition, checked one position at a time (no code shared with the generator)."""
    T, half, context = len(inputs), vocab_size // 2, 2 * num_pairs
    keys, values = list(inputs[0:context:2]), list(inputs[1:context:2])
    assert all(1 <= k < half for k in keys) and len(set(keys)) == num_pairs
    assert all(half <= v < vocab_size for v in values) and len(set(values)) == num_pairs
    assert all(labels[t] == -1 for t in range(context))
    queries = [t for t in range(context, T) if labels[t] != -1]
    assert len(queries) == num_pairs
    assert sorted(inputs[t] for t in queries) == sorted(keys)  # every key queried once
    for t in queries:
        assert (t - context) % 2 == 0
        key = inputs[t]
        earlier = [s for s in range(t) if inputs[s] == key]
        assert earlier == [context - 2 * num_pairs + 2 * keys.index(key)]  # once before it, in the context
        assert labels[t] == values[keys.index(key)]
    fillers = [t for t in range(context, T) if labels[t] == -1]
    assert all(inputs[t] not in keys for t in fillers)


@pytest.mark.parametrize("filler", ["zero", "random"])
@pytest.mark.parametrize("T,N,V", [(64, 4, 8192), (32, 8, 64), (256, 16, 8192)])
def test_examples_follow_the_definition(T, N, V, filler):
    inputs, labels = recall.generate(50, T, N, V, seed=3, filler=filler)
    assert inputs.shape == labels.shape == (50, T)
    for x, y in zip(inputs, labels):
        check_example(list(x), list(y), N, V)
    fillers = inputs[:, 2 * N:][labels[:, 2 * N:] == -1]
    if filler == "zero":
        assert (fillers == 0).all()
    else:
        assert len(np.unique(fillers)) > 10  # spread over the vocabulary, not one token


def test_fillers_change_nothing_else():
    zero_inputs, zero_labels = recall.generate(20, 64, 4, seed=5, filler="zero")
    random_inputs, random_labels = recall.generate(20, 64, 4, seed=5, filler="random")
    assert np.array_equal(zero_labels, random_labels)
    scored = (zero_labels != -1) | (np.arange(64) < 8)  # the context and the queries
    assert np.array_equal(zero_inputs[scored], random_inputs[scored])


def test_seed_fixes_the_data_and_gaps_follow_the_power_law():
    a = recall.generate(200, 128, 4, seed=1)
    b = recall.generate(200, 128, 4, seed=1)
    c = recall.generate(200, 128, 4, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])
    # power_a = 0.01: p(g) ~ (g + 1)^-0.99, so the first gap (g = 0) is the most frequent by far
    gaps = (np.nonzero(a[1] != -1)[1] - 8) // 2
    counts = np.bincount(gaps, minlength=60)
    assert counts[0] == counts.max() and counts[0] > 5 * counts[30:].mean()
    uniform = recall.generate(200, 128, 4, power_a=1.0, seed=1)[1]
    u_counts = np.bincount((np.nonzero(uniform != -1)[1] - 8) // 2, minlength=60)
    assert u_counts[0] < 3 * u_counts.mean()


@pytest.mark.parametrize("kwargs,match", [(dict(seq_len=30, num_pairs=8), "seq_len must be even and at least"),
                                          (dict(seq_len=33, num_pairs=4), "seq_len must be even"),
                                          (dict(seq_len=64, num_pairs=0), "num_pairs must be >= 1"),
                                          (dict(seq_len=64, num_pairs=4, vocab_size=8), "vocab_size must lie in"),
                                          (dict(seq_len=64, num_pairs=4, power_a=0.0), "power_a must be > 0"),
                                          (dict(seq_len=64, num_pairs=4, filler="noise"), "filler must be one of zero, random")])
def test_bad_options_say_what_is_allowed(kwargs, match):
    with pytest.raises(ValueError, match=match):
        recall.generate(1, **kwargs)


def test_prepare_writes_once_and_regenerates_on_other_options(tmp_path):
    sizes = {"train": 20, "val": 5, "test": 5}
    folder = recall.prepare(64, 4, 512, sizes=sizes, root=str(tmp_path))
    manifest = json.loads(open(f"{folder}/manifest.json").read())
    assert manifest["num_pairs"] == 4 and manifest["sizes"] == sizes
    inputs, labels = recall.load(folder, "train")
    assert inputs.dtype == np.uint16 and labels.dtype == np.int16 and inputs.shape == (20, 64)
    mtime = (tmp_path / folder.split("/")[-1] / "train_inputs.npy").stat().st_mtime_ns
    assert recall.prepare(64, 4, 512, sizes=sizes, root=str(tmp_path)) == folder  # reused
    assert (tmp_path / folder.split("/")[-1] / "train_inputs.npy").stat().st_mtime_ns == mtime
    other = recall.prepare(64, 8, 512, sizes=sizes, root=str(tmp_path))
    assert other != folder
    assert recall.prepare(64, 4, 512, sizes=sizes, root=str(tmp_path), filler="random") not in (folder, other)
    val, test = recall.load(folder, "val"), recall.load(folder, "test")
    assert not np.array_equal(val[0], test[0][:5])  # splits are drawn from different streams
