"""GPT-2 causal LM and a BERT-style bidirectional encoder built from the same blocks.

The attention mechanism of every block comes from the registry in ``attention/``:
``ModelConfig(attention="tree", attention_params={"E": 0.5})``. Parameter names follow GPT-2
(``transformer.wte``, ``transformer.h.N.attn.c_attn``, ...) so Hugging Face GPT-2 weights load
with a transpose of the Conv1D matrices only. Saving and loading trained models (ours and Hugging
Face GPT-2) is ``checkpoint.py``'s; each task says which of these models it trains
(``tasks.<task>.MODEL``).

Two block types (``ModelConfig.block``): the GPT-2 pre-LayerNorm transformer block and the
DenseAttention Network block (DANet, "DenseAttention", Argatkiny, section 3): MaxNorm, N^(-1/3)
scaling, Cosine RelPE, queries x W_Q with keys = values = x, DenseAttention (``attention/dense``),
a bias-free ReLU FFN, MaxNorm and one residual connection. Position information is a config
choice for both (``pos_emb``: learned, sinusoidal, cosine_relpe, none).

Generation (``GPT.generate``; sample.py): the prompt through ``GPT.prefill``, then a token at a
time through ``GPT.decode_step``, each block keeping its attention's decode state (the registry's
``prefill`` / ``step``) and taking its per-position pieces (learned or sinusoidal positions, Cosine
RelPE, the token shift's previous embedding) at the token's offset; attentions without a decode
path, and the models ``GPT.decode_unsupported`` names (e.g. a DANet with a global layer below its
last), recompute the last block_size tokens at every step instead.

Shapes: token ids (B, T) int64; hidden states (B, T, C) with C = n_embd; q/k/v per head
(B, H, T, D) with D = C / H; logits (B, T, V); attention_mask (B, T) bool, True = real token
(padded keys get no attention; None = no padding).
"""
import math
import sys
import time
from dataclasses import MISSING, asdict, dataclass, field, fields

import torch
import torch.nn as nn
import torch.nn.functional as F

import attention
import attention.dense  # noqa: F401  (registers "dense", which the DANet block uses)


def _key(default, help, fixed_on_resume=True):
    """A ``ModelConfig`` field that is also a config key of train.py (``RUN_KEYS``): its default
    (a callable: a default factory) and its ``--help`` line are declared here only. A resumed run
    keeps the checkpoint's value unless ``fixed_on_resume`` is False."""
    kind = {"default_factory": default} if callable(default) else {"default": default}
    return field(**kind, metadata={"help": help, "fixed_on_resume": fixed_on_resume})


