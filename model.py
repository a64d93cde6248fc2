"""GPT-2 causal LM and a BERT-style bidirectional encoder built from the same blocks.

The attention mechanism of every block comes from the registry in ``attention/``:
``ModelConfig(attention="tree", attention_params={"E": 0.5})``. Parameter names follow GPT-2
(``transformer.wte``, ``transformer.h.N.attn.c_attn``, ...) so Hugging Face GPT-2 weights load
with a transpose of the Conv1D matrices only (``GPT.from_hf``).

Shapes: token ids (B, T) int64; hidden states (B, T, C) with C = n_embd; q/k/v per head
(B, H, T, D) with D = C / H; logits (B, T, V); attention_mask (B, T) bool, True = real token
(padded keys get no attention; None = no padding).
"""
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

import attention


@dataclass
class ModelConfig:
    """Architecture hyper-parameters shared by ``GPT`` and ``BertEncoder``.

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
    """
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    layer_norm_epsilon: float = 1e-5
    attention: str = "softmax"
    attention_params: dict = field(default_factory=dict)
    n_classes: int = 0
    pooling: str = "cls"
    two_tower: bool = False

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if self.pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {self.pooling!r}")


class SelfAttention(nn.Module):
    """Multi-head self-attention: fused qkv projection (``c_attn``), a registered attention
    mechanism on (B, H, T, D) tensors, output projection (``c_proj``).

    The mechanism is ``attention.build(config.attention, context, **config.attention_params)``
    with context ``{"layer_idx": layer_idx, "block_size": config.block_size}`` (see
    ``attention``). When the block is causal and the mechanism has ``exclude_self`` True,
    position 0 has no allowed key and the block's output there is zero AFTER ``c_proj``: no
    bias is added, as in the authors' code of "High Attention Scores and Where to Find Them"
    (their attention block returns 0 for the first token).

    ``forward(x (B, T, C) float, attention_mask (B, T) bool or None, True = real token)``
    -> (B, T, C).
    """

    def __init__(self, config, causal, layer_idx=0):
        super().__init__()
        self.n_head = config.n_head
        self.causal = causal
        self.layer_idx = layer_idx
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.mechanism = attention.build(config.attention, self.context(config), **config.attention_params)

    def context(self, config):
        """The model context handed to ``attention.build`` for this block."""
        return {"layer_idx": self.layer_idx, "block_size": config.block_size}

    def forward(self, x, attention_mask=None):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = self.mechanism(q, k, v, causal=self.causal, attention_mask=attention_mask)
        y = self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        if self.causal and getattr(self.mechanism, "exclude_self", False):
            # position 0 attends to nothing: the block contributes exactly 0 there (no c_proj bias)
            y = torch.cat([torch.zeros_like(y[:, :1]), y[:, 1:]], dim=1)
        return self.resid_dropout(y)


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
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, attention_mask=None):
        x = x + self.attn(self.ln_1(x), attention_mask)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    """Token + learned position embeddings, ``n_layer`` blocks and a final LayerNorm.

    ``forward(idx (B, T) int64, attention_mask (B, T) bool or None, True = real token)``
    -> (B, T, C) hidden states after ``ln_f``. Block i gets ``layer_idx = i``.

    Raises:
        ValueError: if T exceeds ``block_size`` (the message gives both lengths).
    """

    def __init__(self, config, causal):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config, causal, i) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)

    def forward(self, idx, attention_mask=None):
        T = idx.shape[1]
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds the model's block_size {self.config.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x, attention_mask)
        return self.ln_f(x)


def _init_weights(model, n_layer):
    """GPT-2 initialisation: N(0, 0.02), zero biases, residual projections scaled by 1/sqrt(2 n_layer)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))


class AttentionSwapMixin:
    """Methods shared by GPT and BertEncoder to inspect and replace the attention mechanism."""

    def attention_modules(self):
        """The registered attention module of every block, in layer order."""
        return [block.attn.mechanism for block in self.transformer.h]

    def set_attention(self, name, params=None):
        """Replace every block's attention by ``attention.build(name, context, **params)`` with
        the block's context (its ``layer_idx`` and the model's ``block_size``); no retraining.
        ``config.attention`` and ``config.attention_params`` are updated.

        Raises:
            ValueError: unknown attention name or parameter, or a model-context name in params.
        """
        params = dict(params or {})
        for block in self.transformer.h:
            mechanism = attention.build(name, block.attn.context(self.config), **params)
            block.attn.mechanism = mechanism.to(block.attn.c_attn.weight.device)
        self.config.attention, self.config.attention_params = name, params

    def num_params(self, non_embedding=True):
        """Number of parameters; position embeddings excluded when ``non_embedding`` (tied wte counted once)."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n


