"""Tests of scripts/bench/authors_dense.py without the authors' code.

A stand-in ``src`` package is written into tmp_path: the same interface as their repository
(ModelConfig, DenseAttention(config, local).queries / forward(x, rope_cache), CosRelPE.rel_pos_emb,
DANetLayerWithLocalAttention with .activation.eps, .attention, .ffn.expanding_weight /
.contracting_weight) and their formulation computed the plain way, with the explicit (T, T) matrix.
The comparison must then find agreement to float64 rounding, find the deliberate RelPE difference,
and catch a stand-in whose shifted windows are wrong.
"""
import json
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scripts.bench import authors_dense as cad

STANDIN = {
    "__init__.py": "",
    "model_config.py": '''
class ModelConfig:
    def __init__(self, vocab_size_or_config_json_file=0, **kwargs):
        self.__dict__.update(kwargs)
''',
    "positional_embeddings.py": '''
import torch


class CosRelPE(torch.nn.Module):
    """cos(m * base^(-i/n)) for positions m < seq_len, repeated over the heads: (1, seq_len, n * heads)."""
    def __init__(self, seq_len, n_elem, base=10000, num_heads=None):
        super().__init__()
        theta = base ** (-torch.arange(n_elem, dtype=torch.float64) / n_elem)
        table = torch.cos(torch.arange(seq_len, dtype=torch.float64)[:, None] * theta[None, :]).float()
        self.register_buffer("rel_pos_emb", table.repeat(1, num_heads or 1)[None])
''',
    "dense_attention.py": '''
import torch
from torch import nn

SHIFT = {shift}  # shifted_local windows start at w / 2 (False: a deliberately wrong stand-in)


class DenseAttention(nn.Module):
    def __init__(self, config, local=False, inference=False, layer_number=0):
        super().__init__()
        self.heads, self.causal, self.window = config.num_attention_heads, config.causal, config.window_size
        self.local = False if local in (False, None, "global") else local
        self.relpe = bool(config.relpe_scheme)
        self.queries = nn.Parameter(torch.zeros(config.hidden_size, config.hidden_size))

    def positions_and_windows(self, T):
        m, w = torch.arange(T), self.window
        if self.local == "local" and T > w:
            return m % w, m // w
        if self.local == "shifted_local" and T > w // 2:
            m = m + (w // 2 if SHIFT else 0)
            return m % w, m // w
        return m, torch.zeros_like(m)

    def forward(self, x, rope_cache=None):
        B, T, C = x.shape
        pos, win = self.positions_and_windows(T)
        if self.relpe:
            x = x * rope_cache.rel_pos_emb[0, pos]
        q = (x @ self.queries.T).view(B, T, self.heads, -1).transpose(1, 2)
        k = x.view(B, T, self.heads, -1).transpose(1, 2)
        allowed = win[:, None] == win[None, :]
        if self.causal:
            allowed = allowed & (torch.arange(T)[:, None] >= torch.arange(T)[None, :])
        scores = (q @ k.transpose(-1, -2)) * allowed
        return (scores @ k).transpose(1, 2).reshape(B, T, C)
''',
    "danet_layers.py": '''
import torch
from torch import nn

from src.dense_attention import DenseAttention


class MaxNorm(nn.Module):
    eps = 1e-3

    def forward(self, x):
        return x / (x.abs().amax(-1, keepdim=True) + self.eps)


class FFN(nn.Module):
    def __init__(self, C, e):
        super().__init__()
        self.expanding_weight = nn.Parameter(torch.randn(C, e * C) / (2 * e * C) ** 0.5)
        self.contracting_weight = nn.Parameter(torch.randn(e * C, C) / (2 * e * C) ** 0.5)

    def forward(self, x):
        return torch.relu(x @ self.expanding_weight) @ self.contracting_weight


class DANetLayerWithLocalAttention(nn.Module):
    def __init__(self, config, layer_number=0):
        super().__init__()
        codes = config.local_scheme.split("_")
        kind = {"l": "local", "sl": "shifted_local", "g": "global"}[codes[layer_number % len(codes)]]
        self.mask_index = 1 if kind == "global" else 0  # masks = (local, global)
        self.activation, self.ffn_activation = MaxNorm(), MaxNorm()
        self.attention = DenseAttention(config, local=kind)
        self.ffn = FFN(config.hidden_size, config.intermediate_size)

    def forward(self, x, masks, rope_cache=None):
        h = self.activation(x) * masks[self.mask_index]
        return x + self.ffn_activation(self.ffn(self.attention(h, rope_cache)))
''',
}