@dataclass
class ModelConfig:
    """Architecture hyper-parameters shared by ``GPT`` and ``BertEncoder``.

    The fields declared with ``_key`` are also train.py's config keys (``RUN_KEYS``): their
    defaults here are the runs' defaults (the mini GPT: 4 layers, 4 heads, width 128) and their
    ``--help`` lines are the field metadata. The other fields come from the task and its data.

    Attributes:
        block_size: maximum sequence length T (positions of the learned position embedding).
        vocab_size: number of token ids V.
        n_layer, n_head, n_embd: depth, heads H, width C (C must be divisible by H).
        dropout: dropout probability on embeddings, residual branches and the MLP.
        bias: whether Linear and LayerNorm layers have biases (GPT-2: True).
        layer_norm_epsilon: LayerNorm epsilon (GPT-2: 1e-5).
        attention: registered attention name (see ``attention.registered()``).
        attention_params: keyword parameters of that attention.
        n_classes: classes of the encoder's classification head (0 = no head).
        pooling: "cls" (first token) or "mean" (mean over non-padding tokens) for classification.
        two_tower: classify a pair of sequences encoded separately, features [u, v, u*v, u-v].
        block: "transformer" (GPT-2 pre-LayerNorm block, ``Block``) or "danet" (``DANetBlock``;
            needs attention="dense"; no biases, LayerNorms or dropout inside the blocks).
        pos_emb: "learned" (GPT-2's added position embedding; T <= block_size), "sinusoidal"
            (the fixed sine / cosine table added to the token embeddings, Vaswani et al. 2017,
            Sec. 3.5; the Long Range Arena transformers' default; any T; n_embd even),
            "cosine_relpe" (Cosine RelPE, paper Sec. 3.2: x_i cos(m theta_i) per head dim i at
            position m, on q and k in a transformer block, on the block's input X in a DANet
            block; frequencies theta_i from ``relpe_freqs``; any T) or "none" (any T).
        embedding_init_std: standard deviation of the token embedding's N(0, std^2) initialisation
            (GPT-2: 0.02; the LRA transformers: 1.0, beside their sinusoidal positions of amplitude 1).
        pos_embedding_init_std: standard deviation of the learned position embedding's N(0, std^2)
            initialisation (GPT-2: 0.02; Zoology's MQAR models and PyTorch's ``nn.Embedding``: 1.0).
        tie_lm_head: True (default, GPT-2): the GPT's LM head is the token embedding; False: a
            separate (V, C) matrix initialised N(0, 0.02^2), as in Zoology's MQAR models. GPT only.
        mlp: True (default): transformer blocks have the GPT-2 MLP; False: attention-only blocks
            x + attn(ln_1(x)) (the 2-layer models of Zoology's Figure 2). Transformer blocks only.
        scale_residual_init: True (default, GPT-2): the residual projections (``c_proj``) are
            initialised N(0, (0.02 / sqrt(2 n_layer))^2); False: N(0, 0.02^2) like every Linear.
        linear_init: "gpt2" (default): Linear weights N(0, 0.02^2), biases zero; "pytorch": the
            Linear layers keep PyTorch's default initialisation (weights and biases uniform in
            +-1 / sqrt(fan_in), about 0.072 at width 64), as in Zoology's MQAR models. The
            embeddings follow ``embedding_init_std`` / ``pos_embedding_init_std`` either way;
            DANet blocks keep the authors' initialisation.
        token_shift: False (default) or True: the embedding output e_t (token plus added position
            embedding) becomes e_t + W_s e_(t-1) before the first block (e_(-1) = 0; W_s a learned
            C x C matrix). A one-step mixing of neighbours like RWKV's token shift (Peng et al. 2023,
            "RWKV: Reinventing RNNs for the Transformer Era") and H3's shift SSM (Fu et al. 2023,
            "Hungry Hungry Hippos"); it looks back only, so it keeps a GPT causal. On associative
            recall it hands each value its key, so attention does the lookup without first forming
            a previous-token head (docs/recall.md).
        layer_scheme: DANet layers cycled over the stack, one letter per layer: "G" global, "L"
            local (windows of ``window``), "S" shifted local (windows moved by window / 2); e.g.
            "LSG" (paper Sec. 3.3). Transformer blocks accept only "G".
        window: window of the "L" and "S" layers (> 0 if the scheme has them; even for "S").
        pad_token_id: id of the PAD token (-1 = none). Positions holding it count as padding
            (combined with attention_mask); in a DANet model their embedding is fixed at zero
            (paper Sec. 3.1), as is that of every position attention_mask marks as padding.
        maxnorm_eps: eps of MaxNormActivation x / (max_i |x_i| + eps) (1e-3 as in the authors' code).
        ffn_linf_norm: DANet only; 0 = off; > 0 = after every optimizer step the effective FFN
            weights s * W get this l_inf norm through a non-trainable scale s per matrix
            (paper appendix G); ``fold_ffn_scales`` folds s into W for export.
        relpe_freqs: frequencies theta_i of Cosine RelPE over the head dims i = 0..D-1 (used only
            with pos_emb="cosine_relpe"; see ``cosine_relpe``): "paper" (default; Eq. 6,
            theta_i = 10000^(-2i/D)) or "authors" (theta_i = 10000^(-i/D), the authors' code,
            andrewargatkiny/dense-attention ``src/positional_embeddings.py``, ``TrigRelPEBase``).
        relpe_local_positions: DANet with Cosine RelPE and local layers only. False (default):
            positions are global (0..T-1) in every layer. True: in the "L" and "S" layers the
            position m of a token is counted from the start of its window (``relpe_positions``),
            as the authors' code does (``local_relpe=True``, ``apply_local_relpe``); global layers
            keep 0..T-1.
        embedding_maxnorm: False (default) or True: the embedding output (token embedding plus
            the added position embedding, if any) goes through MaxNorm x / (max_i |x_i| +
            ``maxnorm_eps``) before the first block, as the authors' DANet BERT configs do
            (``"embedding_ln_type": "max_norm"``: ``MaxNormActivation``, eps 1e-3, at the end of
            ``DANetEmbeddings``, before its dropout).
    """
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = _key(4, "transformer blocks")
    n_head: int = _key(4, "attention heads per block")
    n_embd: int = _key(128, "model width (embedding size)")
    dropout: float = _key(0.0, "dropout probability (training only)", fixed_on_resume=False)
    bias: bool = _key(True, "biases in Linear layers and LayerNorms")
    layer_norm_epsilon: float = 1e-5
    attention: str = _key("softmax", "attention mechanism, a registered name (attention/); parameters with "
                                     "--attention.<param>=value")
    attention_params: dict = _key(dict, "parameters of the attention mechanism (dict)")
    n_classes: int = 0
    pooling: str = "cls"
    two_tower: bool = False
    block: str = _key("transformer", "transformer (GPT-2 pre-LN block) | danet (DenseAttention Network block; needs "
                                     "attention=dense)")
    pos_emb: str = _key("learned", "learned (T <= block_size) | sinusoidal (fixed table, any T) | cosine_relpe (Cosine "
                                   "RelPE, any T) | none")
    embedding_init_std: float = _key(0.02, "std of the token embedding's initialisation (GPT-2 0.02; LRA 1.0)")
    pos_embedding_init_std: float = _key(0.02, "std of the learned position embedding's initialisation (GPT-2 0.02; "
                                               "Zoology's MQAR models 1.0)")
    tie_lm_head: bool = _key(True, "GPT: the LM head is the token embedding (GPT-2) | False: a separate matrix "
                                   "(Zoology's MQAR models)")
    mlp: bool = _key(True, "transformer blocks with the MLP (GPT-2) | False: attention-only blocks (Zoology's Figure 2 "
                           "models)")
    scale_residual_init: bool = _key(True, "residual projections c_proj initialised with std 0.02 / sqrt(2 n_layer) "
                                           "(GPT-2) | False: 0.02")
    linear_init: str = _key("gpt2", "gpt2 (Linear weights N(0, 0.02^2), zero biases) | pytorch (PyTorch's default "
                                    "uniform init, Zoology's MQAR models)")
    token_shift: bool = _key(False, "add W_s e_(t-1) to the embedding output e_t before the first block (RWKV's token "
                                    "shift)")
    layer_scheme: str = _key("G", "DANet layers cycled over the stack: G global, L local, S shifted local (e.g. LSG)")
    window: int = _key(0, "window of the DANet L and S layers (positions)")
    pad_token_id: int = -1
    maxnorm_eps: float = _key(1e-3, "eps of DANet's MaxNormActivation x / (max|x| + eps)")
    ffn_linf_norm: float = _key(0.0, "DANet: l_inf norm of the FFN weights after every optimizer step (0 = no "
                                     "rescaling)")
    relpe_freqs: str = _key("paper", "Cosine RelPE frequencies over head dims i = 0..D-1: paper (Eq. 6, "
                                     "10000^(-2i/D)) | authors (their code, 10000^(-i/D))")
    relpe_local_positions: bool = _key(False, "DANet + Cosine RelPE: positions counted from each window's start in the "
                                              "L and S layers (the authors' code) instead of 0..T-1")
    embedding_maxnorm: bool = _key(False, "MaxNorm x / (max|x| + maxnorm_eps) on the embedding output before the "
                                          "first block (the authors' DANet BERT configs)")

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if self.pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {self.pooling!r}")
        if self.block not in BLOCKS:
            raise ValueError(f"block must be one of {', '.join(BLOCKS)}; got {self.block!r}")
        if self.pos_emb not in POS_EMBS:
            raise ValueError(f"pos_emb must be one of {', '.join(POS_EMBS)}; got {self.pos_emb!r}")
        if self.relpe_freqs not in RELPE_FREQS:
            raise ValueError(f"relpe_freqs must be one of {', '.join(RELPE_FREQS)} (Cosine RelPE frequencies: "
                             f"paper = 10000^(-2i/D), Eq. 6; authors = 10000^(-i/D), their code); "
                             f"got {self.relpe_freqs!r}")
        for key in ("relpe_local_positions", "embedding_maxnorm"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key} must be True or False; got {getattr(self, key)!r}")
        if self.relpe_local_positions:
            if self.pos_emb != "cosine_relpe" or self.block != "danet":
                raise ValueError(f"relpe_local_positions=True restarts Cosine RelPE positions in each window of a "
                                 f"DANet local layer: it needs pos_emb='cosine_relpe' and block='danet'; got "
                                 f"pos_emb={self.pos_emb!r}, block={self.block!r}")
            if not set(self.layer_scheme) & {"L", "S"}:
                raise ValueError(f"relpe_local_positions=True needs local layers (L or S in layer_scheme); "
                                 f"layer_scheme {self.layer_scheme!r} has none")
        if self.pos_emb == "sinusoidal" and self.n_embd % 2:
            raise ValueError(f"pos_emb='sinusoidal' pairs a sine and a cosine per frequency: n_embd must be even; "
                             f"got {self.n_embd}")
        if not self.embedding_init_std > 0:
            raise ValueError(f"embedding_init_std must be > 0; got {self.embedding_init_std}")
        if not self.pos_embedding_init_std > 0:
            raise ValueError(f"pos_embedding_init_std must be > 0; got {self.pos_embedding_init_std}")
        for key in ("token_shift", "tie_lm_head", "mlp", "scale_residual_init"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"{key} must be True or False; got {getattr(self, key)!r}")
        if self.linear_init not in LINEAR_INITS:
            raise ValueError(f"linear_init must be one of {', '.join(LINEAR_INITS)}; got {self.linear_init!r}")
        if not self.mlp and self.block != "transformer":
            raise ValueError("mlp=False (attention-only blocks) applies to block='transformer'; DANet blocks keep "
                             "their FFN")
        if not self.layer_scheme or set(self.layer_scheme) - set(LAYER_KINDS):
            raise ValueError(f"layer_scheme must be a non-empty string of the letters {', '.join(LAYER_KINDS)} "
                             f"(G global, L local, S shifted local); got {self.layer_scheme!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 0:
            raise ValueError(f"window must be an integer >= 0; got {self.window!r}")
        if set(self.layer_scheme) & {"L", "S"} and self.window == 0:
            raise ValueError(f"layer_scheme {self.layer_scheme!r} has local layers: set window > 0")
        if "S" in self.layer_scheme and self.window % 2:
            raise ValueError(f"layer_scheme {self.layer_scheme!r} has shifted-local layers (shift window / 2): "
                             f"window must be even; got {self.window}")
        if not -1 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id must be -1 (none) or a token id < vocab_size={self.vocab_size}; "
                             f"got {self.pad_token_id}")
        if not self.maxnorm_eps > 0:
            raise ValueError(f"maxnorm_eps must be > 0; got {self.maxnorm_eps}")
        if not self.ffn_linf_norm >= 0:
            raise ValueError(f"ffn_linf_norm must be >= 0 (0 = no rescaling); got {self.ffn_linf_norm}")
        if self.block == "transformer":
            if self.layer_scheme != "G":
                raise ValueError(f"layer_scheme {self.layer_scheme!r} needs block='danet' (transformer blocks are "
                                 f"global; use the attention's own window parameter)")
            if self.ffn_linf_norm:
                raise ValueError("ffn_linf_norm (FFN rescaling, DANet appendix G) needs block='danet'")
        else:
            if self.attention != "dense":
                raise ValueError(f"block='danet' needs attention='dense' (DenseAttention); got {self.attention!r}")
            _check_danet_attention_params(self.attention_params)


