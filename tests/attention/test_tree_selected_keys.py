"""Tree attention's record of the keys each query attends to exactly (``record_keys``,
``TreeAttention.forward_recorded``, ``reference_forward(record=...)``)."""
import math

import pytest
import torch

import attention
from attention.testing import random_qkv
from attention.tree.samplers import SAMPLERS
from attention.tree.schedule import DESCENTS


def _qkv(B=2, H=2, T=21, D=8, seed=0):
    q, k, v = random_qkv(B, H, T, D, dtype=torch.float64, seed=seed)
    return q, k, v


def _tree(**kw):
    return attention.build("tree", **kw)


def _allowed(T, causal, exclude_self=False):
    """(T, T) bool: key i is in query t's history."""
    t, i = torch.arange(T)[:, None], torch.arange(T)[None, :]
    if not causal:
        return torch.ones(T, T, dtype=torch.bool)
    return i < t if exclude_self else i <= t


def _softmax(q, k, v, mask):
    scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, -1)) @ v


def _from_buds(q, k, v, bud_start, normalization):
    """The tree output computed from a partition of each query's history into buds, directly from
    the paper's formulas (reference.py docstring), one (batch, query) at a time. (B, H, T, D)."""
    B, H, T, D = q.shape
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            starts = sorted(set(bud_start[b, t].tolist()) - {-1})
            if not starts:
                continue
            logits, values = [], []
            for s in starts:
                members = (bud_start[b, t] == s).nonzero().flatten()
                n = len(members)
                mean_score = (q[b, :, t, None, :] * k[b, :, members]).sum(-1).mean(-1) / math.sqrt(D)  # (H,)
                if normalization == "bud_mean":
                    logits.append(mean_score + math.log(n))
                    values.append(v[b, :, members].mean(1))
                else:
                    logits.append(mean_score)
                    values.append(v[b, :, members].sum(1))
            w = torch.softmax(torch.stack(logits), 0)                 # (n_buds, H)
            out[b, :, t] = (w[:, :, None] * torch.stack(values)).sum(0)
    return out


@pytest.mark.parametrize("causal,exclude_self", [(True, False), (True, True), (False, False)])
@pytest.mark.parametrize("sampler", ["edh", "alignment", "rff"])
def test_E1_records_every_allowed_key(causal, exclude_self, sampler):
    q, k, v = _qkv()
    T = q.shape[2]
    module = _tree(E=1.0, sampler=sampler, exclude_self=exclude_self, record_keys=True)
    with torch.no_grad():
        out = module(q, k, v, causal=causal)
    rec = module.recorded
    allowed = _allowed(T, causal, exclude_self)
    assert rec["exact_keys"].shape == (2, 2, T, T) and rec["exact_keys"].dtype == torch.bool
    assert torch.equal(rec["exact_keys"], allowed.expand(2, 2, T, T))
    assert torch.equal(rec["bud_start"], torch.where(allowed, torch.arange(T), -1).expand(2, T, T))
    torch.testing.assert_close(out, _softmax(q, k, v, allowed), atol=1e-12, rtol=1e-12)


def test_hand_case_with_one_bud_per_round():
    """P = 1, E = 0.5, 4 causal positions: only one bud can be expanded per round, so the buds are
    fixed whatever the sampler. t = 0: {0}; t = 1 (2 terms): {0}, {1}; t = 2 (l = 3, 2 terms):
    the initial bud [0, 4) splits into [0, 2) and its right child, which holds key 2 only;
    t = 3 (l = 4, 2 terms): [0, 2) and [2, 4), no key alone."""
    q, k, v = _qkv(B=1, H=1, T=4)
    for sampler in SAMPLERS:
        _, rec = _tree(E=0.5, P=1, sampler=sampler).forward_recorded(q, k, v, causal=True)
        assert rec["bud_start"][0].tolist() == [[0, -1, -1, -1], [0, 1, -1, -1], [0, 0, 2, -1], [0, 0, 2, 2]]
        assert rec["exact_keys"][0, 0].tolist() == [[True, False, False, False], [True, True, False, False],
                                                    [False, False, True, False], [False, False, False, False]]


