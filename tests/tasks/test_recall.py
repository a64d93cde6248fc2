"""tasks/recall.py: loss and accuracy on query positions only, through train.py."""
import json

import pytest
import torch

import train
from model import GPT, ModelConfig
from tasks import recall


def tiny_model(vocab=64, T=32):
    torch.manual_seed(0)
    return GPT(ModelConfig(block_size=T, vocab_size=vocab, n_layer=1, n_head=1, n_embd=16))


def test_loss_and_accuracy_ignore_non_query_positions():
    model = tiny_model().eval()
    idx = torch.randint(0, 64, (2, 32))
    targets = torch.full((2, 32), -1)
    targets[0, 10], targets[1, 20], targets[1, 30] = 40, 41, 42
    loss, metrics = recall.loss(model, {"idx": idx, "targets": targets})
    logits, _ = model(idx)
    picked = torch.stack([logits[0, 10], logits[1, 20], logits[1, 30]])
    expected = torch.nn.functional.cross_entropy(picked, torch.tensor([40, 41, 42]))
    torch.testing.assert_close(loss, expected)
    assert metrics["accuracy"] == (picked.argmax(-1) == torch.tensor([40, 41, 42])).float().mean()


def test_split_metrics_weighs_every_query_once():
    model = tiny_model().eval()
    inputs = torch.randint(0, 64, (5, 32)).numpy().astype("uint16")
    labels = torch.full((5, 32), -1)
    labels[:, 8] = 40
    labels[4, 12] = 41  # the last example has two queries: batches of 2 must not weigh by batch
    m2 = recall.split_metrics(model, inputs, labels.numpy().astype("int16"), 2, "cpu")
    m5 = recall.split_metrics(model, inputs, labels.numpy().astype("int16"), 5, "cpu")
    assert m2["queries"] == m5["queries"] == 6
    assert m2["accuracy"] == pytest.approx(m5["accuracy"]) and m2["loss"] == pytest.approx(m5["loss"], rel=1e-5)


def test_only_targets_needs_targets():
    with pytest.raises(ValueError, match="only_targets=True needs targets"):
        tiny_model()(torch.zeros(1, 8, dtype=torch.long), only_targets=True)


def test_train_learns_the_smallest_cell(tmp_path):
    """16 tokens, 2 pairs, vocabulary 32: train.py trains the task end to end, far above chance in 300 steps."""
    out = tmp_path / "run"
    train.main(["configs/recall/mqar.py", f"--out_dir={out}", "--block_size=16", "--recall_pairs=2",
                "--recall_vocab=32", f"--recall_dir={tmp_path / 'data'}", "--n_embd=32", "--batch_size=32",
                "--max_iters=300", "--lr_decay_iters=300", "--warmup_iters=10", "--eval_interval=100",
                "--num_threads=1", "--recall_sizes={'train': 2000, 'val': 200, 'test': 200}",
                "--recall_test_pairs=(3,)", "--learning_rate=1e-2"])
    final = json.loads((out / "final_metrics.json").read_text())
    assert final["test_queries"] == 400
    assert final["test_accuracy"] > 0.3  # chance: 1 / 16 values; 1 / 2 = a value of the context, picked blindly
    assert "test_accuracy_pairs3" in final and "test_accuracy_pairs2" in final
