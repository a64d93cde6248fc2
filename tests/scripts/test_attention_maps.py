"""scripts/analysis/capture.py (the (T, T) weights of every registered attention: closed forms and
the value-basis probe) and the recall input of scripts/analysis/attention_maps.py.

Every probed matrix is compared with an explicit form written here from the method's definition
(or its own pair rules), so a probe that put a column in the wrong place, dropped the last partial
chunk or ignored the padding mask fails."""
import json
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attention
import train
from attention import bigbird, informer, reformer
from attention.feature_maps import performer_relu_features, performer_softmax_features
from attention.testing import padding_mask, random_qkv
from scripts.analysis import attention_maps
from scripts.analysis.capture import attention_weights, probe_weights

torch.set_num_threads(1)
B, H, T, D = 2, 2, 37, 8  # T is not a multiple of D: the last chunk of the probe is partial
CONTEXT = {"layer_idx": 0, "block_size": 48, "n_head": H, "head_dim": D}
MASKS = (None, "right", "holes")


def qkv(seed=0, **kw):
    return random_qkv(**{"B": B, "H": H, "T": T, "D": D, "seed": seed, **kw})


def build(name, **params):
    return attention.build(name, CONTEXT, **params).eval()


def masked_softmax(scores, allowed):
    """softmax over the allowed entries of each row; rows without any are zero."""
    allowed = allowed.expand_as(scores)
    w = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)
    return torch.where(allowed.any(-1, keepdim=True), w, 0.0)


def normalised(A):
    """A / its row sums (rows summing to zero stay zero)."""
    s = A.sum(-1, keepdim=True)
    return A / torch.where(s == 0, 1.0, s)


def pairs(causal, mask, T=T):
    """(B or 1, 1, T, T) bool: causal and real keys."""
    allowed = torch.ones(T, T, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    allowed = allowed[None, None]
    return allowed if mask is None else allowed & mask[:, None, None, :]


def scaled_scores(q, k):
    return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])


def check_probe(module, expected, q, k, causal, mask, atol=1e-12):
    """The probe equals ``expected`` and reproduces the module's output on random values."""
    A = attention_weights(module, q, k, causal, mask)
    assert A.shape == (B, H, T, T) and A.dtype == torch.float64
    torch.testing.assert_close(A, expected, atol=atol, rtol=0)
    v = qkv(seed=7)[2]
    with torch.no_grad():
        out = module(q, k, v, causal, mask)
    torch.testing.assert_close(A @ v, out, atol=1e-10, rtol=0)
    return A


# ---------------------------------------------------------------- closed forms and probe agree


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name, params", [
    ("softmax", {}), ("softmax", {"window": 5}), ("softmax_reference", {"exclude_self": True}),
    ("fastmax", {"p": 1}), ("fastmax", {"p": 2}),
])
def test_probe_equals_the_closed_forms(name, params, causal, mask_kind):
    module = build(name, **params)
    q, k, _ = qkv(scale=1.5)
    mask = padding_mask(mask_kind, B, T)
    closed = attention_weights(module, q, k, causal, mask)
    probed = probe_weights(module, q, k, causal, mask)
    torch.testing.assert_close(probed, closed, atol=1e-12, rtol=0)
    if name.startswith("softmax"):  # and the closed form is the definition
        allowed = pairs(causal, mask)
        if params.get("window"):
            i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
            allowed = allowed & ((j > i - 5) if causal else ((i - j).abs() < 5))
        if params.get("exclude_self"):
            allowed = allowed & ~torch.eye(T, dtype=torch.bool)
        torch.testing.assert_close(closed, masked_softmax(scaled_scores(q, k), allowed), atol=1e-12, rtol=0)


@pytest.mark.parametrize("value_dim", [1, 5, 8, 36, 37, 64])
def test_probe_chunking_does_not_change_the_matrix(value_dim):
    q, k, _ = qkv()
    mask = padding_mask("right", B, T)
    for module in (build("bigbird", block_size_sparse=4, num_random_blocks=2), build("dense")):
        reference = probe_weights(module, q, k, True, mask)
        torch.testing.assert_close(probe_weights(module, q, k, True, mask, value_dim=value_dim), reference,
                                   atol=1e-12, rtol=0)


