"""What the sparse attentions share (``longformer``, ``bigbird``, ``reformer``, ``informer``): the
explicit masked softmax their references call, a masked softmax over gathered keys that returns
its log-normaliser, rows that attend to every key, block-sparse attention over a table of key
blocks, and the parameter checks.

Rows that attend to every key (``attend_rows``) and block-sparse attention (``block_sparse``) have
their own backward (``torch.autograd.Function``), so that forward and backward both cost O(T):
autograd's backward of a gather or a slice taken inside a loop writes a zero tensor of the whole
input's size per iteration, and the loops here have O(T) iterations of at most SCORE_BUDGET
scores. ``elements_written`` and ``largest_intermediate`` are the tests' measures of that.

Every function takes q, k, v of shape (B, H, T, D) (or a block view of them) and computes in
``work_dtype`` (float32, or float64 for float64 input); callers cast the result to v's dtype.
The allowed-pair convention is the one of ``attention.softmax``: a query row with no allowed key
outputs zeros (and a log-normaliser of -inf).
"""
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attention.registry import Attention, check_choice, check_qkv, needs_grad, step_budget

# scores held at once by the loops over blocks (float32: 4 MB; larger groups run slower on a
# CPU, their working set leaves the caches)
SCORE_BUDGET = 1 << 20
# the same on a GPU (256 MB of float32 scores): with the CPU's budget a long sequence is hundreds
# of small steps, each a few kernel launches, and the GPU waits on the launches
CUDA_SCORE_BUDGET = 1 << 26


def score_budget(x, cpu_budget):
    """Scores a loop step may hold for tensors like ``x``: CUDA_SCORE_BUDGET on a GPU, else
    ``cpu_budget`` (the caller's SCORE_BUDGET, read at the call so that tests can shrink it)."""
    return step_budget(x, cpu_budget, CUDA_SCORE_BUDGET)


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


