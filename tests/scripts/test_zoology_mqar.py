"""Tests of scripts/analysis/zoology_mqar.py without Zoology's code: a stand-in ``zoology`` package
with their interface (config.ModelConfig / ModuleConfig, model.TokenEmbeddings whose device
defaults to CUDA, model.LanguageModel(config) with .backbone.embeddings, .lm_head and
forward(input_ids, return_embeddings=True), mixers.attention) is written into tmp_path."""
import csv
import json
import sys

import pytest
import torch

from data import recall as recall_data
from scripts.analysis import zoology_mqar

STANDIN = {
    "__init__.py": "",
    "config.py": '''
class ModuleConfig:
    def __init__(self, name, kwargs):
        self.name, self.kwargs = name, kwargs


class ModelConfig:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)
''',
    "mixers/__init__.py": "",
    "mixers/attention.py": "",
    "model.py": '''
import torch
from torchvision.ops import StochasticDepth


class TokenEmbeddings(torch.nn.Module):
    def __init__(self, d_model, vocab_size, max_positions, device="cuda"):
        super().__init__()
        self.word = torch.nn.Embedding(vocab_size, d_model, device=device)
        self.position = torch.nn.Embedding(max_positions, d_model, device=device)

    def forward(self, input_ids, position_ids=None):
        return self.word(input_ids) + self.position(torch.arange(input_ids.shape[1]))


class Backbone(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = TokenEmbeddings(config.d_model, config.vocab_size, config.max_position_embeddings)
        self.drop = StochasticDepth(0.0, "row")
        self.mix = torch.nn.Linear(config.d_model, config.d_model)

    def forward(self, input_ids):
        x = self.drop(self.embeddings(input_ids))
        return x + self.mix(torch.cumsum(x, 1) / torch.arange(1, x.shape[1] + 1)[:, None])


class LanguageModel(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.backbone = Backbone(config)
        self.lm_head = torch.nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, input_ids, return_embeddings=True):
        hidden = self.backbone(input_ids)
        return hidden if return_embeddings else self.lm_head(hidden)
''',
}


@pytest.fixture
def standin(tmp_path):
    for name, text in STANDIN.items():
        path = tmp_path / "zoology_repo" / "zoology" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "zoology_repo"


def test_trains_their_model_on_our_data_and_writes_the_curve(standin, tmp_path, monkeypatch):
    folder = recall_data.prepare(16, 2, 64, sizes={"train": 40, "val": 10, "test": 10}, root=str(tmp_path / "mqar"))
    out = tmp_path / "results" / "zoo"
    monkeypatch.chdir(tmp_path)
    zoology_mqar.main([f"--zoology_dir={standin}", f"--data={folder}", "--steps=4", "--eval_interval=2",
                       "--batch=4", "--d_model=8", "--token_shift", f"--out={out}"])
    rows = list(csv.DictReader(open(f"{out}.csv")))
    assert [int(r["step"]) for r in rows] == [2, 4]
    assert all(0.0 <= float(r["val_accuracy"]) <= 1.0 and float(r["val_loss"]) > 0 for r in rows)
    entry = json.loads((out.parent / "manifest.json").read_text())
    assert "zoo" in json.dumps(entry)
    zmodel, _ = zoology_mqar.load_zoology(str(standin))
    assert zmodel.TokenEmbeddings.__init__.__defaults__ == ("cuda",)  # their default restored afterwards


def test_token_shift_adds_the_previous_embedding(standin):
    zmodel, zconfig = zoology_mqar.load_zoology(str(standin))
    lm = zoology_mqar.build_model(zmodel, zconfig, d_model=4, seq_len=6, vocab_size=20, dropout=0.0)
    plain = lm.backbone.embeddings(torch.tensor([[1, 2, 3]]))
    zoology_mqar.add_token_shift(lm, 4)
    with torch.no_grad():
        lm.token_shift.weight.copy_(torch.eye(4))
    shifted = lm.backbone.embeddings(torch.tensor([[1, 2, 3]]))
    expected = plain.clone()
    expected[:, 1:] += plain[:, :-1]
    torch.testing.assert_close(shifted, expected)
    assert any(p is lm.token_shift.weight for p in lm.parameters())


def test_no_stand_in_left_behind(standin):
    zoology_mqar.load_zoology(str(standin))
    assert "torchvision.ops" not in sys.modules or sys.modules["torchvision.ops"].__spec__ is not None


def test_missing_checkout_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no zoology/model.py"):
        zoology_mqar.load_zoology(str(tmp_path))