def _standin(root, shift=True):
    src = root / "src"
    src.mkdir(parents=True)
    for name, text in STANDIN.items():
        (src / name).write_text(text.replace("{shift}", str(shift)))
    return str(root)


SMALL = ["--D", "4", "--batch", "2", "--window", "8", "--chunk_size", "8", "--threads", "1", "--dtype", "float64"]


def test_standin_agrees_and_outputs_are_written(tmp_path):
    authors = _standin(tmp_path / "authors")
    out = str(tmp_path / "cmp")
    correctness, timing, summary = cad.main(["--authors_dir", authors, "--T", "12,24", "--heads", "1,2", "--no_time",
                                             "--authors_commit", "abc123", "--ref_max_T", "64", "--out", out, *SMALL])
    assert not timing and not summary["failed"]
    assert {r["setting"] for r in correctness if r["part"] == "op"} == set(cad.SETTINGS)
    assert len([r for r in correctness if r["part"] == "layer"]) == 2 * 3 * len(cad.LAYER_VARIANTS) * 2 * 2
    assert summary["op_max_rel"] < 1e-12 and summary["layer_max_rel"] < 1e-12
    assert summary["deliberate_relpe_max_rel"] > 1e-3  # our Eq. 6 RelPE differs from theirs on purpose
    assert all(r["ours_vs_ref64_rel"] < 1e-12 and r["theirs_vs_ref64_rel"] < 1e-12
               for r in correctness if r["part"] == "op")
    assert {r["our_regime"] for r in correctness if r["setting"] == "causal_global_ours_quadratic"} == {"quadratic"}
    for suffix in ("_correctness.csv", ".json", ".png"):
        assert os.path.getsize(out + suffix) > 0
    assert not os.path.exists(out + "_timing.csv")
    settings = json.loads(open(out + ".json").read())["settings"]
    assert settings["authors"]["commit"] == "abc123" and "src/dense_attention.py" in settings["authors"]["files"]
    assert settings["torch_threads"] == 1 and settings["commit"]
    assert not any(n == "src" or n.startswith("src.") for n in sys.modules)  # their package is not left behind


def test_wrong_shift_is_caught(tmp_path):
    authors = _standin(tmp_path / "authors", shift=False)
    correctness, _, _ = cad.main(["--authors_dir", authors, "--T", "24", "--heads", "1", "--no_time", "--no_layer",
                                  "--settings", "local,shifted_local,causal_shifted_local",
                                  "--out", str(tmp_path / "cmp"), *SMALL])
    rel = {r["setting"]: r["out_rel"] for r in correctness}
    assert rel["local"] < 1e-12
    assert rel["shifted_local"] > 1e-3 and rel["causal_shifted_local"] > 1e-3


def test_timing_side_by_side(tmp_path):
    authors = _standin(tmp_path / "authors")
    out = str(tmp_path / "cmp")
    _, timing, _ = cad.main(["--authors_dir", authors, "--T", "16", "--heads", "1", "--settings",
                             "global_linear,global_auto", "--no_layer", "--repeats", "1", "--out", out, *SMALL])
    assert [(r["setting"], r["mode"]) for r in timing] == [("global_linear", "forward"),
                                                           ("global_linear", "forward_backward")]  # auto: untimed
    assert all(r["ours_seconds"] > 0 and r["theirs_seconds"] > 0 and r["threads"] == 1 for r in timing)
    assert {r["first"] for r in timing} == {"ours", "theirs"}  # the order alternates
    assert os.path.getsize(out + "_timing.csv") > 0


def test_missing_authors_dir_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="src/dense_attention.py"):
        cad.main(["--authors_dir", str(tmp_path / "nowhere"), "--no_time", "--out", str(tmp_path / "cmp")])


def test_their_relpe_positions():
    table = torch.arange(8.0)[:, None].repeat(1, 3)  # row p holds p
    pos = lambda kind, T: cad.their_relpe_factors(table, T, 2, kind, 4)[:, 0].long().tolist()  # noqa: E731
    assert pos("global", 6) == [0, 1, 2, 3, 4, 5]
    assert pos("local", 6) == [0, 1, 2, 3, 0, 1]
    assert pos("shifted_local", 6) == [2, 3, 0, 1, 2, 3]  # inside the sequence padded by w / 2 in front
    assert pos("shifted_local", 2) == [0, 1]  # T <= w / 2: their one global call