# Config keys of train.py that build the model: the ModelConfig fields declared with ``_key``
# (default and help in one place). The rest (block_size, vocab_size, pad_token_id, n_classes,
# pooling, two_tower, layer_norm_epsilon) are decided by the task and its data.
RUN_KEYS = tuple(f.name for f in fields(ModelConfig) if "help" in f.metadata)


def run_key_defaults():
    """The model's config keys of train.py: (defaults, help), two dicts over ``RUN_KEYS`` in field
    order (a fresh ``{}`` for ``attention_params``)."""
    defaults, help = {}, {}
    for f in fields(ModelConfig):
        if "help" in f.metadata:
            defaults[f.name] = f.default_factory() if f.default is MISSING else f.default
            help[f.name] = f.metadata["help"]
    return defaults, help


def fixed_on_resume():
    """``RUN_KEYS`` that a resumed run keeps from its checkpoint (all but those that never change
    the parameters, e.g. ``dropout``)."""
    return tuple(f.name for f in fields(ModelConfig) if "help" in f.metadata and f.metadata["fixed_on_resume"])


def config_from_run(cfg, **sizes):
    """The ``ModelConfig`` of a run configuration: the model keys of ``cfg`` (``RUN_KEYS``: sizes,
    dropout, bias, the attention and its parameters, the architecture options) plus
    what the task's data decides, ``sizes`` (``block_size``, ``vocab_size``, and for an encoder
    ``pad_token_id``, ``n_classes``, ``pooling``, ``two_tower``). Tasks call it through
    ``tasks.model_config``, which turns its errors into ConfigErrors.

    Raises:
        ValueError: unknown attention or parameter (``attention.check_params``), or an invalid
            architecture combination (``ModelConfig``).
    """
    attention.check_params(cfg["attention"], cfg["attention_params"])
    args = {key: cfg[key] for key in RUN_KEYS}
    args["attention_params"] = dict(args["attention_params"])
    return ModelConfig(**args, **sizes)


BLOCKS = ("transformer", "danet")
LINEAR_INITS = ("gpt2", "pytorch")
POS_EMBS = ("learned", "sinusoidal", "cosine_relpe", "none")
LAYER_KINDS = ("G", "L", "S")
RELPE_BASE = 10000.0
RELPE_FREQS = {"paper": 2.0, "authors": 1.0}  # Cosine RelPE: theta_i = RELPE_BASE^(-factor * i / D)


def _check_danet_attention_params(params):
    fixed = sorted(set(params) & {"window", "shift"})
    if fixed:
        raise ValueError(f"in a DANet model {fixed} come from layer_scheme and window (per layer), not from "
                         f"attention_params")


def cosine_relpe(T, head_dim, device=None, dtype=torch.float32, freqs="paper", start=0):
    """Cosine RelPE factors cos(m theta_i) (paper Sec. 3.2) for positions m = start..start+T-1
    (``start`` 0: the table of a sequence; > 0: its rows at an offset, as decoding needs them)
    and head dims i = 0..d-1 with d = ``head_dim``; a (T, d) tensor of ``dtype``.

    Every dim of a head is multiplied by its own factor (the paper's g_1(x_i, m) = x_i cos(m
    theta_i)); the angles are computed in float64 so long sequences keep their precision.
    ``freqs`` picks theta_i:

    - "paper" (default): theta_i = 10000^(-2i/d), Eq. 6 taken over single dims i = 0..d-1. Its
      lower half of frequencies is slow: with d = 128, 71 dims have cos(m theta_i) > 0.99 for
      every m < 512, so they carry almost no position.
    - "authors": theta_i = 10000^(-i/d), i = 0..d-1, as the authors' code
      (andrewargatkiny/dense-attention, ``src/positional_embeddings.py``, ``TrigRelPEBase``):
      RoPE's range of frequencies, 1 down to 10000^(-(d-1)/d); 14 of 128 dims near-constant.

    Raises:
        ValueError: ``freqs`` not "paper" or "authors".
    """
    if freqs not in RELPE_FREQS:
        raise ValueError(f"freqs must be one of {', '.join(RELPE_FREQS)}; got {freqs!r}")
    i = torch.arange(head_dim, dtype=torch.float64, device=device)
    theta = RELPE_BASE ** (-RELPE_FREQS[freqs] * i / head_dim)
    m = torch.arange(start, start + T, dtype=torch.float64, device=device)
    return torch.cos(m[:, None] * theta[None, :]).to(dtype)