# ---------------------------------------------------------------- probe vs each method's explicit form


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("causal", [True, False])
def test_dense_is_the_unnormalised_score_matrix(causal, mask_kind):
    q, k, _ = qkv()
    mask = padding_mask(mask_kind, B, T)
    expected = (q @ k.transpose(-1, -2)) * pairs(causal, mask)
    if mask is not None:  # padded queries output zeros
        expected = expected * mask[:, None, :, None]
    A = check_probe(build("dense"), expected, q, k, causal, mask)
    assert (A < 0).any() and (A.sum(-1) - 1).abs().max() > 0.1  # no normaliser


def test_dense_windows():
    q, k, _ = qkv()
    w = torch.arange(T) // 6
    shifted = (torch.arange(T) + 3) // 6
    for params, ids in (({"window": 6}, w), ({"window": 6, "shift": True}, shifted)):
        expected = (q @ k.transpose(-1, -2)) * pairs(True, None) * (ids[:, None] == ids[None, :])
        check_probe(build("dense", **params), expected, q, k, True, None)


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("causal", [True, False])
def test_linear_attention(causal, mask_kind):
    q, k, _ = qkv()
    mask = padding_mask(mask_kind, B, T)
    phi = lambda x: F.elu(x) + 1  # noqa: E731  (Katharopoulos et al., section 3.2)
    expected = normalised(phi(q) @ phi(k).transpose(-1, -2) * pairs(causal, mask))
    check_probe(build("linear", chunk_size=8), expected, q, k, causal, mask)


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
@pytest.mark.parametrize("mask_kind", [None, "holes"])
@pytest.mark.parametrize("causal", [True, False])
def test_performer(causal, mask_kind, kernel):
    q, k, _ = qkv()
    mask = padding_mask(mask_kind, B, T)
    module = build("performer", num_features=16, kernel=kernel, chunk_size=8)
    W = module.projection.double()
    features = performer_softmax_features if kernel == "softmax" else performer_relu_features
    qf, kf = features(q * D ** -0.25, W), features(k * D ** -0.25, W)
    expected = normalised(qf @ kf.transpose(-1, -2) * pairs(causal, mask))
    check_probe(module, expected, q, k, causal, mask, atol=1e-10)


@pytest.mark.parametrize("sharing", ["headwise", "kv", "none"])
@pytest.mark.parametrize("mask_kind", [None, "right"])
def test_linformer_weights_over_the_original_positions(sharing, mask_kind):
    q, k, _ = qkv()
    mask = padding_mask(mask_kind, B, T)
    torch.manual_seed(0)
    module = build("linformer", proj_len=6, sharing=sharing)
    E, F_ = (x.detach().double()[..., :T] for x in (module.E, module.E if module.F is None else module.F))
    real = torch.ones(B, T, dtype=torch.bool) if mask is None else mask
    k_real = k * real[:, None, :, None]
    # Eq. 7: softmax(Q (E K)^T / sqrt(D)) (F V) = [softmax(...) F] V, padded positions zeroed first
    weights = torch.softmax(q @ (E @ k_real).transpose(-1, -2) / math.sqrt(D), dim=-1)  # (B, H, T, k)
    expected = (weights @ F_) * real[:, None, None, :]
    A = check_probe(module, expected, q, k, False, mask)
    assert (A.sum(-1) - 1).abs().max() > 0.1  # F mixes the values: rows need not sum to one
    with pytest.raises(ValueError, match="linformer is not causal"):
        attention_weights(module, q, k, True)


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("causal", [True, False])
def test_longformer(causal, mask_kind):
    q, k, _ = qkv()
    mask = padding_mask(mask_kind, B, T)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    window, num_global = 3, 2  # Beltagy et al. section 3.1: sliding window plus symmetric global tokens
    allowed = pairs(causal, mask) & (((i - j).abs() <= window) | (i < num_global) | (j < num_global))
    check_probe(build("longformer", window=window, num_global=num_global, chunk_size=16),
                masked_softmax(scaled_scores(q, k), allowed), q, k, causal, mask)


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("causal", [True, False])
def test_bigbird(causal, mask_kind):
    q, k, _ = qkv()
    mask = padding_mask(mask_kind, B, T)
    module = build("bigbird", block_size_sparse=4, num_random_blocks=2, seed=3)
    real = torch.ones(B, T, dtype=torch.bool) if mask is None else mask
    allowed = bigbird.allowed_pairs(T, H, causal, real, **module.params)
    assert not allowed.all()  # a sparse pattern at this size
    check_probe(module, masked_softmax(scaled_scores(q, k), allowed), q, k, causal, mask)


