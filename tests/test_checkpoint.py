"""checkpoint.py: our checkpoints load as their task's model (``checkpoint.load``), Hugging Face
GPT-2 weights give Hugging Face's logits (``checkpoint.gpt2_from_hf``)."""
import os

import pytest
import torch

import checkpoint
from model import GPT, Classifier, ModelConfig, config_dict


def small_config(**kw):
    return ModelConfig(**{**dict(block_size=16, vocab_size=50, n_layer=2, n_head=2, n_embd=16), **kw})


def hf_logits(path, idx):
    from transformers import GPT2LMHeadModel
    hf = GPT2LMHeadModel.from_pretrained(path).eval()
    with torch.no_grad():
        return hf(idx).logits


def test_loads_shared_tiny_hf_gpt2():
    path = os.environ["GPT2_TINY_HF_DIR"]
    if not os.path.exists(os.path.join(path, "config.json")):
        pytest.skip(f"no tiny HF GPT-2 at {path}")
    idx = torch.randint(0, 50257, (2, 17), generator=torch.Generator().manual_seed(0))
    ours = checkpoint.gpt2_from_hf(path).eval()
    with torch.no_grad():
        logits, _ = ours(idx)
    torch.testing.assert_close(logits, hf_logits(path, idx), rtol=0, atol=1e-5)


def test_loads_random_hf_gpt2(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=101, n_positions=32, n_embd=24, n_layer=2, n_head=3))
    hf.save_pretrained(tmp_path)
    idx = torch.randint(0, 101, (3, 32), generator=torch.Generator().manual_seed(1))
    ours = checkpoint.gpt2_from_hf(str(tmp_path)).eval()
    assert ours.config.n_head == 3 and ours.config.block_size == 32
    with torch.no_grad():
        logits, _ = ours(idx)
    torch.testing.assert_close(logits, hf_logits(str(tmp_path), idx), rtol=0, atol=1e-5)
    # the swapped-in reference attention gives the same logits
    ours.set_attention("softmax_reference")
    with torch.no_grad():
        logits_ref, _ = ours(idx)
    torch.testing.assert_close(logits_ref, logits, rtol=0, atol=1e-5)


def test_load_reads_runs_checkpoint_files_and_hugging_face(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=101, n_positions=32, n_embd=24, n_layer=2, n_head=3)).save_pretrained(
        tmp_path / "hf")
    model, config, meta = checkpoint.load(str(tmp_path / "hf"))
    assert isinstance(model, GPT) and config is None and meta["source"] == "huggingface" and not model.training

    run = tmp_path / "run"
    run.mkdir()
    clf_config = small_config(n_classes=3, pooling="mean")
    last, best = Classifier(clf_config), Classifier(clf_config)
    torch.save({"model": last.state_dict(), "model_args": config_dict(clf_config), "iter_num": 8,
                "config": {"task": "classify", "seed": 1}, "task": "classify"}, run / "ckpt.pt")
    torch.save({"model": best.state_dict(), "model_args": config_dict(clf_config), "iter_num": 4}, run / "best.pt")
    model, config, meta = checkpoint.load(str(run))
    assert isinstance(model, Classifier) and meta["iter_num"] == 8 and config == {"task": "classify", "seed": 1}
    torch.testing.assert_close(model.state_dict(), last.state_dict())
    model, config, meta = checkpoint.load(str(run), weights="best.pt")  # best weights, the run's config
    assert meta["iter_num"] == 4 and config["task"] == "classify" and meta["checkpoint"]["iter_num"] == 8
    torch.testing.assert_close(model.state_dict(), best.state_dict())
    model, _, meta = checkpoint.load(str(run / "ckpt.pt"))  # a checkpoint file
    assert meta["task"] == "classify" and meta["iter_num"] == 8

    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        checkpoint.load(str(tmp_path / "missing"))
    (run / "best.pt").unlink()
    with pytest.raises(FileNotFoundError, match="best.pt"):
        checkpoint.load(str(run), weights="best.pt")
    torch.save({"model": {}, "model_args": {}, "config": {}, "task": "segment"}, run / "odd.pt")
    with pytest.raises(ValueError, match="unknown task 'segment'; known: lm, mlm, classify"):
        checkpoint.load(str(run / "odd.pt"))