class GPT(AttentionSwapMixin, nn.Module):
    """GPT-2 causal language model with a tied LM head.

    ``forward(idx, targets=None, attention_mask=None)`` with idx (B, T) int64, targets (B, T)
    int64 (-1 = ignored) and attention_mask (B, T) bool (True = real token) or None returns
    ``(logits, loss)``: logits (B, T, V) float for every position; loss is the mean
    cross-entropy over targets != -1 (nats per token, scalar), or None without targets.
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = Transformer(config, causal=True)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        _init_weights(self, config.n_layer)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as in GPT-2

    def forward(self, idx, targets=None, attention_mask=None):
        logits = self.lm_head(self.transformer(idx, attention_mask))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    @classmethod
    def from_hf(cls, name_or_path, attention_name="softmax", attention_params=None):
        """Load a Hugging Face GPT-2 (hub name such as "gpt2", "gpt2-medium", or a local directory
        in HF format) through ``transformers``; HF's Conv1D weights (in, out) are transposed.

        Raises:
            ValueError: if the checkpoint is not a GPT-2 with the tanh-GELU ("gelu_new") MLP.
            OSError: from transformers if the model cannot be found or downloaded.
        """
        from transformers import GPT2LMHeadModel

        hf = GPT2LMHeadModel.from_pretrained(name_or_path)
        c = hf.config
        if c.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"{name_or_path}: activation {c.activation_function!r} not supported; expected gelu_new")
        config = ModelConfig(block_size=c.n_positions, vocab_size=c.vocab_size, n_layer=c.n_layer,
                             n_head=c.n_head, n_embd=c.n_embd, bias=True,
                             layer_norm_epsilon=c.layer_norm_epsilon, attention=attention_name,
                             attention_params=dict(attention_params or {}))
        model = cls(config)
        ours = model.state_dict()
        theirs = {k: v for k, v in hf.state_dict().items()
                  if not k.endswith((".attn.bias", ".attn.masked_bias")) and k != "lm_head.weight"}
        transposed = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
        missing = set(ours) - set(theirs) - {"lm_head.weight"}
        if missing:
            raise ValueError(f"{name_or_path}: missing GPT-2 parameters {sorted(missing)[:5]}")
        with torch.no_grad():
            for k, v in theirs.items():
                ours[k].copy_(v.t() if k.endswith(transposed) else v)
        return model


class BertEncoder(AttentionSwapMixin, nn.Module):
    """Bidirectional encoder (the same blocks with ``causal=False``) with an MLM head and an
    optional sequence-classification head.

    ``forward(idx (B, T) int64, attention_mask (B, T) bool or None)`` -> hidden states (B, T, C);
    ``mlm_logits(hidden)`` -> (B, T, V) with the decoder tied to ``wte``;
    ``classify(idx, attention_mask=None, idx2=None, attention_mask2=None)`` -> logits
    (B, n_classes), where the second sequence (B, T2) is used in ``two_tower`` mode.
    attention_mask is True for real tokens (padded keys get no attention).
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = Transformer(config, causal=False)
        self.mlm_dense = nn.Linear(config.n_embd, config.n_embd)
        self.mlm_ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        if config.n_classes:
            n_features = 4 * config.n_embd if config.two_tower else config.n_embd
            self.classifier = nn.Sequential(nn.Linear(n_features, config.n_embd), nn.GELU(),
                                            nn.Linear(config.n_embd, config.n_classes))
        _init_weights(self, config.n_layer)

    def forward(self, idx, attention_mask=None):
        return self.transformer(idx, attention_mask)

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

    def classify(self, idx, attention_mask=None, idx2=None, attention_mask2=None):
        if not self.config.n_classes:
            raise ValueError("this encoder has no classification head (n_classes=0)")
        u = self.pool(self(idx, attention_mask), attention_mask)
        if self.config.two_tower:
            if idx2 is None:
                raise ValueError("two_tower=True needs the second sequence idx2")
            w = self.pool(self(idx2, attention_mask2), attention_mask2)
            u = torch.cat([u, w, u * w, u - w], dim=-1)
        return self.classifier(u)


def config_dict(config):
    """ModelConfig -> plain dict (stored in checkpoints)."""
    return asdict(config)