@pytest.mark.parametrize("mask_kind", [None, "right"])
@pytest.mark.parametrize("causal", [True, False])
def test_reformer(causal, mask_kind):
    q, k, _ = qkv()
    mask = padding_mask(mask_kind, B, T)
    module = build("reformer", n_hashes=2, bucket_size=4, seed=1)
    real = torch.ones(B, T, dtype=torch.bool) if mask is None else mask
    p = module.params
    buckets, _ = reformer.hashing(q, real, p["n_hashes"], p["bucket_size"], p["seed"])
    _, slot = reformer.sorted_chunks(buckets)
    allowed = reformer.allowed_pairs(buckets, slot // reformer.chunk_length(T, p["bucket_size"], p["chunk_size"]),
                                     causal, real)
    keys = q / q.norm(dim=-1, keepdim=True)  # shared QK (Kitaev et al. section 2): k is not read
    expected = masked_softmax(scaled_scores(q, keys), allowed)
    if mask is not None:
        expected = expected * mask[:, None, :, None]  # a padding query outputs zero
    check_probe(module, expected, q, k, causal, mask)


@pytest.mark.parametrize("implementation", ["fast", "reference"])
@pytest.mark.parametrize("mask_kind", [None, "right"])
@pytest.mark.parametrize("causal", [True, False])
def test_informer_rows_are_softmax_for_active_queries_and_uniform_otherwise(causal, mask_kind, implementation):
    q, k, _ = qkv()
    mask = padding_mask(mask_kind, B, T)
    module = build("informer", factor=1.0, implementation=implementation)
    A = attention_weights(module, q, k, causal, mask)
    allowed = pairs(causal, mask).expand(B, H, T, T)
    soft = masked_softmax(scaled_scores(q, k), allowed)
    uniform = normalised(allowed.double())  # Eq. 3 with a zero query row: the mean of the allowed values
    is_soft = (A - soft).abs().amax(-1) < 1e-12
    is_uniform = (A - uniform).abs().amax(-1) < 1e-12
    assert (is_soft | is_uniform).all()
    u = informer.active_count(T, 1.0)  # ceil(ln 37) = 4 active queries per (batch element, head)
    assert u == 4 and ((is_soft & ~is_uniform).sum(-1) == u).all()
    v = qkv(seed=7)[2]
    with torch.no_grad():
        torch.testing.assert_close(A @ v, module(q, k, v, causal, mask), atol=1e-10, rtol=0)


def tree_weights(q, k, bud_start, normalization):
    """Tree attention's weights from its buds (reference.py, "Output per head"): leaf i of bud n
    gets e^{a_n} with a_n = mean over the bud of q.k / sqrt(D), divided by sum_n |n| e^{a_n}
    ("bud_mean") or sum_n e^{a_n} ("paper")."""
    s = scaled_scores(q, k)
    A = torch.zeros_like(s)
    for b in range(q.shape[0]):
        for t in range(q.shape[2]):
            starts = bud_start[b, t]
            buds = [torch.nonzero(starts == start)[:, 0] for start in starts[starts >= 0].unique()]
            a = torch.stack([s[b, :, t, keys].mean(-1) for keys in buds], dim=-1)  # (H, n buds)
            sizes = torch.tensor([len(keys) for keys in buds], dtype=s.dtype)
            total = (torch.exp(a) * (sizes if normalization == "bud_mean" else 1.0)).sum(-1, keepdim=True)
            for n, keys in enumerate(buds):
                A[b, :, t, keys] = (torch.exp(a[:, n]) / total[:, 0])[:, None]
    return A