def relpe_positions(T, window=0, shift=False, device=None):
    """The position m of each token 0..T-1 that Cosine RelPE uses in one layer; a (T,) int64 tensor.

    ``window`` 0 (a global layer): m = t. A local layer (windows [0, w), [w, 2w), ...): m = t mod w,
    counted from the start of the token's window. A shifted-local layer (``shift``; windows start
    at w / 2, the sequence padded by w / 2 in front): m = (t + w/2) mod w, counted from the start
    of the padded window, so the first w / 2 tokens sit at w/2 ... w-1. This is the authors' code
    (andrewargatkiny/dense-attention, ``src/dense_attention.py``: ``_forward_chunked`` applies
    ``apply_local_relpe`` of ``src/positional_embeddings.py``, the first w rows of the table
    repeated per window, after ``forward_shifted_local`` padded w / 2 in front), including its two
    short-sequence cases: T <= w uses 0..T-1 (one window), and a shifted layer with T <= w / 2
    runs as a global layer, also 0..T-1.
    """
    t = torch.arange(T, device=device)
    if not window or T <= (window // 2 if shift else window):
        return t
    return (t + (window // 2 if shift else 0)) % window


def sinusoidal_positions(T, n_embd, device=None, dtype=torch.float32, start=0):
    """The fixed position table of Vaswani et al. 2017 (Sec. 3.5), added to the token embeddings:
    PE[m, 2i] = sin(m w_i), PE[m, 2i + 1] = cos(m w_i) with w_i = 10000^(-2i / C), for positions
    m = start..start+T-1 (``start`` > 0: rows at an offset, for decoding) and i = 0..C/2-1,
    C = ``n_embd`` (even); a (T, C) tensor with entries in [-1, 1].

    This is the table the Long Range Arena transformers add when positions are not learned
    (``AddPositionEmbs`` with no initializer; sines in the even, cosines in the odd dims). The
    angles are computed in float64 so long sequences keep their precision.
    """
    w = RELPE_BASE ** (-torch.arange(0, n_embd, 2, dtype=torch.float64, device=device) / n_embd)
    angle = torch.arange(start, start + T, dtype=torch.float64, device=device)[:, None] * w[None, :]
    return torch.stack((angle.sin(), angle.cos()), dim=-1).reshape(T, n_embd).to(dtype)


def max_norm(x, eps):
    """MaxNormActivation (paper Sec. 3.1): x / (max_i |x_i| + eps) over the last dim.

    Output l_inf norm < 1 per vector; a zero vector stays zero. x: (..., C) float -> same shape.
    """
    return x / (x.abs().amax(dim=-1, keepdim=True) + eps)


class AttentionLayer(nn.Module):
    """What the two attention layers share: the heads' shape, the causal flag, and the model
    context ``{"layer_idx", "block_size", "n_head", "head_dim"}`` handed to ``attention.build``
    (see ``attention``)."""

    def __init__(self, config, causal, layer_idx=0):
        super().__init__()
        self.n_head = config.n_head
        self.causal = causal
        self.layer_idx = layer_idx

    def context(self, config):
        """The model context handed to ``attention.build`` for this block."""
        return {"layer_idx": self.layer_idx, "block_size": config.block_size, "n_head": config.n_head,
                "head_dim": config.n_embd // config.n_head}

    def heads(self, t):
        """(B, T, C) -> (B, H, T, D)."""
        B, T, C = t.shape
        return t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)


class SelfAttention(AttentionLayer):
    """Multi-head self-attention: fused qkv projection (``c_attn``), a registered attention
    mechanism on (B, H, T, D) tensors, output projection (``c_proj``).

    The mechanism is ``attention.build(config.attention, context, **config.attention_params)``
    with context ``{"layer_idx": layer_idx, "block_size": config.block_size, "n_head": ...,
    "head_dim": ...}`` (see ``attention``). When the block is causal and the mechanism has
    ``exclude_self`` True, position 0 has no allowed key and the block's output there is zero
    AFTER ``c_proj``: no bias is added, as in the authors' code of "High Attention Scores and
    Where to Find Them" (their attention block returns 0 for the first token).

    ``forward(x (B, T, C) float, attention_mask (B, T) bool or None, True = real token,
    relpe (T, D) or None)`` -> (B, T, C). ``relpe``: Cosine RelPE factors (``cosine_relpe``),
    multiplied into q and k per head, where RoPE would be applied (paper Sec. 3.2).
    """

    def __init__(self, config, causal, layer_idx=0):
        super().__init__(config, causal, layer_idx)
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.mechanism = self.build_mechanism(config, config.attention, config.attention_params)

    def build_mechanism(self, config, name, params):
        """``attention.build(name, context, **params)`` with this block's context.

        Raises:
            ValueError: unknown name or parameter; in a causal block, an attention that is not
                exactly causal (``attention.causal_refusal``: its outputs would see later tokens).
        """
        refusal = attention.causal_refusal(name) if self.causal else None
        if refusal:
            raise ValueError(f"{refusal}; a causal model (GPT) needs an exactly causal one")
        return attention.build(name, self.context(config), **params)

    def forward(self, x, attention_mask=None, relpe=None):
        B, T, C = x.shape
        q, k, v = (self.heads(t) for t in self.c_attn(x).split(C, dim=2))
        if relpe is not None:
            q, k = q * relpe, k * relpe
        y = self.mechanism(q, k, v, causal=self.causal, attention_mask=attention_mask)
        y = self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        if self.causal and getattr(self.mechanism, "exclude_self", False):
            # position 0 attends to nothing: the block contributes exactly 0 there (no c_proj bias)
            y = torch.cat([torch.zeros_like(y[:, :1]), y[:, 1:]], dim=1)
        return self.resid_dropout(y)

    def decode(self, x, state=None, relpe=None):
        """``forward`` a token at a time, for generation (``GPT.generate``): with ``state`` None,
        x (B, T, C) is a prompt at positions 0..T-1 (the mechanism's ``prefill``); otherwise
        x (B, 1, C) is the next token and ``state`` what the previous call returned (its
        ``step``). ``relpe``: the Cosine RelPE rows of these positions. Returns (y, state), y as
        ``forward`` gives it at these positions (position 0 zeroed with ``exclude_self``)."""
        B, T, C = x.shape
        q, k, v = (self.heads(t) for t in self.c_attn(x).split(C, dim=2))
        if relpe is not None:
            q, k = q * relpe, k * relpe
        first = state is None
        y, state = self.mechanism.prefill(q, k, v) if first else self.mechanism.step(q, k, v, state)
        y = self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        if first and self.causal and getattr(self.mechanism, "exclude_self", False):
            y = torch.cat([torch.zeros_like(y[:, :1]), y[:, 1:]], dim=1)
        return self.resid_dropout(y), state


class MLP(nn.Module):
    """GPT-2 feed-forward block: Linear(C, 4C) -> GELU (tanh approximation, "gelu_new") -> Linear(4C, C)."""

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    """Pre-LayerNorm transformer block (GPT-2): x + attn(ln_1(x)), then x + mlp(ln_2(x)).

    ``layer_idx`` (0-based) is the block's position in the stack, handed to the attention
    mechanism as model context. ``forward(x (B, T, C), attention_mask (B, T) bool or None)``
    -> (B, T, C).
    """

    def __init__(self, config, causal, layer_idx=0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.attn = SelfAttention(config, causal, layer_idx)
        # config.mlp False: attention-only, no ln_2 and no MLP
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias) if config.mlp else None
        self.mlp = MLP(config) if config.mlp else None

    def forward(self, x, attention_mask=None, relpe=None):
        x = x + self.attn(self.ln_1(x), attention_mask, relpe)
        return x if self.mlp is None else x + self.mlp(self.ln_2(x))

    def decode(self, x, state=None, relpe=None):
        """``forward`` for generation (``SelfAttention.decode``): (x, state) -> (x, state)."""
        h, state = self.attn.decode(self.ln_1(x), state, relpe)
        x = x + h
        return (x if self.mlp is None else x + self.mlp(self.ln_2(x))), state


class DenseSelfAttention(AttentionLayer):
    """The attention of a DANet block (paper Sec. 3.1): per head h, queries x W_Q[:, h] (one
    bias-free C x C matrix ``c_q``, split into heads like GPT-2's q), keys = values = x[:, h]
    (the h-th slice of the input; no W_K, W_V, W_O), combined by the registered ``dense``
    mechanism: DenseAttention_h(X) = X W_Q_h X_h^T X_h, heads concatenated.

    ``kind`` is the layer's letter of ``layer_scheme``: "G" global, "L" windows of
    ``config.window``, "S" the same windows shifted by window / 2; the mechanism is built with
    that window and shift added to ``attention_params``.

    ``forward(x (B, T, C), attention_mask (B, T) bool or None)`` -> (B, T, C); padded rows are 0.
    """

    def __init__(self, config, causal, layer_idx=0, kind="G"):
        super().__init__(config, causal, layer_idx)
        self.kind = kind
        self.c_q = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.mechanism = self.build_mechanism(config, config.attention, config.attention_params)

    def build_mechanism(self, config, name, params):
        """The dense mechanism of this layer: ``params`` plus the window and shift of its kind.

        Raises:
            ValueError: ``name`` is not "dense", or ``params`` sets window or shift.
        """
        if name != "dense":
            raise ValueError(f"a DANet block computes DenseAttention: attention must be 'dense', got {name!r}")
        _check_danet_attention_params(params)
        window = config.window if self.kind in ("L", "S") else 0
        return attention.build(name, self.context(config), **params, window=window, shift=self.kind == "S")

    def forward(self, x, attention_mask=None):
        q, kv = self.heads(self.c_q(x)), self.heads(x)
        y = self.mechanism(q, kv, kv, causal=self.causal, attention_mask=attention_mask)
        return y.transpose(1, 2).reshape(x.shape)

    def decode(self, x, state=None):
        """``forward`` a token at a time (``DANetBlock.decode``): the mechanism's ``prefill`` for a
        prompt x (B, T, C) when ``state`` is None, else its ``step`` for one token. Returns (y, state)."""
        q, kv = self.heads(self.c_q(x)), self.heads(x)
        y, state = self.mechanism.prefill(q, kv, kv) if state is None else self.mechanism.step(q, kv, kv, state)
        return y.transpose(1, 2).reshape(x.shape), state


class DANetFFN(nn.Module):
    """The FFN of a DANet block: ReLU(x (s_fc W_fc)^T) (s_proj W_proj)^T, no biases, width 4C.

    ``s_fc``, ``s_proj`` (buffers ``fc_scale``, ``proj_scale``, 1 by default) are the
    non-trainable l_inf scales of paper appendix G: ``rescale(norm)`` sets s = norm / max|W|, so
    the effective weight s W has l_inf norm ``norm`` while W itself is left to the optimizer;
    ``fold_scales`` moves s into W (export). Gradients reach W through s W.

    ``forward(x (..., C))`` -> (..., C).
    """

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)
        self.register_buffer("fc_scale", torch.ones(()))
        self.register_buffer("proj_scale", torch.ones(()))

    def forward(self, x):
        h = F.relu(F.linear(x, self.c_fc.weight * self.fc_scale))
        return F.linear(h, self.c_proj.weight * self.proj_scale)

    @torch.no_grad()
    def rescale(self, norm):
        """Set each scale so that max |s W| = ``norm`` (an all-zero W keeps its scale)."""
        for weight, scale in ((self.c_fc.weight, self.fc_scale), (self.c_proj.weight, self.proj_scale)):
            largest = weight.abs().max()
            if largest > 0:
                scale.copy_(norm / largest)

    @torch.no_grad()
    def fold_scales(self):
        """W <- s W and s <- 1: the same function without the scales."""
        for weight, scale in ((self.c_fc.weight, self.fc_scale), (self.c_proj.weight, self.proj_scale)):
            weight.copy_(weight * scale)
            scale.fill_(1.0)


class DANetBlock(nn.Module):
    """DenseAttention Network block (paper Sec. 3.1, the final equations of the layer l):

        X'_l    = DenseAttention(MaxNorm(X_l) * N^(-1/3))
        X_{l+1} = X_l + MaxNorm(FFN(X'_l))

    MaxNorm(x) = x / (max_i |x_i| + eps) per token (``max_norm``). N is the number of real
    tokens of the sequence (T without ``attention_mask``; for a causal model too: the scale
    depends on the length, never on later tokens' content); in a local or shifted-local layer N is
    the window w (as in the authors' code: at most w keys per query). Cosine RelPE
    (``relpe``, Eq. 6) multiplies the scaled input before the attention, so it reaches queries,
    keys and values (Sec. 3.2). Padded positions are zeroed before the attention; a zero row stays
    zero through the whole block (no biases, ReLU(0) = 0, MaxNorm(0) = 0). No LayerNorm, no
    dropout, no biases.

    ``forward(x (B, T, C), attention_mask (B, T) bool or None, relpe (T, D) or None)`` -> (B, T, C).
    """

    def __init__(self, config, causal, layer_idx=0):
        super().__init__()
        self.kind = config.layer_scheme[layer_idx % len(config.layer_scheme)]
        self.window = config.window if self.kind in ("L", "S") else 0
        self.n_head = config.n_head
        self.eps = config.maxnorm_eps
        self.attn = DenseSelfAttention(config, causal, layer_idx, self.kind)
        self.mlp = DANetFFN(config)

    def input_scale(self, x, attention_mask=None):
        """a = N^(-1/3) (section 3.1, Eq. 3-4: with max |X_ij| <= a, max |(X X^T X)_ij| <= N d a^3 = d),
        a float, or a (B, 1, 1) tensor with a per-sequence N (real tokens)."""
        if self.window:
            return self.window ** (-1.0 / 3.0)
        if attention_mask is None:
            return x.shape[1] ** (-1.0 / 3.0)
        n_real = attention_mask.sum(-1).clamp_min(1).to(x.dtype)
        return n_real.pow(-1.0 / 3.0)[:, None, None]

    def forward(self, x, attention_mask=None, relpe=None):
        h = max_norm(x, self.eps) * self.input_scale(x, attention_mask)
        if attention_mask is not None:
            h = h * attention_mask[..., None].to(h.dtype)
        if relpe is not None:
            h = h * relpe.repeat(1, self.n_head)  # (T, D) per head -> (T, C)
        y = self.attn(h, attention_mask)
        return x + max_norm(self.mlp(y), self.eps)

    def decode(self, x, state=None, relpe=None):
        """``forward`` for generation (``GPT.decode_step``): (x, state) -> (x, state), the prompt
        when ``state`` is None, else one token. DenseAttention is trilinear in its input, so the
        scale a enters as a^3 on its output: the state keeps the sums of the unscaled input, and
        a global layer's a = N^(-1/3) is that of the tokens seen so far (N = the state's length),
        as the forward over them uses it for its last row. Only the last layer may be global
        (``GPT.decode_unsupported``): a global layer's rows depend on N."""
        h = max_norm(x, self.eps)
        if relpe is not None:
            h = h * relpe.repeat(1, self.n_head)
        y, state = self.attn.decode(h, state)
        cube = 1.0 / self.window if self.window else 1.0 / state["length"]  # a^3
        return x + max_norm(self.mlp(y * cube), self.eps), state


class Transformer(nn.Module):
    """Token embeddings, position information (``config.pos_emb``), ``n_layer`` blocks
    (``Block`` or ``DANetBlock``, ``config.block``) and a final LayerNorm (kept for both block
    types, so the heads see the same kind of input).

    ``forward(idx (B, T) int64, attention_mask (B, T) bool or None, True = real token)``
    -> (B, T, C) hidden states after ``ln_f``. Block i gets ``layer_idx = i``. With
    ``pad_token_id`` >= 0, positions holding that id are padding as well. In a DANet model the
    embedding of every padded position is zero (paper Sec. 3.1: the PAD representation is fixed
    at 0, so no mask is needed inside the blocks), position embedding included. With
    ``embedding_maxnorm`` the sum of token and position embeddings goes through MaxNorm first.
    Cosine RelPE factors come from ``relpe_tables`` (window-local in L / S layers with
    ``relpe_local_positions``).

    Raises:
        ValueError: if T exceeds ``block_size`` with learned position embeddings (the message
            gives both lengths); sinusoidal, cosine_relpe and none accept any T.
    """

    def __init__(self, config, causal):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd) if config.pos_emb == "learned" else None
        self.drop = nn.Dropout(config.dropout)
        self.shift = nn.Linear(config.n_embd, config.n_embd, bias=False) if config.token_shift else None
        block = DANetBlock if config.block == "danet" else Block
        self.h = nn.ModuleList([block(config, causal, i) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self._table_cache = None
        self._relpe_cache = None

    def position_table(self, T, device, dtype):
        """The fixed position table of ``config.pos_emb``: (T, D) Cosine RelPE factors
        (``cosine_relpe`` with ``config.relpe_freqs``) or the (T, C) sinusoidal embedding
        (``sinusoidal_positions``); cached for the last (T, device, dtype, relpe_freqs)."""
        key = (T, device, dtype, self.config.relpe_freqs)
        if self._table_cache is None or self._table_cache[0] != key:
            C, H = self.config.n_embd, self.config.n_head
            table = (cosine_relpe(T, C // H, device, dtype, self.config.relpe_freqs)
                     if self.config.pos_emb == "cosine_relpe"
                     else sinusoidal_positions(T, C, device, dtype))
            self._table_cache = (key, table)
        return self._table_cache[1]

    def relpe_tables(self, T, device, dtype):
        """Cosine RelPE factors per layer kind: {"G": the (T, D) table of positions 0..T-1,
        "L": ..., "S": ...}. Without ``config.relpe_local_positions`` every kind gets the global
        table; with it, the L and S layers get the rows of their window-local positions
        (``relpe_positions``), i.e. the first ``window`` rows of the table repeated per window, as
        in the authors' code. Cached for the last (T, device, dtype, relpe_freqs, option, window)."""
        c = self.config
        key = (T, device, dtype, c.relpe_freqs, c.relpe_local_positions, c.window)
        if self._relpe_cache is None or self._relpe_cache[0] != key:
            table = self.position_table(T, device, dtype)
            tables = {kind: table for kind in LAYER_KINDS}
            if c.relpe_local_positions:
                longest = self.position_table(max(T, c.window), device, dtype)
                for kind in ("L", "S"):
                    tables[kind] = longest[relpe_positions(T, c.window, kind == "S", device)]
                self.position_table(T, device, dtype)  # leave the length-T table in its cache
            self._relpe_cache = (key, tables)
        return self._relpe_cache[1]

    def forward(self, idx, attention_mask=None):
        T = idx.shape[1]
        if self.wpe is not None and T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds the model's block_size {self.config.block_size}")
        if self.config.pad_token_id >= 0:
            not_pad = idx != self.config.pad_token_id
            attention_mask = not_pad if attention_mask is None else (attention_mask & not_pad)
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        elif self.config.pos_emb == "sinusoidal":
            x = x + self.position_table(T, x.device, x.dtype)
        if self.shift is not None:
            x = x + self.shift(F.pad(x[:, :-1], (0, 0, 1, 0)))  # e_t + W_s e_(t-1), e_(-1) = 0
        if self.config.embedding_maxnorm:
            x = max_norm(x, self.config.maxnorm_eps)  # the authors' embedding_ln_type="max_norm"
        if self.config.block == "danet" and attention_mask is not None:
            x = x * attention_mask[..., None].to(x.dtype)  # PAD fixed at zero (Sec. 3.1)
        x = self.drop(x)
        relpe = self.relpe_tables(T, x.device, x.dtype) if self.config.pos_emb == "cosine_relpe" else None
        for block in self.h:
            x = block(x, attention_mask, None if relpe is None else relpe[getattr(block, "kind", "G")])
        return self.ln_f(x)

    def decode(self, idx, cache):
        """``forward`` for generation (the models ``GPT.decode_unsupported`` allows): the
        tokens idx (B, T) at positions cache.length.. (a prompt when the cache is new, else one
        token), each block continuing its state in ``cache`` (``DecodeCache``, updated). Position
        embeddings, the Cosine RelPE factors and the token shift's previous embedding are taken at
        that offset. Returns the hidden states (B, T, C) after ``ln_f``, as ``forward`` gives
        them at those positions of the whole sequence.

        Raises:
            ValueError: more than one token after the prompt; learned positions past block_size.
        """
        c = self.config
        B, T = idx.shape
        start = cache.length
        if start and T != 1:
            raise ValueError(f"after the prompt, decoding takes one token at a time; got {T}")
        if self.wpe is not None and start + T > c.block_size:
            raise ValueError(f"position {start + T - 1} is past the learned positions of block_size {c.block_size}")
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(start, start + T, device=idx.device))
        elif c.pos_emb == "sinusoidal":
            x = x + sinusoidal_positions(T, c.n_embd, x.device, x.dtype, start)
        if self.shift is not None:
            before = torch.zeros_like(x[:, :1]) if cache.previous is None else cache.previous
            shifted = torch.cat([before, x[:, :-1]], dim=1)
            cache.previous = x[:, -1:].clone()  # not a view that would keep the prompt's embeddings
            x = x + self.shift(shifted)  # e_t + W_s e_(t-1)
        if c.embedding_maxnorm:
            x = max_norm(x, c.maxnorm_eps)
        x = self.drop(x)
        relpe = None
        if c.pos_emb == "cosine_relpe":
            relpe = cosine_relpe(T, c.n_embd // c.n_head, x.device, x.dtype, c.relpe_freqs, start)
        for i, block in enumerate(self.h):
            x, cache.states[i] = block.decode(x, cache.states[i], relpe)
        cache.length += T
        return self.ln_f(x)


class DecodeCache:
    """What a GPT keeps between the steps of generation (``GPT.prefill``, ``GPT.decode_step``):
    ``states``, the attention state of every layer (``attention.Attention.prefill``; None before
    the prompt), ``length``, the number of tokens seen (the next token's position), and
    ``previous``, the last token's embedding (B, 1, C) for the token shift (None without one)."""

    def __init__(self, n_layer):
        self.states = [None] * n_layer
        self.length = 0
        self.previous = None


def sample_next(logits, temperature=1.0, top_k=None, vocab_size=None, generator=None):
    """The next token ids (B, 1) int64 drawn from logits (B, V): softmax(logits / temperature)
    restricted to the ``top_k`` largest logits (None: all), over the first ``vocab_size`` ids
    (None: all; a tokenizer with fewer ids than the model's padded vocabulary); temperature 0
    takes the largest logit (greedy). ``generator``: a torch.Generator on the logits' device."""
    logits = logits.float()
    if vocab_size is not None:
        logits = logits[:, :vocab_size]
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)


def _notice(model, message):
    """Print ``message`` on stderr once per model (generation's one-line notices)."""
    said = model.__dict__.setdefault("_notices", set())
    if message not in said:
        said.add(message)
        print(message, file=sys.stderr, flush=True)


def _init_weights(model, config):
    """GPT-2 initialisation: N(0, 0.02), zero biases, residual projections scaled by 1/sqrt(2 n_layer)
    (``config.scale_residual_init``), or PyTorch's own for the Linear layers (``config.linear_init``
    "pytorch"); the token embedding N(0, ``config.embedding_init_std``^2) and the position embedding
    N(0, ``config.pos_embedding_init_std``^2) (0.02 by default, as GPT-2).
    DANet blocks as in the authors' code: W_Q ~ N(0, (0.02 / sqrt(2 n_layer C))^2), FFN weights
    ~ N(0, 1 / (2 * 4C))."""
    n_layer, gpt2 = config.n_layer, config.linear_init == "gpt2"
    for module in model.modules():
        if isinstance(module, nn.Linear) and gpt2:  # "pytorch": the constructors' own initialisation stays
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):  # in module order, so the default draws as GPT-2's
            std = config.embedding_init_std if module is model.transformer.wte else config.pos_embedding_init_std
            nn.init.normal_(module.weight, mean=0.0, std=std)
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight") and config.scale_residual_init and gpt2:
            nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))
    for module in model.modules():  # DANet: the authors' initialisation
        if isinstance(module, DenseSelfAttention):
            C = module.c_q.weight.shape[0]
            nn.init.normal_(module.c_q.weight, mean=0.0, std=0.02 / math.sqrt(2 * n_layer * C))
        elif isinstance(module, DANetFFN):
            C = module.c_fc.weight.shape[1]
            for weight in (module.c_fc.weight, module.c_proj.weight):
                nn.init.normal_(weight, mean=0.0, std=1.0 / math.sqrt(2 * 4 * C))


