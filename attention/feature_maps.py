"""Feature maps phi: (..., D) -> (..., R) whose inner products estimate (or stand in for) the
softmax kernel exp(<x, y>).

Shared by tree attention's samplers ("High Attention Scores and Where to Find Them", section 2.3,
Eq. 4-7: ``positive_alignment``, ``rff``, ``favor_plus`` = the hyperbolic positive map and
``favor_plus_relu`` = a +-ReLU map with sqrt(D)-norm rows, neither being Performer's own map) and
by the Performer baseline (Choromanski et al. 2021, "Rethinking Attention with Performers":
``performer_softmax_features``, Lemma 1's positive map, and ``performer_relu_features``, its
generalized ReLU attention; ``performer_projection`` draws their matrices, section 2.4).

All maps act on the last dimension and accept any float dtype; the random maps return the dtype of
their input promoted to at least float32. They apply no 1/sqrt(D) temperature themselves: to estimate
exp(<q, k> / sqrt(D)) as in GPT-2, scale q and k by D^(-1/4) each first (``RandomFeatureMap``
does this through ``input_scale``).
"""
import math

import torch
import torch.nn as nn

KINDS = ("positive_alignment", "rff", "favor_plus", "favor_plus_relu")


def orthogonal_gaussian_matrix(m, D, generator=None, norms="chi", dtype=torch.float64):
    """Random projection W of shape (m, D) made of orthogonal blocks (Choromanski et al. 2022, ORF).

    Rows inside each block of min(m, D) rows are orthogonal (QR of a Gaussian matrix); blocks are
    independent, so m may exceed D.

    Args:
        m (int): number of rows (random directions), >= 1.
        D (int): input dimension, >= 1.
        generator (torch.Generator | None): source of randomness.
        norms (str): "chi" gives each row the norm of an independent D-dimensional standard
            Gaussian vector (chi(D) distributed), so every row is marginally N(0, I_D) (used by
            RFF and FAVOR+, Eq. 5-6); "fixed" gives every row norm sqrt(D) (FAVOR+ReLU, Eq. 7).
        dtype: dtype of the result.

    Returns:
        torch.Tensor of shape (m, D).

    Raises:
        ValueError: m or D < 1, or unknown ``norms``.
    """
    if m < 1 or D < 1:
        raise ValueError(f"orthogonal_gaussian_matrix needs m >= 1 and D >= 1; got m={m}, D={D}")
    return orthogonal_gaussian_matrices(1, m, D, generator, norms, dtype)[0]