@pytest.mark.parametrize("normalization", ["bud_mean", "paper"])
@pytest.mark.parametrize("sampler", ["edh", "alignment"])
def test_tree_attention_from_its_buds(sampler, normalization):
    q, k, _ = qkv()
    module = build("tree", E=0.5, sampler=sampler, normalization=normalization, implementation="vectorized")
    with torch.no_grad():
        _, record = module.forward_recorded(q, k, qkv()[2], True)
    expected = tree_weights(q, k, record["bud_start"], normalization)
    assert (record["bud_start"] >= 0).sum() > 0 and not record["exact_keys"].all()  # buds of several keys
    A = check_probe(module, expected, q, k, True, None)
    if normalization == "bud_mean":
        torch.testing.assert_close(A.sum(-1), torch.ones(B, H, T, dtype=torch.float64), atol=1e-12, rtol=0)


# ---------------------------------------------------------------- draws, side effects, errors


@pytest.mark.parametrize("name, params", [
    ("bigbird", {"block_size_sparse": 4}), ("reformer", {"bucket_size": 4, "n_hashes": 2}),
    ("informer", {"factor": 1.0}), ("performer", {"num_features": 16}),
    ("tree", {"E": 0.4, "sampler": "favor_plus"}),
])
def test_draws_are_the_same_in_every_call(name, params):
    q, k, _ = qkv()
    module = build(name, **params)
    first = attention_weights(module, q, k, True)
    second = attention_weights(module, q, k, True)
    assert torch.equal(first, second)


def test_probe_leaves_tree_stats_and_record_alone():
    q, k, v = qkv()
    module = build("tree", E=0.5, record_keys=True)
    with torch.no_grad():
        module(q, k, v, True)
    stats, recorded = module.stats(), module.recorded
    attention_weights(module, q, k, True)
    assert module.stats() == stats and module.recorded is recorded


class Squared(torch.nn.Module):
    """Softmax attention applied to v * v: not linear in v."""

    def forward(self, q, k, v, causal, attention_mask=None):
        return masked_softmax(scaled_scores(q, k), pairs(causal, None)) @ (v * v)


class Noisy(torch.nn.Module):
    """Linear in v, but a new random matrix in every call (like dropout in training mode)."""

    def forward(self, q, k, v, causal, attention_mask=None):
        drop = (torch.rand(q.shape[:-1] + (k.shape[2],), dtype=q.dtype) > 0.3).to(q.dtype)
        return (masked_softmax(scaled_scores(q, k), pairs(causal, None)) * drop) @ v


@pytest.mark.parametrize("module", [Squared(), Noisy()])
def test_a_module_without_one_matrix_is_refused(module):
    q, k, _ = qkv()
    with pytest.raises(ValueError, match="does not apply one matrix A to v: it is not linear in v, or its random "
                                         "draws differ"):
        attention_weights(module, q, k, True)


def test_fastmax_with_dropout_in_training_mode_is_refused():
    module = build("fastmax", p=2, dropout=0.1).train()
    q, k, _ = qkv()
    with pytest.raises(ValueError, match="call mechanism.eval"):
        attention_weights(module, q, k, True)
    module.eval()
    assert attention_weights(module, q, k, True).shape == (B, H, T, T)


def test_value_dim_must_be_positive():
    q, k, _ = qkv()
    with pytest.raises(ValueError, match="value_dim must be >= 1"):
        probe_weights(build("dense"), q, k, True, value_dim=0)


# ---------------------------------------------------------------- attention_maps: plotting scales