class AttentionSwapMixin:
    """Methods shared by GPT and BertEncoder: inspect and replace the attention mechanism, count
    parameters, and DANet's FFN rescaling (``after_optimizer_step``, ``fold_ffn_scales``)."""

    def attention_modules(self):
        """The registered attention module of every block, in layer order."""
        return [block.attn.mechanism for block in self.transformer.h]

    def set_attention(self, name, params=None):
        """Replace every block's attention by ``attention.build(name, context, **params)`` with
        the block's context (its ``layer_idx`` and the model's ``block_size``); no retraining.
        In a DANet model each layer adds its own window and shift (``layer_scheme``), so e.g.
        ``set_attention("dense", {"regime": "quadratic"})`` switches the regime of every layer.
        ``config.attention`` and ``config.attention_params`` are updated.

        Raises:
            ValueError: unknown attention name or parameter, or a model-context name in params;
                in a causal model (GPT) an attention that is not exactly causal
                (``attention.causal_refusal``); in a DANet model a name other than "dense" or a
                window / shift in params.
        """
        params = dict(params or {})
        for block in self.transformer.h:
            mechanism = block.attn.build_mechanism(self.config, name, params)
            block.attn.mechanism = mechanism.to(next(block.parameters()).device)
        self.config.attention, self.config.attention_params = name, params

    def num_params(self, non_embedding=True):
        """Number of parameters; position embeddings excluded when ``non_embedding`` (tied wte counted once)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.transformer.wpe is not None:
            n -= self.transformer.wpe.weight.numel()
        return n

    def after_optimizer_step(self):
        """Called by train.py after every optimizer step (under no_grad): ``rescale_ffn``, then
        ``after_optimizer_step()`` of every block's attention module that defines one (the
        optional method of the attention contract, e.g. Performer's feature redraw)."""
        self.rescale_ffn()
        for mechanism in self.attention_modules():
            hook = getattr(mechanism, "after_optimizer_step", None)
            if hook is not None:
                hook()

    @torch.no_grad()
    def rescale_ffn(self):
        """DANet with ``ffn_linf_norm`` > 0: set the FFN scales so every effective FFN weight has
        l_inf norm ``ffn_linf_norm`` (paper appendix G). Otherwise nothing."""
        if self.config.block == "danet" and self.config.ffn_linf_norm > 0:
            for block in self.transformer.h:
                block.mlp.rescale(self.config.ffn_linf_norm)

    def fold_ffn_scales(self):
        """Export for inference (paper appendix G): fold each DANet FFN scale into its weight
        (W <- s W, s <- 1) and set ``config.ffn_linf_norm`` to 0, so the model computes the same
        outputs with plain weights and ``after_optimizer_step`` no longer rescales. A transformer
        model is returned unchanged. Returns the model."""
        if self.config.block == "danet":
            for block in self.transformer.h:
                block.mlp.fold_scales()
            self.config.ffn_linf_norm = 0.0
        return self