def orthogonal_gaussian_matrices(n, m, D, generator=None, norms="chi", dtype=torch.float64):
    """n independent projections of ``orthogonal_gaussian_matrix``: a tensor of shape (n, m, D).

    Raises:
        ValueError: n, m or D < 1, or unknown ``norms``.
    """
    if n < 1 or m < 1 or D < 1:
        raise ValueError(f"orthogonal_gaussian_matrices needs n, m, D >= 1; got n={n}, m={m}, D={D}")
    if norms not in ("chi", "fixed"):
        raise ValueError(f"norms '{norms}' unknown; allowed: 'chi', 'fixed'")
    nblocks = -(-m // D)
    g = torch.randn(n, nblocks, D, D, generator=generator, dtype=torch.float64)
    lengths = torch.randn(n, m, D, generator=generator, dtype=torch.float64) if norms == "chi" else None
    return _orthogonalize(g, lengths, m, norms).to(dtype)


def _orthogonalize(g, length_normals, m, norms):
    """(n, nblocks, D, D) Gaussian blocks (+ (n, m, D) Gaussians for chi norms, else None) ->
    float64 (n, m, D) projections with orthogonal rows inside each block of D rows."""
    n, nblocks, D, _ = g.shape
    qmat, r = torch.linalg.qr(g)  # batched: one independent orthogonal block per D rows
    qmat = qmat * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[..., None, :]  # Haar-distributed
    W = qmat.transpose(-1, -2).reshape(n, nblocks * D, D)[:, :m]
    if norms == "chi":
        lengths = length_normals.norm(dim=-1)
    else:
        lengths = torch.full((n, m), math.sqrt(D), dtype=torch.float64)
    return W * lengths[..., None]


_MASK63 = (1 << 63) - 1


def _splitmix64(x):
    """splitmix64 finaliser on a Python int (mod 2^64)."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def position_seed(seed, t):
    """Seed of the projection of position t under ``seed``: a splitmix64 hash of (seed, t), in
    [0, 2^63). Counter-based: it depends on (seed, t) only, not on the sequence length or on the
    order in which positions are drawn."""
    return _splitmix64(_splitmix64(int(seed) & 0xFFFFFFFFFFFFFFFF) ^ int(t)) & _MASK63


def position_projections(seed, start, stop, m, D, norms="chi"):
    """Projections W_t of positions t = start..stop-1: float64 (stop - start, m, D), where W_t is
    exactly ``orthogonal_gaussian_matrix(m, D, torch.Generator().manual_seed(position_seed(seed, t)),
    norms)`` (drawn per position, orthogonalised in one batch).

    Raises:
        ValueError: stop <= start, m or D < 1, or unknown ``norms``.
    """
    if stop <= start or m < 1 or D < 1:
        raise ValueError(f"position_projections needs stop > start, m, D >= 1; got {start}..{stop}, m={m}, D={D}")
    if norms not in ("chi", "fixed"):
        raise ValueError(f"norms '{norms}' unknown; allowed: 'chi', 'fixed'")
    nblocks = -(-m // D)
    gs, ls = [], []
    gen = torch.Generator()
    for t in range(start, stop):
        gen.manual_seed(position_seed(seed, t))
        # the same draws, in the same order, as orthogonal_gaussian_matrices(1, m, D, gen, norms)
        gs.append(torch.randn(1, nblocks, D, D, generator=gen, dtype=torch.float64))
        if norms == "chi":
            ls.append(torch.randn(1, m, D, generator=gen, dtype=torch.float64))
    return _orthogonalize(torch.cat(gs), torch.cat(ls) if ls else None, m, norms)


def _project(x, W):
    """x (..., D) times W^T: W (m, D) is shared by every position; W (T, m, D) holds one projection
    per position t = x.shape[-2] (x (..., T, D)). Returns (..., m)."""
    W = W.to(x.dtype)
    if W.dim() == 2:
        return x @ W.T
    return torch.einsum("...td,tmd->...tm", x, W)


def positive_alignment_features(x):
    """Eq. 4: phi(x) = [(x)_+, (-x)_+], so <phi(q), phi(k)> = sum_i (q_i k_i)_+.

    Args:
        x (torch.Tensor): shape (..., D).
    Returns:
        torch.Tensor of shape (..., 2D), same dtype.
    """
    return torch.cat([torch.relu(x), torch.relu(-x)], dim=-1)


def rff_features(x, W):
    """Eq. 5 (random Fourier features for the softmax kernel):
    phi(x) = exp(||x||^2 / 2) / sqrt(m) [sin(Wx), cos(Wx)] with m = W.shape[-2] = R/2, so that
    E <phi(q), phi(k)> = exp(<q, k>) when the rows of W are marginally N(0, I).
    Values may be negative; the estimate's variance grows like exp(||q||^2 + ||k||^2).

    Args:
        x (torch.Tensor): shape (..., D).
        W (torch.Tensor): shape (m, D), or (T, m, D) with one projection per position (x (..., T, D)).
    Returns:
        torch.Tensor of shape (..., 2m).
    """
    proj = _project(x, W)
    amp = torch.exp(0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(W.shape[-2])
    return torch.cat([torch.sin(proj), torch.cos(proj)], dim=-1) * amp


def favor_plus_features(x, W):
    """Eq. 6 (FAVOR+, positive hyperbolic features):
    phi(x) = exp(-||x||^2 / 2) / sqrt(2m) [exp(Wx), exp(-Wx)] with m = W.shape[-2] = R/2, so that
    E <phi(q), phi(k)> = exp(<q, k>) for rows of W marginally N(0, I); all entries are positive.

    Args:
        x (torch.Tensor): shape (..., D).
        W (torch.Tensor): shape (m, D), or (T, m, D) with one projection per position (x (..., T, D)).
    Returns:
        torch.Tensor of shape (..., 2m).
    """
    proj = _project(x, W)
    half_sq = 0.5 * (x * x).sum(-1, keepdim=True)
    # fold the norm term into the exponent so that large |Wx| and large ||x|| do not overflow apart
    return torch.cat([torch.exp(proj - half_sq), torch.exp(-proj - half_sq)], dim=-1) / math.sqrt(2 * W.shape[-2])


def favor_plus_relu_features(x, W):
    """Eq. 7 (FAVOR+ReLU, biased): phi(x) = [(Wx)_+, (-Wx)_+] / sqrt(2m) with m = W.shape[-2] = R/2;
    the paper uses rows of W with norm sqrt(D) (``orthogonal_gaussian_matrix(..., norms="fixed")``).

    Args:
        x (torch.Tensor): shape (..., D).
        W (torch.Tensor): shape (m, D), or (T, m, D) with one projection per position (x (..., T, D)).
    Returns:
        torch.Tensor of shape (..., 2m), non-negative.
    """
    proj = _project(x, W)
    return torch.cat([torch.relu(proj), torch.relu(-proj)], dim=-1) / math.sqrt(2 * W.shape[-2])


class RandomFeatureMap(nn.Module):
    """A feature map phi: (..., D) -> (..., R) with a random projection drawn from ``seed``.

    ``phi(x) = f(input_scale * x)`` with f one of Eq. 4-7. With ``input_scale = D^(-1/4)``,
    <phi(q), phi(k)> estimates exp(<q, k> / sqrt(D)) (rff, favor_plus) as in GPT-2 attention.

    Args:
        kind (str): one of "positive_alignment" (Eq. 4, R = 2D fixed, no randomness), "rff" (Eq. 5),
            "favor_plus" (Eq. 6), "favor_plus_relu" (Eq. 7).
        D (int): input (head) dimension.
        R (int | None): output dimension, even, >= 2; default 2D. Ignored by positive_alignment
            (always 2D).
        seed (int): seed of the torch.Generator that draws the (R/2, D) orthogonal projections
            (chi(D)-distributed row norms; norm sqrt(D) for favor_plus_relu).
        input_scale (float): multiplies x before the map.
        per_position (bool): False: one projection W, drawn once from ``seed``, for every input.
            True: a projection W_t for every position t of the second-to-last input dimension
            (x of shape (..., T, D)), counter-based: W_t depends only on (seed, t)
            (``position_projections``), so a shorter sequence uses a prefix of a longer one's
            projections. Cost: one orthogonal (R/2, D) projection per position, O(D^2 R) work each
            (a QR of a D x D Gaussian block per D rows); the module keeps the projections of the
            longest sequence seen (T R/2 D float64 numbers: 32 MB for T = 1024, R = 128, D = 64)
            and draws only positions it has not drawn before.

    Raises:
        ValueError: unknown kind, D < 1, or R odd or < 2.
    """

    def __init__(self, kind, D, R=None, seed=0, input_scale=1.0, per_position=False):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"feature map '{kind}' unknown; allowed: {', '.join(KINDS)}")
        if D < 1:
            raise ValueError(f"feature map needs D >= 1; got D={D}")
        if kind == "positive_alignment":
            R = 2 * D
        R = 2 * D if R is None else int(R)
        if R < 2 or R % 2:
            raise ValueError(f"feature dimension R must be an even integer >= 2; got R={R}")
        self.kind, self.D, self.R, self.input_scale = kind, D, R, float(input_scale)
        self.seed, self.per_position = int(seed), bool(per_position)
        self.norms = "fixed" if kind == "favor_plus_relu" else "chi"
        self._position_W = torch.zeros(0, R // 2, D, dtype=torch.float64)  # cache of projections()
        if kind == "positive_alignment" or self.per_position:
            self.register_buffer("W", torch.zeros(0, D, dtype=torch.float64), persistent=False)
        else:
            gen = torch.Generator().manual_seed(self.seed)
            self.register_buffer("W", orthogonal_gaussian_matrix(R // 2, D, gen, self.norms), persistent=False)

    def projections(self, T):
        """The per-position projections W_0..W_{T-1}: float64 (T, R/2, D) on the CPU (cached, see
        ``per_position``)."""
        have = self._position_W.shape[0]
        if T > have:
            more = position_projections(self.seed, have, T, self.R // 2, self.D, self.norms)
            self._position_W = torch.cat([self._position_W, more]) if have else more
        return self._position_W[:T]

    def forward(self, x):
        """x (..., D), or (..., T, D) when per_position -> features (..., R) in the dtype of x
        promoted to >= float32."""
        if x.shape[-1] != self.D:
            raise ValueError(f"feature map expects last dimension D={self.D}; got shape {tuple(x.shape)}")
        x = x.to(torch.promote_types(x.dtype, torch.float32)) * self.input_scale
        if self.kind == "positive_alignment":
            return positive_alignment_features(x)
        W = self.projections(x.shape[-2]).to(x.device) if self.per_position else self.W
        fn = {"rff": rff_features, "favor_plus": favor_plus_features,
              "favor_plus_relu": favor_plus_relu_features}[self.kind]
        return fn(x, W)


PROJECTIONS = ("orthogonal", "iid")


def performer_projection(m, D, generator=None, kind="orthogonal", dtype=torch.float64):
    """The random matrix W (m, D) of Performer's features (Choromanski et al. 2021).

    "orthogonal": section 2.4's orthogonal random features, blocks of min(m, D) orthogonal rows,
    each row rescaled to the norm of an independent N(0, I_D) vector (chi(D) distributed), so every
    row is marginally N(0, I_D) and Lemma 1's estimator stays unbiased
    (``orthogonal_gaussian_matrix`` with ``norms="chi"``). "iid": independent N(0, I_D) rows.

    Raises:
        ValueError: m or D < 1, or an unknown ``kind``.
    """
    if kind not in PROJECTIONS:
        raise ValueError(f"projection kind {kind!r} unknown; allowed: {', '.join(PROJECTIONS)}")
    if m < 1 or D < 1:
        raise ValueError(f"performer_projection needs m >= 1 and D >= 1; got m={m}, D={D}")
    if kind == "iid":
        return torch.randn(m, D, generator=generator, dtype=torch.float64).to(dtype)
    return orthogonal_gaussian_matrix(m, D, generator, norms="chi", dtype=dtype)


def performer_softmax_logits(x, W):
    """The exponents of ``performer_softmax_features``: w_i^T x - ||x||^2 / 2, shape (..., m).
    Performer's attention works with them to shift features by a constant before exponentiating."""
    return _project(x, W) - 0.5 * (x * x).sum(-1, keepdim=True)


def performer_softmax_features(x, W):
    """Lemma 1 of Choromanski et al. 2021 (positive random features of the softmax kernel):
    phi(x) = exp(W x - ||x||^2 / 2) / sqrt(m), m = W.shape[-2], so E <phi(x), phi(y)> = exp(<x, y>)
    for rows of W marginally N(0, I_D) (``performer_projection``). Every entry is positive. For the
    attention kernel exp(<q, k> / sqrt(D)) scale q and k by D^(-1/4) first (section 2.3).

    Args:
        x (torch.Tensor): shape (..., D).
        W (torch.Tensor): shape (m, D).
    Returns:
        torch.Tensor of shape (..., m).
    """
    return torch.exp(performer_softmax_logits(x, W)) / math.sqrt(W.shape[-2])


def performer_relu_features(x, W=None, eps=1e-3):
    """Performer's generalized attention with the ReLU kernel (Choromanski et al. 2021, section 2.2,
    f = ReLU, h = 1): phi(x) = (ReLU(W x) + eps) / sqrt(m). ``eps`` (1e-3, the authors' kernel
    epsilon) keeps every feature positive, so no attention row sums to zero. W None: the identity
    (m = D, the authors' "deterministic" features that LRA uses).

    Args:
        x (torch.Tensor): shape (..., D).
        W (torch.Tensor | None): shape (m, D).
        eps (float): added to every feature, >= 0.
    Returns:
        torch.Tensor of shape (..., m), positive when eps > 0.
    """
    proj = x if W is None else _project(x, W)
    return (torch.relu(proj) + eps) / math.sqrt(proj.shape[-1])