def test_panel_scales():
    A = np.tril(np.random.default_rng(0).random((6, 6)))
    A /= A.sum(1, keepdims=True)
    causal = np.tril(np.ones((6, 6), dtype=bool))
    shown, vmin, vmax, cmap, note = attention_maps._shown(A, "log", causal)
    np.testing.assert_allclose(shown[causal], np.log10(np.maximum(A[causal], 1e-4)))  # a stochastic row: log A
    assert (vmin, vmax, note) == (-4.0, 0.0, "")
    signed = A - 0.1
    shown, vmin, vmax, cmap, note = attention_maps._shown(signed, "linear", causal)
    assert cmap == "RdBu_r" and vmin == -vmax and note == " (signed)"  # negative entries: diverging colours
    shown, vmin, vmax, cmap, _ = attention_maps._shown(signed, "abs", causal)
    assert np.array_equal(shown, np.abs(signed)) and vmin == 0.0
    shown, *_ = attention_maps._shown(signed, "log", causal)
    share = np.abs(signed) / np.abs(signed).sum(1, keepdims=True)
    np.testing.assert_allclose(shown, np.log10(np.maximum(share, 1e-4)))


# ---------------------------------------------------------------- attention_maps: recall runs


@pytest.fixture(scope="module")
def recall_runs(tmp_path_factory):
    """Two tiny recall runs (softmax and linear attention; 2 training steps) on one data folder,
    and a third on another folder."""
    tmp = tmp_path_factory.mktemp("recall_maps")
    runs = {}
    for name, data, extra in (("softmax", "data", []), ("linear", "data", ["--attention=linear"]),
                              ("other", "data2", ["--recall_data_seed=1"])):
        runs[name] = str(tmp / name)
        train.main(["configs/recall/mqar.py", f"--out_dir={runs[name]}", "--block_size=16", "--recall_pairs=2",
                    "--recall_vocab=32", f"--recall_dir={tmp / data}", "--n_embd=16", "--batch_size=8",
                    "--max_iters=2", "--eval_interval=2", "--warmup_iters=1", "--lr_decay_iters=2",
                    "--num_threads=1", "--recall_sizes={'train': 64, 'val': 16, 'test': 20}", *extra])
    return runs


def scan_queries(tokens, labels):
    """(t, j) of every query by scanning for the earlier equal token (independent of query_keys)."""
    found = []
    for t in np.nonzero(labels != -1)[0]:
        j = [p for p in range(t) if tokens[p] == tokens[t]]
        assert len(j) == 1 and labels[t] == tokens[j[0] + 1]
        found.append((t, j[0]))
    return found


def test_recall_maps_markers_summary_and_files(recall_runs, tmp_path):
    import matplotlib.image

    out = str(tmp_path / "res" / "maps")
    dirs = [recall_runs["softmax"], recall_runs["linear"]]
    weights, errors = attention_maps.main([*dirs, "--split=test", "--example=3", "--stat_examples=5",
                                           "--weights=best.pt", "--scale=linear,log", f"--out={out}",
                                           "--num_threads=1"])
    assert weights.shape == (2, 2, 16, 16) and errors.max() < 1e-5
    saved = np.load(f"{out}.npz")
    with open(os.path.join(dirs[0], "final_metrics.json")) as f:
        folder = json.load(f)["data"]["folder"]
    inputs, labels = np.load(os.path.join(folder, "test_inputs.npy")), np.load(os.path.join(folder, "test_labels.npy"))
    assert saved["tokens"].tolist() == inputs[3].tolist()
    found = scan_queries(inputs[3], labels[3])
    assert list(zip(saved["query_positions"], saved["key_positions"])) == found
    assert (saved["value_positions"] == saved["key_positions"] + 1).all()
    # the summary over the first 5 examples, recomputed one example at a time with model_maps
    for m, out_dir in enumerate(dirs):
        model, _ = attention_maps.load_checkpoint(out_dir, weights="best.pt")
        value, key, count = np.zeros(2), np.zeros(2), 0
        for e in range(5):
            maps, _ = attention_maps.model_maps(model, inputs[e], head=0)
            for t, j in scan_queries(inputs[e], labels[e]):
                value += maps[:, t, j + 1]
                key += maps[:, t, j]
                count += 1
        np.testing.assert_allclose(saved["stat_value_weight"][m], value / count, atol=1e-10)
        np.testing.assert_allclose(saved["stat_key_weight"][m], key / count, atol=1e-10)
        np.testing.assert_allclose(saved["stat_value_share"][m], value / count, atol=1e-10)  # rows sum to one
        queries = attention_maps.recall_queries(inputs[:5], labels[:5], 2)
        batched = attention_maps.recall_statistics(model, inputs[:5], queries, batch_size=2)  # 3 batches
        np.testing.assert_allclose(batched["value_weight"], value / count, atol=1e-10)
        np.testing.assert_allclose(batched["key_weight"], key / count, atol=1e-10)
    assert int(saved["stat_queries"]) == 10 and int(saved["stat_examples"]) == 5
    assert list(saved["attention"]) == ["softmax", "linear"] and str(saved["weights_file"]) == "best.pt"
    for png in (f"{out}.png", f"{out}_log.png", f"{out}_queries.png"):
        image = matplotlib.image.imread(png)
        assert image.ndim == 3 and image.std() > 0.05
    with open(os.path.join(os.path.dirname(out), "manifest.json")) as f:
        assert "maps" in json.load(f)