def _key_chunks(q_rows, rows, k, causal, real):
    """The chunks of keys of ``attend_rows``: (start, stop, allowed (B, 1 or H, n, stop - start))
    with at most SCORE_BUDGET scores each (every row against the chunk)."""
    B, H, n, _ = q_rows.shape
    T = k.shape[2]
    step = max(1, score_budget(k, SCORE_BUDGET) // max(1, B * H * n))
    for start in range(0, T, step):
        stop = min(T, start + step)
        allowed = real[:, None, None, start:stop]
        if causal:
            allowed = allowed & (torch.arange(start, stop, device=k.device) <= rows[..., None])
        yield start, stop, allowed


def _chunk_scores(q_scaled, k, start, stop, allowed):
    """Scores (B, H, n, stop - start) of the rows against keys start..stop-1, -inf where not
    allowed."""
    return (q_scaled @ k[:, :, start:stop].transpose(-1, -2)).masked_fill_(~allowed, float("-inf"))


def _attend_rows_forward(q_rows, rows, k, v, causal, real):
    """The forward of ``attend_rows``: (out (B, H, n, Dv), lse (B, H, n, 1)), lse the
    log-normaliser, -inf for a row without an allowed key (whose out is 0)."""
    B, H, n, D = q_rows.shape
    q_scaled = q_rows / math.sqrt(D)
    top = q_rows.new_full((B, H, n, 1), float("-inf"))  # the largest score so far
    total = q_rows.new_zeros(B, H, n, 1)  # sum of exp(score - top)
    acc = q_rows.new_zeros(B, H, n, v.shape[-1])  # sum of exp(score - top) v
    for start, stop, allowed in _key_chunks(q_rows, rows, k, causal, real):
        scores = _chunk_scores(q_scaled, k, start, stop, allowed)
        new_top = torch.maximum(top, scores.amax(-1, keepdim=True))
        shift = new_top.masked_fill(torch.isneginf(new_top), 0.0)  # no key yet: exp(-inf - 0) = 0
        weights = torch.exp(scores.sub_(shift))
        decay = torch.exp(top - shift)
        total = total * decay + weights.sum(-1, keepdim=True)
        acc = acc * decay + weights @ v[:, :, start:stop]
        top = new_top
    empty = total == 0
    out = (acc / total.masked_fill(empty, 1.0)).masked_fill_(empty, 0.0)
    return out, (top + torch.log(total)).masked_fill_(empty, float("-inf"))


def _common_dtype(*tensors):
    """The tensors cast to their widest float dtype. A backward runs outside the forward's
    autocast region, so under autocast its saved tensors and the incoming gradient can differ
    (float32 inputs and softmax weights, a bfloat16 output gradient); autograd casts the returned
    gradients back to the inputs' dtypes."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return [t.to(dtype) for t in tensors]


class _AttendRows(torch.autograd.Function):
    """``attend_rows`` over chunks of keys, forward and backward (the online softmax of
    "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness", Dao et al.
    2022, algorithms 1 and 2, on the CPU).

    Every chunk of keys is read once, for all n rows together, with at most SCORE_BUDGET scores
    a chunk: forward and backward cost O(n T D) and keep O(n D) besides the inputs (the weights
    are recomputed from the log-normalisers in the backward). Groups of rows over all keys would
    need SCORE_BUDGET / (B H T) rows a group, fewer as T grows, and read k and v (and write a
    (B, H, T, D) gradient of each) once per group: O(n T^2 B H D / SCORE_BUDGET). Results equal
    the explicit softmax up to rounding."""

    @staticmethod
    def forward(ctx, q_rows, rows, k, v, causal, real):
        out, lse = _attend_rows_forward(q_rows, rows, k, v, causal, real)
        ctx.causal = causal
        ctx.save_for_backward(q_rows, rows, k, v, real, out, lse)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q_rows, rows, k, v, real, out, lse = ctx.saved_tensors
        grad_out, q_rows, k, v, out = _common_dtype(grad_out, q_rows, k, v, out)
        scale = 1 / math.sqrt(q_rows.shape[-1])
        empty = torch.isneginf(lse)
        grad = grad_out.masked_fill(empty, 0.0)  # rows without a key output a constant 0
        lse = lse.masked_fill(empty, 0.0)  # their scores are all -inf: weights exp(-inf - 0) = 0
        delta = (grad * out).sum(-1, keepdim=True)  # sum_j w_ij dw_ij with dw = grad v^T
        q_scaled = q_rows * scale
        dq = torch.zeros_like(q_rows)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        for start, stop, allowed in _key_chunks(q_rows, rows, k, ctx.causal, real):
            weights = torch.exp(_chunk_scores(q_scaled, k, start, stop, allowed).sub_(lse))
            dv[:, :, start:stop] = weights.transpose(-1, -2) @ grad
            ds = (grad @ v[:, :, start:stop].transpose(-1, -2)).sub_(delta).mul_(weights)
            dq += ds @ k[:, :, start:stop]
            dk[:, :, start:stop] = ds.transpose(-1, -2) @ q_scaled
        return dq.mul_(scale), None, dk, dv, None, None


def attend_rows(q_rows, rows, k, v, causal, real):
    """Selected queries attend to every allowed key (global tokens, Informer's active queries).

    Args:
        q_rows (torch.Tensor): (B, H, n, D) in the work dtype, the queries at positions ``rows``.
        rows (torch.Tensor): long, (n,) or (B, H, n): their positions.
        k, v (torch.Tensor): (B, H, T, D), (B, H, T, Dv) in the work dtype.
        causal (bool): keys j <= row only.
        real (torch.Tensor): (B, T) bool, True = real key.

    Returns:
        (B, H, n, Dv), rows without an allowed key 0. Chunks of keys with n x chunk <= SCORE_BUDGET
        scores each and an online softmax (``_AttendRows``): O(n T D) work and O(n D) memory
        besides the inputs, forward and backward.
    """
    if needs_grad(q_rows, k, v):
        return _AttendRows.apply(q_rows, rows, k, v, causal, real)
    return _attend_rows_forward(q_rows, rows, k, v, causal, real)[0]


def _block_sparse_forward(q, k, v, block, key_blocks, key_allowed, pattern, real, keep):
    """The forward of ``block_sparse``: (out (B, H, T, Dv), and with ``keep`` the lists of every
    step's softmax weights and empty rows, else empty lists)."""
    B, H, T, D = q.shape
    G, nb, m = key_blocks.shape
    kb, vb = k.view(B, H, nb, block, D), v.view(B, H, nb, block, v.shape[-1])
    offsets = torch.arange(block, device=q.device)
    outs, weights, empties = [], [], []
    for start, stop in _steps(q, block, m):
        ids = key_blocks[:, start:stop]
        n = ids.shape[1]
        j = (ids[..., None] * block + offsets).view(G, n, 1, m * block)
        per_key = key_allowed[:, start:stop, None] & real[:, j]  # (B, G, n, 1, m * block)
        queries = q[:, :, start * block:stop * block].reshape(B, H, n, block, D)
        out, w, empty = _weights_and_output(queries, _gather_blocks(kb, ids), _gather_blocks(vb, ids),
                                            per_key & pattern)
        outs.append(out.reshape(B, H, n * block, -1))
        if keep:
            weights.append(w)
            empties.append(empty)
    return torch.cat(outs, dim=2), weights, empties


def _weights_and_output(queries, keys, values, allowed):
    """One step of ``block_sparse``: the operations of ``attend`` (the same output bit for bit),
    returning (out, the softmax weights, the rows without an allowed key). A function of its
    own, so that a step's scores are freed before the next step's."""
    scores = (queries / math.sqrt(queries.shape[-1])) @ keys.transpose(-1, -2)
    empty = ~allowed.any(-1, keepdim=True)
    # in place; an all -inf row would be NaN: finite here, zeroed below
    scores = scores.masked_fill_(~allowed, float("-inf")).masked_fill_(empty, 0.0)
    w = torch.softmax(scores, dim=-1)
    return (w @ values).masked_fill(empty, 0.0), w, empty


class _BlockSparse(torch.autograd.Function):
    """``block_sparse`` with a backward that adds each step's key and value gradients into one
    (B, H, T, D) tensor (index_add_).

    Forward: step by step, the operations of ``attend`` on the gathered blocks; it keeps each
    step's softmax weights (as autograd would) but not the gathered keys and values. Backward:
    per step, the gathers again, then the products of the softmax backward. Autograd's own
    backward of a step's gathers (and of its slice of queries) writes a zero (B, H, T, D) tensor
    and adds it to the gradient: O(T^2 / step) in all, with steps of SCORE_BUDGET /
    (B H block^2 m) query blocks. Gradients equal autograd's up to rounding (the order in which
    the steps' contributions to a key are summed)."""

    @staticmethod
    def forward(ctx, q, k, v, block, key_blocks, key_allowed, pattern, real):
        out, weights, empties = _block_sparse_forward(q, k, v, block, key_blocks, key_allowed, pattern, real,
                                                      keep=True)
        ctx.block = block
        ctx.save_for_backward(q, k, v, key_blocks, *weights, *empties)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, key_blocks, *saved = ctx.saved_tensors
        weights, empties = saved[:len(saved) // 2], saved[len(saved) // 2:]
        grad_out, q, k, v, *weights = _common_dtype(grad_out, q, k, v, *weights)
        block = ctx.block
        B, H, T, D = q.shape
        Dv = v.shape[-1]
        G, nb, m = key_blocks.shape
        kb, vb = k.view(B, H, nb, block, D), v.view(B, H, nb, block, Dv)
        dq = torch.empty_like(q)
        # contiguous whatever the inputs' strides (the model's heads are a transposed view):
        # _add_blocks merges the head and block dimensions with a view
        dk, dv = kb.new_zeros(kb.shape), vb.new_zeros(vb.shape)
        for (start, stop), w, empty in zip(_steps(q, block, m), weights, empties):
            ids = key_blocks[:, start:stop]
            n = ids.shape[1]
            keys, values = (_gather_blocks(x, ids) for x in (kb, vb))
            grad = grad_out[:, :, start * block:stop * block].reshape(B, H, n, block, Dv).masked_fill(empty, 0.0)
            queries = q[:, :, start * block:stop * block].reshape(B, H, n, block, D) / math.sqrt(D)
            # the scores' gradient w * (dw - sum(dw * w)), by the kernel of softmax's own backward
            ds = torch._softmax_backward_data(grad @ values.transpose(-1, -2), w, -1, w.dtype)
            dq[:, :, start * block:stop * block] = (ds @ keys).reshape(B, H, n * block, D) / math.sqrt(D)
            _add_blocks(dk, ids, ds.transpose(-1, -2) @ queries)
            _add_blocks(dv, ids, w.transpose(-1, -2) @ grad)
        return dq, dk.view(k.shape), dv.view(v.shape), None, None, None, None, None


def _steps(q, block, m):
    """(start, stop) ranges of query blocks of ``block_sparse``: SCORE_BUDGET scores a step."""
    B, H, T, _ = q.shape
    nb = T // block
    step = max(1, score_budget(q, SCORE_BUDGET) // (B * H * block * m * block))
    return [(start, min(nb, start + step)) for start in range(0, nb, step)]


def _gather_blocks(x, ids):
    """x (B, H, nb, block, d) at the key blocks ids (G, n, m), G = 1 or H ->
    (B, H, n, m * block, d)."""
    B, H, _, block, d = x.shape
    G, n, m = ids.shape
    heads = torch.arange(H, device=x.device).view(H, 1, 1)
    picked = x[:, :, ids[0]] if G == 1 else x[:, heads, ids]
    return picked.reshape(B, H, n, m * block, d)


def _add_blocks(total, ids, x):
    """total (B, H, nb, block, d) += x (B, H, n, m * block, d) at the key blocks ids (G, n, m),
    in place (index_add_: a block that appears in several slots receives all of them)."""
    B, H, nb, block, d = total.shape
    G, n, m = ids.shape
    if G == 1:
        total.index_add_(2, ids[0].flatten(), x.reshape(B, H, n * m, block, d))
    else:
        flat = (torch.arange(H, device=ids.device).view(H, 1, 1) * nb + ids).flatten()
        total.view(B, H * nb, block, d).index_add_(1, flat, x.reshape(B, H * n * m, block, d))


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
        (B, H, T, Dv). The backward (``_BlockSparse``) costs O(T) like the forward; it keeps the
        softmax weights (B, H, T, m * block) when a gradient is needed.
    """
    args = (q, k, v, block, key_blocks, key_allowed, pattern, real)
    if needs_grad(q, k, v):
        return _BlockSparse.apply(*args)
    return _block_sparse_forward(*args, keep=False)[0]


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


class _ElementsWritten(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func.is_view:
            return result
        if func.overloadpacket is torch.ops.aten.index_add_:  # writes its source's rows only
            self.count += args[3].numel()
            return result
        for out in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(out, torch.Tensor):
                self.count += out.numel()
        return result


def elements_written(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` and return (its result, the number of tensor elements that the
    aten operations it ran wrote: every output of a non-view operation, the backward's too when
    ``fn`` calls it). A measure of work that does not depend on the machine's load: the tests'
    check that forward and backward grow linearly in T."""
    with _ElementsWritten() as mode:
        result = fn(*args, **kwargs)
    return result, mode.count
