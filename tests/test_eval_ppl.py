import json
import math
import os

import numpy as np
import pytest
import torch

import eval_ppl
import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "configs", "wikitext2_gpt_tiny.py")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, wikitext2_dir):
    out = tmp_path_factory.mktemp("tiny_ckpt")
    train.main([TINY, f"--out_dir={out}", "--max_iters=10", "--eval_interval=10", "--num_threads=1"])
    return str(out)


def evaluate(checkpoint, tmp_path, *args):
    path = tmp_path / "r.json"
    result = eval_ppl.main([f"--out_dir={checkpoint}", "--split=test", "--fraction=0.01", "--offset=0.3",
                            f"--out_json={path}", *args])
    assert json.loads(path.read_text()) == json.loads(json.dumps(result))
    return result


def test_blocks_matches_direct_computation(checkpoint, tmp_path):
    result = evaluate(checkpoint, tmp_path, "--protocol=blocks")
    model = eval_ppl.load_model(dict(eval_ppl.DEFAULTS, out_dir=checkpoint))
    tokens = eval_ppl.load_tokens(dict(eval_ppl.DEFAULTS, split="test", fraction=0.01, offset=0.3))
    L = model.config.block_size
    nll, n = 0.0, 0
    with torch.no_grad():
        for b in range(0, len(tokens) - 1, L):
            x = torch.from_numpy(tokens[b:b + L])[None]
            if x.shape[1] < 2:
                continue
            _, loss = model(x[:, :-1], x[:, 1:])
            nll, n = nll + loss.item() * (x.shape[1] - 1), n + x.shape[1] - 1
    assert result["tokens_scored"] == n
    assert result["value"] == pytest.approx(math.exp(nll / n), rel=1e-5)
    assert result["metric"] == "perplexity" and result["context_length"] == L


def test_strided_with_stride_block_size_equals_blocks(checkpoint, tmp_path):
    blocks = evaluate(checkpoint, tmp_path, "--protocol=blocks")
    strided = evaluate(checkpoint, tmp_path, "--protocol=strided", "--stride=64")
    assert strided["tokens_scored"] == blocks["tokens_scored"]
    assert strided["mean_nll"] == pytest.approx(blocks["mean_nll"], rel=1e-6)


def test_strided_scores_every_token_once(checkpoint, tmp_path):
    n = len(eval_ppl.load_tokens(dict(eval_ppl.DEFAULTS, split="test", fraction=0.01, offset=0.3)))
    result = evaluate(checkpoint, tmp_path, "--protocol=strided", "--stride=16")
    assert result["tokens_scored"] == n - 1


def test_windows_cover_range():
    for n, L, stride in [(100, 16, 16), (100, 16, 5), (17, 16, 8), (16, 16, 1)]:
        scored = []
        for begin, end, first in eval_ppl.windows(n, L, stride):
            assert end - begin <= L
            scored += list(range(max(first, begin + 1), end))
        if stride == L:
            assert scored == [m for m in range(1, n) if m % L]
        else:
            assert scored == list(range(1, n))


def test_casino_protocol(checkpoint, tmp_path):
    result = evaluate(checkpoint, tmp_path, "--protocol=casino", "--attention=softmax_reference")
    assert result["metric"] == "casino" and result["temperature"] == 0.8
    assert math.isfinite(result["value"]) and result["value"] > 1
    # the sampled estimate is close to its expectation (exp of the tempered entropy)
    assert abs(math.log(result["value"]) - math.log(result["casino_expected"])) < 0.15
    again = evaluate(checkpoint, tmp_path, "--protocol=casino", "--attention=softmax_reference")
    assert again["value"] == result["value"]  # seeded


def test_attention_swap_and_errors(checkpoint, tmp_path):
    a = evaluate(checkpoint, tmp_path, "--protocol=blocks")
    b = evaluate(checkpoint, tmp_path, "--protocol=blocks", "--attention=softmax_reference")
    assert b["attention"] == "softmax_reference"
    assert b["mean_nll"] == pytest.approx(a["mean_nll"], rel=1e-5)
    with pytest.raises(ValueError, match="registered"):
        evaluate(checkpoint, tmp_path, "--attention=nope")
    with pytest.raises(ValueError, match="allowed: strided, blocks, casino"):
        evaluate(checkpoint, tmp_path, "--protocol=sliding")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        eval_ppl.main([f"--out_dir={tmp_path}/none"])


def test_hf_tiny_gpt2(tmp_path, wikitext2_dir):
    path = os.environ["GPT2_TINY_HF_DIR"]
    if not os.path.exists(os.path.join(path, "config.json")):
        pytest.skip(f"no tiny HF GPT-2 at {path}")
    result = eval_ppl.main([f"--init_from={path}", "--protocol=strided", "--stride=64", "--block_size=128",
                            "--fraction=0.005", f"--out_json={tmp_path / 'hf.json'}"])
    # random tiny weights: close to a uniform guess over the 50,257 tokens
    assert abs(result["mean_nll"] - np.log(50257)) < 0.5


def test_grid_runner_skips_done_and_survives_failures(checkpoint, tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("run_eval_grid", os.path.join(ROOT, "scripts", "run_eval_grid.py"))
    grid = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(grid)
    common = f"--out_dir={checkpoint} --fraction=0.002 --protocol=blocks"
    lines = [f"{common} --out_json={tmp_path}/good.json", f"{common} --attention=nope --out_json={tmp_path}/bad.json",
             "# a comment"]
    assert grid.main(lines) == 1
    assert json.loads((tmp_path / "good.json").read_text())["metric"] == "perplexity"
    assert not (tmp_path / "bad.json").exists()
    mtime = (tmp_path / "good.json").stat().st_mtime_ns
    assert grid.main(lines[:1]) == 0 and (tmp_path / "good.json").stat().st_mtime_ns == mtime
