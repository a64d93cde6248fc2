"""What the sparse attentions share (``longformer``, ``bigbird``, ``reformer``, ``informer``): the
explicit masked softmax their references call, a masked softmax over gathered keys that returns
its log-normaliser, rows that attend to every key, block-sparse attention over a table of key
blocks, and the parameter checks.

Every function takes q, k, v of shape (B, H, T, D) (or a block view of them) and computes in
``work_dtype`` (float32, or float64 for float64 input); callers cast the result to v's dtype.
The allowed-pair convention is the one of ``attention.softmax``: a query row with no allowed key
outputs zeros (and a log-normaliser of -inf).
"""
import math

import torch

from attention.linear import check_choice
from attention.registry import Attention, check_qkv

# scores held at once by the loops over blocks (float32: 4 MB; larger groups run slower on a
# CPU, their working set leaves the caches)
SCORE_BUDGET = 1 << 20


def work_dtype(*tensors):
    """float32 for half, bfloat16 and float32 input, float64 if any input is float64."""
    dtype = torch.float32
    for x in tensors:
        dtype = torch.promote_types(dtype, x.dtype)
    return dtype


def prepare(name, q, k, v, attention_mask):
    """Check the inputs of a self-attention call and bring them to the work dtype.

    Returns:
        (q, k, v, real): the tensors in ``work_dtype(q, k, v)`` and the (B, T) real-token mask.

    Raises:
        ValueError: bad shapes or mask (``check_qkv``), or queries and keys of different lengths
            (these methods are self-attention: their patterns relate position i to position j).
    """
    check_qkv(q, k, v, attention_mask)
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"{name} is self-attention: q and k need the same length T; got {q.shape[2]} and {k.shape[2]}")
    work = work_dtype(q, k, v)
    return q.to(work), k.to(work), v.to(work), real_tokens(attention_mask, k.shape[0], k.shape[2], k.device)


def real_tokens(attention_mask, B, T, device):
    """(B, T) bool, True = real token: the mask itself, or all True without one."""
    if attention_mask is None:
        return torch.ones(B, T, dtype=torch.bool, device=device)
    return attention_mask


def pad_positions(x, multiple, dim=2):
    """``x`` with zeros appended along ``dim`` up to a multiple of ``multiple`` (no copy when it
    already is one); the appended positions are padding the caller masks as keys."""
    extra = -x.shape[dim] % multiple
    if extra == 0:
        return x
    shape = list(x.shape)
    shape[dim] = extra
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


def explicit_attention(q, k, v, allowed):
    """softmax(q k^T / sqrt(D)) v restricted to the allowed pairs, with the (T, T) matrix
    materialised: the references of the sparse methods (same semantics as
    ``softmax_reference``: rows without an allowed key are zero).

    Args:
        q, k (torch.Tensor): (B, H, T, D); v: (B, H, T, Dv); any float dtype.
        allowed (torch.Tensor): bool, broadcastable to (B, H, T, T), True = query i may attend
            key j.

    Returns:
        (B, H, T, Dv) in ``work_dtype(q, k, v)``.
    """
    work = work_dtype(q, k, v)
    scores = q.to(work) @ k.to(work).transpose(-1, -2) / math.sqrt(q.shape[-1])
    empty = ~allowed.any(-1, keepdim=True)
    # an all -inf row would be NaN after the softmax (and in its gradient): such rows get finite
    # scores here and are defined as zero below, like softmax_reference's
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(empty, 0.0)
    return (torch.softmax(scores, dim=-1) @ v.to(work)).masked_fill(empty, 0.0)


def attend(q, k, v, allowed, bias=None, with_lse=False):
    """Softmax attention of each query over its own list of keys.

    Args:
        q (torch.Tensor): (..., n, D); k: (..., m, D); v: (..., m, Dv), in the work dtype.
        allowed (torch.Tensor): bool broadcastable to (..., n, m).
        bias (torch.Tensor | None): subtracted from the scaled scores (Reformer's log of the
            number of rounds that share a pair), broadcastable to (..., n, m).
        with_lse (bool): also return the log-normalisers.

    Returns:
        out (..., n, Dv), or (out, lse (..., n)) with ``with_lse``: out_i = sum_j w_ij v_j with
        w_i = softmax over the allowed j of s_ij = q_i . k_j / sqrt(D) - bias_ij, and
        lse_i = log sum_j exp(s_ij). A row with no allowed key gets out 0 and lse -inf.
    """
    scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-1, -2)
    if bias is not None:
        scores = scores - bias
    empty = ~allowed.any(-1, keepdim=True)
    # in place: the product's backward does not need its output; empty rows keep finite scores
    # (an all -inf row is NaN in the softmax and its gradient) and are zeroed below
    scores = scores.masked_fill_(~allowed, float("-inf")).masked_fill_(empty, 0.0)
    if not with_lse:
        return (torch.softmax(scores, dim=-1) @ v).masked_fill(empty, 0.0)
    # the softmax written out, so that its sum gives the log-normaliser without a second pass of
    # exp over the scores (logsumexp); the shift is detached: the results do not depend on it
    top = scores.amax(-1, keepdim=True).detach()
    weights = torch.exp(scores - top)
    total = weights.sum(-1, keepdim=True)
    out = ((weights @ v) / total).masked_fill(empty, 0.0)
    return out, (top + torch.log(total)).squeeze(-1).masked_fill(empty.squeeze(-1), float("-inf"))