@pytest.mark.parametrize("descent", DESCENTS)
@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("normalization", ["bud_mean", "paper"])
def test_small_E_records_a_partition_that_gives_the_output(descent, sampler, normalization):
    """With E < 1: the buds partition each query's (causal) history into runs labelled by their
    first key; the exact keys are the one-key buds and lie inside the history; the output is the
    paper's formula over that partition (computed here independently from q, k, v); the number
    of buds is the module's term count; fast paths with the same draws give the same output."""
    q, k, v = _qkv(T=29)
    B, H, T, _ = q.shape
    module = _tree(E=0.5, sampler=sampler, normalization=normalization, descent=descent, record_keys=True)
    with torch.no_grad():
        out = module(q, k, v, causal=True)
    rec = module.recorded
    allowed = _allowed(T, True)
    assert torch.equal(rec["bud_start"] >= 0, allowed.expand(B, T, T))
    i = torch.arange(T)
    assert ((rec["bud_start"] <= i) | (rec["bud_start"] == -1)).all()   # labelled by a start at or before i
    exact = rec["exact_keys"][:, 0]
    assert not (exact & ~allowed).any()
    assert torch.equal(rec["exact_keys"][:, 1], exact)                    # one tree for all heads
    for b in range(B):
        for t in range(T):
            row = rec["bud_start"][b, t, :t + 1].tolist()
            sizes = {s: row.count(s) for s in set(row)}
            assert all(row[s] == s and row[s:s + n] == [s] * n for s, n in sizes.items())  # consecutive runs
            assert exact[b, t].nonzero().flatten().tolist() == sorted(s for s, n in sizes.items() if n == 1)
    assert not torch.equal(exact, allowed.expand(B, T, T))                # E < 1 leaves some keys in buds
    n_buds = sum(len(set(rec["bud_start"][b, t].tolist()) - {-1}) for b in range(B) for t in range(T))
    assert module.stats()["terms"] == n_buds * H
    torch.testing.assert_close(out, _from_buds(q, k, v, rec["bud_start"], normalization), atol=1e-10, rtol=1e-10)
    with torch.no_grad():
        fast = _tree(E=0.5, sampler=sampler, normalization=normalization, descent=descent,
                     implementation="vectorized")(q, k, v, causal=True)
    torch.testing.assert_close(fast, out, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("sampler", ["uniform", "edh"])
def test_keys_outside_the_record_can_be_zeroed_without_changing_the_buds(sampler):
    """Uniform and EDH masses do not look at the keys, so the buds stay the same when keys change.
    Zero every key that the record does NOT hold for query t: each bud of several keys then has
    all-equal scores (0), where bud_mean is exact, and the tree output at t must equal exact softmax
    over the changed keys. A recorded key that in fact shares a bud with others would break this."""
    q, k, v = _qkv(B=1, H=2, T=32, seed=3)
    module = _tree(E=0.7, sampler=sampler)
    _, rec = module.forward_recorded(q, k, v, causal=True)
    exact = rec["exact_keys"][0, 0]
    some = [t for t in range(32) if 0 < exact[t].sum() < t + 1]  # queries with exact keys and buds
    assert len(some) >= 5
    for t in some[-5:]:
        keep = exact[t]
        k2 = k * keep[None, None, :, None]
        out2, rec2 = module.forward_recorded(q, k2, v, causal=True, positions=[t])
        assert torch.equal(rec2["bud_start"][0, t], rec["bud_start"][0, t])
        expected = _softmax(q, k2, v, _allowed(32, True))
        torch.testing.assert_close(out2[0, :, t], expected[0, :, t], atol=1e-12, rtol=1e-12)


def test_positions_subset_and_errors():
    q, k, v = _qkv(T=16)
    module = _tree(E=0.5, sampler="alignment")
    full, rec_full = module.forward_recorded(q, k, v, causal=True)
    part, rec_part = module.forward_recorded(q, k, v, causal=True, positions=[3, 15])
    torch.testing.assert_close(part[:, :, [3, 15]], full[:, :, [3, 15]], atol=0, rtol=0)
    assert torch.equal(rec_part["bud_start"][:, [3, 15]], rec_full["bud_start"][:, [3, 15]])
    others = [t for t in range(16) if t not in (3, 15)]
    assert (rec_part["bud_start"][:, others] == -1).all() and not rec_part["exact_keys"][:, :, others].any()
    assert (part[:, :, others] == 0).all()
    with pytest.raises(ValueError, match="positions must lie in 0..15"):
        module.forward_recorded(q, k, v, causal=True, positions=[16])
    # per batch element: a (B, T) mask; each element keeps its own draws (batch index in the noise)
    mask = torch.zeros(2, 16, dtype=torch.bool)
    mask[0, 5], mask[1, 9], mask[1, 12] = True, True, True
    part, rec_part = module.forward_recorded(q, k, v, causal=True, positions=mask)
    assert torch.equal(rec_part["bud_start"] >= 0, (rec_full["bud_start"] >= 0) & mask[:, :, None])
    assert torch.equal(rec_part["bud_start"][mask], rec_full["bud_start"][mask])
    torch.testing.assert_close(part.transpose(1, 2)[mask], full.transpose(1, 2)[mask], atol=0, rtol=0)
    with pytest.raises(ValueError, match="bool of shape"):
        module.forward_recorded(q, k, v, causal=True, positions=mask[:1])


def test_recording_is_off_by_default_and_only_in_the_reference():
    q, k, v = _qkv(T=12)
    plain = _tree(E=0.5, sampler="edh")
    assert plain.record_keys is False
    with torch.no_grad():
        out = plain(q, k, v, causal=True)
    assert plain.recorded is None
    recording = _tree(E=0.5, sampler="edh", record_keys="True")  # strings as from a command line
    with torch.no_grad():
        out_rec = recording(q, k, v, causal=True)
    torch.testing.assert_close(out_rec, out, atol=1e-9, rtol=1e-9)
    assert recording.recorded["exact_keys"].shape == (2, 2, 12, 12)
    assert "record_keys=True" in repr(recording)
    for impl in ("cpu", "vectorized"):
        with pytest.raises(ValueError, match="record_keys=True records in the reference implementation only"):
            _tree(record_keys=True, implementation=impl)
    with pytest.raises(ValueError, match="record_keys must be True or False"):
        _tree(record_keys="yes")
    with pytest.raises(attention.InferenceOnlyError):
        recording(q.requires_grad_(), k, v, causal=True)


def test_record_inside_a_gpt():
    """set_attention passes record_keys to every layer; each layer keeps its own record."""
    from model import GPT, ModelConfig

    torch.manual_seed(0)
    gpt = GPT(ModelConfig(block_size=16, vocab_size=32, n_layer=2, n_head=2, n_embd=16)).eval()
    gpt.set_attention("tree", {"E": 1.0, "record_keys": True})
    with torch.no_grad():
        gpt(torch.randint(0, 32, (1, 10)))
    for mechanism in gpt.attention_modules():
        assert torch.equal(mechanism.recorded["exact_keys"][0, 0], _allowed(10, True))