class GPT(AttentionSwapMixin, nn.Module):
    """GPT-2 causal language model with a tied LM head.

    ``forward(idx, targets=None, attention_mask=None, only_targets=False)`` with idx (B, T) int64,
    targets (B, T) int64 (-1 = ignored) and attention_mask (B, T) bool (True = real token) or None
    returns ``(logits, loss)``: logits (B, T, V) float for every position; loss is the mean
    cross-entropy over targets != -1 (nats per token, scalar), or None without targets. With
    ``only_targets`` (tasks whose few labelled positions are all that is scored, e.g. recall
    queries) the LM head runs on the M positions with a target only: logits (M, V), in row-major
    order of those positions; the loss is the same.

    Generation: ``generate(idx, max_new_tokens, temperature, top_k)`` samples a continuation;
    ``prefill(idx)`` and ``decode_step(idx_t, cache)`` are its token-at-a-time path, one decode
    state per layer (``attention.Attention.prefill`` / ``step``), with logits equal to
    ``forward``'s on the whole prefix.

    Raises:
        ValueError: ``only_targets`` without targets.
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = Transformer(config, causal=True)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        _init_weights(self, config)
        if config.tie_lm_head:
            self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2
        self.rescale_ffn()  # DANet FFN scales from the start (appendix G)

    def forward(self, idx, targets=None, attention_mask=None, only_targets=False):
        hidden = self.transformer(idx, attention_mask)
        if only_targets:
            if targets is None:
                raise ValueError("only_targets=True needs targets (the positions to score)")
            scored = targets != -1
            logits = self.lm_head(hidden[scored])  # a full-vocabulary head at every position costs ~T/M times more
            return logits, F.cross_entropy(logits, targets[scored])
        logits = self.lm_head(hidden)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def decode_unsupported(self):
        """Why this model cannot generate with one decode state per layer (a sentence), or None
        when it can: a PAD token id and attentions without a decode path (``attention.decode_kind``
        None) are not covered, nor DANet blocks with a global layer below the last or with
        ``relpe_local_positions`` (``DANetBlock.decode``); ``generate`` recomputes its window
        for them. Nor is an attention whose rows depend on the sequence's length (class attribute
        ``rows_depend_on_length``, e.g. BigBird's last global blocks and random draw) below the
        last layer: the later layers' cached keys of earlier positions would not be those of the
        whole forward (its own step is, so one such layer on top is covered)."""
        c = self.config
        if c.block == "danet":
            if c.pos_emb == "cosine_relpe" and c.relpe_local_positions:
                return ("block='danet' with relpe_local_positions=True has no decode path (a shifted layer's positions "
                        "depend on the length while it is at most window / 2)")
            below = [i for i, block in enumerate(self.transformer.h[:-1]) if block.kind == "G"]
            if below:
                return (f"block='danet' with a global layer below the last (layer {below[0]}) has no decode path (its "
                        f"input scale N^(-1/3) makes its rows depend on the length, so later layers cannot cache "
                        f"their keys)")
        elif c.block != "transformer":
            return f"block={c.block!r} has no decode path"
        if c.pad_token_id >= 0:
            return f"a model with a PAD token (pad_token_id={c.pad_token_id}) has no decode path"
        mechanisms = self.attention_modules()
        for i, mechanism in enumerate(mechanisms):
            name = type(mechanism).registry_name
            if type(mechanism).decode is None:
                return f"attention {name!r} has no decode path"
            if i < len(mechanisms) - 1 and type(mechanism).rows_depend_on_length:
                return (f"attention {name!r} in layer {i} of {len(mechanisms)} has no decode path in this model (its "
                        f"rows depend on the sequence's length, so later layers cannot cache their keys)")
        return None

    @torch.no_grad()
    def prefill(self, idx):
        """Start decoding: the prompt idx (B, T) int64 through every block's ``prefill``.
        Returns (logits (B, T, V) as ``forward`` gives them, cache): the ``DecodeCache`` that
        ``decode_step`` continues. Call in eval mode (dropout off), as ``generate`` does.

        Raises:
            ValueError: ``decode_unsupported``'s reason; a prompt past learned positions.
        """
        reason = self.decode_unsupported()
        if reason:
            raise ValueError(reason)
        cache = DecodeCache(len(self.transformer.h))
        return self.lm_head(self.transformer.decode(idx, cache)), cache

    @torch.no_grad()
    def decode_step(self, idx, cache):
        """One token idx (B, 1) int64 at position ``cache.length`` through every block's ``step``;
        returns its logits (B, 1, V), those ``forward`` gives at the last position of the whole
        sequence. ``cache`` (``prefill``'s) is updated in place."""
        return self.lm_head(self.transformer.decode(idx, cache))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, crop=False, recompute=False,
                 vocab_size=None, generator=None, stats=None):
        """Continue the prompts idx (B, T) int64 by up to ``max_new_tokens`` sampled tokens
        (``sample_next``: ``temperature``, 0 = greedy; ``top_k``; ids below ``vocab_size``;
        ``generator``). Returns (B, T + n) int64.

        Runs in eval mode (dropout off; the mode is restored after). The prompt goes through
        ``prefill``, every new token through ``decode_step``: one state per layer. A model that
        ``decode_unsupported`` names, or ``recompute`` True, recomputes the last block_size tokens
        at every step instead (nanoGPT's way); the former is said in one line on stderr, once per
        model.

        Learned positions end at block_size: when the next token would need a later position,
        generation stops there (one line) unless ``crop``, which recomputes the last block_size
        tokens from then on (a decode state cannot drop its first tokens). The other position
        kinds decode past block_size with a state (the window with recomputation).

        stats: a dict to fill with "prompt_tokens", "prefill_seconds", "new_tokens",
            "decode_seconds" (counted over the batch) and "mode" ("decode", "recompute", or
            "decode, then recompute" after a crop).

        Raises:
            ValueError: a prompt longer than block_size with learned positions, without ``crop``.
        """
        was_training = self.training
        self.eval()
        try:
            return self._generate(idx, max_new_tokens, temperature, top_k, crop, recompute, vocab_size, generator,
                                  stats)
        finally:
            self.train(was_training)

    def _generate(self, idx, max_new_tokens, temperature, top_k, crop, recompute, vocab_size, generator, stats):
        block = self.config.block_size
        learned = self.transformer.wpe is not None
        unsupported = self.decode_unsupported()
        if unsupported:
            _notice(self, f"generate: {unsupported}; recomputing the last {block} tokens at every step (no decode "
                          f"state)")
        reason = unsupported or recompute
        if learned and idx.shape[1] > block and not crop:
            raise ValueError(f"the prompt has {idx.shape[1]} tokens, more than the model's block_size {block} (learned "
                             f"positions); crop=True keeps its last {block}")

        def window(x):
            return self(x[:, -block:])[0][:, -1]

        clock = _Clock(idx.device)
        cache, mode = None, "recompute" if reason else "decode"
        if reason or (learned and idx.shape[1] > block):
            logits = window(idx)
        else:
            logits, cache = self.prefill(idx)
            logits = logits[:, -1]
        prompt, prefill_seconds = idx.shape[1], clock.lap()
        for i in range(max_new_tokens):
            token = sample_next(logits, temperature, top_k, vocab_size, generator)
            idx = torch.cat([idx, token.to(idx.dtype)], dim=1)
            if i == max_new_tokens - 1:
                break
            if learned and idx.shape[1] > block:  # the next logits would need position block_size
                if not crop:
                    _notice(self, f"generate: stopped at block_size {block}, the end of the model's learned positions "
                                  f"({i + 1} new tokens); crop=True continues by recomputing the last {block} tokens")
                    break
                if cache is not None:
                    cache, mode = None, "decode, then recompute"
            logits = window(idx) if cache is None else self.decode_step(token, cache)[:, -1]
        if stats is not None:
            stats.update(prompt_tokens=prompt * idx.shape[0], prefill_seconds=prefill_seconds,
                         new_tokens=(idx.shape[1] - prompt) * idx.shape[0], decode_seconds=clock.lap(),
                         mode=mode)
        return idx