def test_recall_errors(recall_runs, tmp_path):
    out = f"--out={tmp_path / 'm'}"
    with pytest.raises(SystemExit, match="different data folders"):
        attention_maps.main([recall_runs["softmax"], recall_runs["other"], "--split=test", out])
    with pytest.raises(SystemExit, match="--example=20 out of range: split 'test' has 20 examples"):
        attention_maps.main([recall_runs["softmax"], "--split=test", "--example=20", out])
    with pytest.raises(SystemExit, match="--offset applies to language models"):
        attention_maps.main([recall_runs["softmax"], "--split=test", "--offset=3", out])
    with pytest.raises(SystemExit, match="a recall example has 16 tokens"):
        attention_maps.main([recall_runs["softmax"], "--split=test", "--length=17", out])
    with pytest.raises(SystemExit):
        attention_maps.main([recall_runs["softmax"], "--scale=linear,bogus", out])


def test_attention_swapped_in_for_the_maps(recall_runs, tmp_path):
    """--attention: one spec per out_dir ('-' keeps the model's own); tree attention with E = 1 keeps
    every key, so its map of the softmax model is the softmax map; at E = 0.5 it differs."""
    out = str(tmp_path / "swap")
    run = recall_runs["softmax"]
    weights, errors = attention_maps.main([run, run, run, "--split=test", "--stat_examples=0", f"--out={out}",
                                           "--attention=-", "--attention=tree:E=1", "--attention=tree:E=0.5",
                                           "--num_threads=1"])
    assert errors.max() < 1e-5
    np.testing.assert_allclose(weights[1], weights[0], atol=1e-6)
    assert np.abs(weights[2] - weights[0]).max() > 1e-3
    assert list(np.load(f"{out}.npz")["attention"]) == ["softmax", "tree", "tree"]


def test_attention_swap_errors(recall_runs, tmp_path):
    out = f"--out={tmp_path / 'm'}"
    run = recall_runs["softmax"]
    with pytest.raises(SystemExit):  # argparse: one --attention per out_dir
        attention_maps.main([run, run, "--split=test", "--attention=tree", out])
    with pytest.raises(SystemExit, match="unknown attention 'bogus'.*softmax"):
        attention_maps.main([run, "--split=test", "--attention=bogus", out])
    with pytest.raises(SystemExit, match="not a registered attention"):
        attention_maps.main([run, "--split=test", "--attention=sdpa", out])
    with pytest.raises(SystemExit, match="--attention 'reformer': attention='reformer' is not exactly causal"):
        attention_maps.main([run, "--split=test", "--attention=reformer", out])
