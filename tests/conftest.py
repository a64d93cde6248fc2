"""Point the project at the offline copies in ../shared when the environment does not say otherwise."""
import os

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")

os.environ.setdefault("TIKTOKEN_CACHE_DIR", os.path.join(SHARED, "tiktoken"))
os.environ.setdefault("WIKITEXT2_DIR", os.path.join(SHARED, "data", "wikitext-2"))
os.environ.setdefault("GPT2_TINY_HF_DIR", os.path.join(SHARED, "data", "gpt2-tiny-hf"))
os.environ.setdefault("BERT_VOCAB_FILE", os.path.join(SHARED, "data", "bert-vocab", "vocab.txt"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
torch.set_flush_denormal(True)


@pytest.fixture(scope="session")
def wikitext2_dir():
    path = os.environ["WIKITEXT2_DIR"]
    if not os.path.exists(os.path.join(path, "wiki.test.tokens")):
        pytest.skip(f"WikiText-2 copy not found at {path}")
    return path