class _Clock:
    """Wall-clock laps that wait for the device's queued work first (CUDA is asynchronous)."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.last = self._now()

    def _now(self):
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def lap(self):
        """Seconds since the previous lap (or the start)."""
        now = self._now()
        seconds, self.last = now - self.last, now
        return seconds


class BertEncoder(AttentionSwapMixin, nn.Module):
    """Bidirectional encoder (the same blocks with ``causal=False``) with an MLM head.

    ``forward(idx (B, T) int64, attention_mask (B, T) bool or None)`` -> hidden states (B, T, C);
    ``forward(idx, attention_mask, mlm_mask=(B, T) bool)`` -> MLM logits (N, V) of the N
    positions where mlm_mask is True, in row-major order (the vocabulary projection runs only
    there; one forward call, so DDP and torch.compile see the whole computation);
    ``mlm_logits(hidden (..., C))`` -> (..., V) with the decoder tied to ``wte``;
    ``pool(hidden, attention_mask)`` -> (B, C), the sequence feature of ``config.pooling``.
    attention_mask is True for real tokens (padded keys get no attention). With
    ``config.n_classes`` > 0 the encoder also has ``classifier`` (see ``Classifier``).
    """

    def __init__(self, config):
        super().__init__()
        if not config.tie_lm_head:
            raise ValueError("tie_lm_head=False applies to the GPT's LM head; the encoder's MLM decoder is always "
                             "tied to the token embedding")
        self.config = config
        self.transformer = Transformer(config, causal=False)
        self.mlm_dense = nn.Linear(config.n_embd, config.n_embd)
        self.mlm_ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        if config.n_classes:
            n_features = 4 * config.n_embd if config.two_tower else config.n_embd
            self.classifier = nn.Sequential(nn.Linear(n_features, config.n_embd), nn.GELU(),
                                            nn.Linear(config.n_embd, config.n_classes))
        _init_weights(self, config)
        self.rescale_ffn()  # DANet FFN scales from the start (appendix G)

    def forward(self, idx, attention_mask=None, mlm_mask=None):
        hidden = self.transformer(idx, attention_mask)
        if mlm_mask is None:
            return hidden
        return self.mlm_logits(hidden[mlm_mask])

    def mlm_logits(self, hidden):
        h = self.mlm_ln(F.gelu(self.mlm_dense(hidden)))
        return h @ self.transformer.wte.weight.t() + self.mlm_bias

    def pool(self, hidden, attention_mask=None):
        """(B, T, C) -> (B, C): the first token ("cls") or the mean over real tokens ("mean";
        attention_mask (B, T) bool, True = real token, None = all real)."""
        if self.config.pooling == "cls":
            return hidden[:, 0]
        if attention_mask is None:
            return hidden.mean(1)
        m = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)


class Classifier(BertEncoder):
    """Sequence classifier: the encoder, pooling (``config.pooling``: "cls" or "mean") and the
    head Linear(F, C) - GELU - Linear(C, n_classes), F = C, or 4C in the two-tower mode (Long Range
    Arena's Retrieval, Tay et al. 2021 section 3.3: the same encoder on both documents, features
    [u, v, u * v, u - v]). The MLM head is removed (it would get no gradient, which DDP rejects);
    it is built first and dropped so that the initialisation draws the same numbers as before.

    ``forward(idx (B, T) int64, attention_mask (B, T) bool or None, idx2 (B, T2) int64 or None,
    attention_mask2 (B, T2) bool or None)`` -> logits (B, n_classes) float.

    Raises:
        ValueError: ``config.n_classes`` is 0, or two-tower without ``idx2``.
    """

    def __init__(self, config):
        if not config.n_classes:
            raise ValueError("Classifier needs n_classes > 0")
        super().__init__(config)
        self.mlm_dense = None
        self.mlm_ln = None
        self.mlm_bias = None

    def features(self, idx, attention_mask=None):
        """Pooled features (B, C) of one sequence batch."""
        return self.pool(self.transformer(idx, attention_mask), attention_mask)

    def forward(self, idx, attention_mask=None, idx2=None, attention_mask2=None):
        u = self.features(idx, attention_mask)
        if self.config.two_tower:
            if idx2 is None:
                raise ValueError("two_tower=True needs the second sequence idx2")
            v = self.features(idx2, attention_mask2)
            u = torch.cat([u, v, u * v, u - v], dim=-1)
        return self.classifier(u)


def config_dict(config):
    """ModelConfig -> plain dict (stored in checkpoints)."""
    return asdict(config)