def attend_rows(q_rows, rows, k, v, causal, real):
    """Selected queries attend to every allowed key (global tokens, Informer's active queries).

    Args:
        q_rows (torch.Tensor): (B, H, n, D) in the work dtype, the queries at positions ``rows``.
        rows (torch.Tensor): long, (n,) or (B, H, n): their positions.
        k, v (torch.Tensor): (B, H, T, D), (B, H, T, Dv) in the work dtype.
        causal (bool): keys j <= row only.
        real (torch.Tensor): (B, T) bool, True = real key.

    Returns:
        (B, H, n, Dv); n x T scores at a time at most (in groups of rows when that is large).
    """
    T = k.shape[2]
    keys = torch.arange(T, device=k.device)
    step = max(1, SCORE_BUDGET // max(1, k.shape[0] * k.shape[1] * T))
    outs = []
    for start in range(0, q_rows.shape[2], step):
        part = rows[..., start:start + step]
        allowed = real[:, None, None, :]
        if causal:
            allowed = allowed & (keys <= part[..., None])
        outs.append(attend(q_rows[:, :, start:start + step], k, v, allowed))
    return torch.cat(outs, dim=2) if outs else q_rows.new_zeros(*q_rows.shape[:3], v.shape[-1])


def block_sparse(q, k, v, block, key_blocks, key_allowed, pattern, real):
    """Query block n attends the key blocks ``key_blocks[:, n]``: never more than one row of
    key blocks per query block, SCORE_BUDGET scores at a time.

    The allowed pairs factor into what depends on the key alone and a pattern that is the same
    for every query block (the window's shape: it depends on the position a of the query within
    its block and on the key's column in the row of key blocks): pair (n * block + a, column c)
    is allowed iff ``key_allowed[:, n, c] & pattern[a, c]`` and the key is real.

    Args:
        q, k, v (torch.Tensor): (B, H, T, D) / (B, H, T, Dv) in the work dtype, T a multiple of
            ``block`` (``pad_positions``).
        block (int): positions per block.
        key_blocks (torch.Tensor): long (G, nb, m) with G = 1 (one table for every head) or
            G = H (one per head): the m key blocks of each of the nb = T / block query blocks.
            A key may be allowed in one column only (it would be counted twice).
        key_allowed (torch.Tensor): bool (G, nb, m * block), per key column (False for unused
            slots and keys the method leaves out).
        pattern (torch.Tensor): bool (block, m * block).
        real (torch.Tensor): (B, T) bool, True = real key.

    Returns:
        (B, H, T, Dv).
    """
    B, H, T, D = q.shape
    G, nb, m = key_blocks.shape
    kb, vb = k.view(B, H, nb, block, D), v.view(B, H, nb, block, v.shape[-1])
    offsets = torch.arange(block, device=q.device)
    heads = torch.arange(H, device=q.device).view(H, 1, 1)
    step = max(1, SCORE_BUDGET // (B * H * block * m * block))
    outs = []
    for start in range(0, nb, step):
        ids = key_blocks[:, start:start + step]
        n = ids.shape[1]
        # (B, H, n, m, block, D): every query block's own key blocks, per head when G = H
        index = (slice(None), slice(None), ids[0]) if G == 1 else (slice(None), heads, ids)
        keys = kb[index].reshape(B, H, n, m * block, D)
        values = vb[index].reshape(B, H, n, m * block, -1)
        j = (ids[..., None] * block + offsets).view(G, n, 1, m * block)
        per_key = key_allowed[:, start:start + step, None] & real[:, j]  # (B, G, n, 1, m * block)
        queries = q[:, :, start * block:(start + n) * block].reshape(B, H, n, block, D)
        outs.append(attend(queries, keys, values, per_key & pattern).reshape(B, H, n * block, -1))
    return torch.cat(outs, dim=2)


class SparseAttention(Attention):
    """The registered modules of the four methods: checks ``implementation`` ("fast" or
    "reference"), keeps the method's parameters in ``self.params`` (as its functions take them),
    and runs ``forward`` as ``prepare`` (checks, work dtype, real-token mask), then
    ``self.compute(q, k, v, causal, real)``, then the cast to v's dtype."""

    def __init__(self, implementation, **params):
        super().__init__()
        check_choice("implementation", implementation, ("fast", "reference"))
        self.implementation, self.params = implementation, params

    def extra_repr(self):
        settings = [f"{key}={value!r}" for key, value in self.params.items()]
        return ", ".join(settings + [f"implementation={self.implementation!r}"])

    def forward(self, q, k, v, causal, attention_mask=None):
        """q, k, v: (B, H, T, D); attention_mask: (B, T) bool or None -> out (B, H, T, D)."""
        out_dtype = v.dtype
        q, k, v, real = prepare(self.registry_name, q, k, v, attention_mask)
        return self.compute(q, k, v, causal, real).to(out_dtype)


class _LargestOutput(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for out in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(out, torch.Tensor):
                self.largest = max(self.largest, out.numel())
        return result


def largest_intermediate(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` and return (its result, the number of elements of the largest
    tensor any torch operation returned meanwhile): the check that a fast path never holds a
    (T, T) matrix (tests; a benchmark may report it)."""
    with _LargestOutput() as mode:
        result = fn(*args, **kwargs)
    return result, mode.largest
