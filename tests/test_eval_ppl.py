import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attention
import configurator
import eval_ppl
from model import GPT, ModelConfig, config_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "configs", "wikitext2_gpt_tiny.py")
L = 16  # block size of the hand-made checkpoint


def save_checkpoint(out, **config):
    """A random GPT with sharp next-token distributions (so that sampled tokens and the true
    tokens get very different log-probabilities), attention that matters (so that self-exclusion
    changes the logits) and non-zero biases (so that a bias added at position 0 would show),
    saved as train.py does."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(**{**dict(block_size=L, vocab_size=50304, n_layer=2, n_head=2, n_embd=16), **config}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.5)
        model.transformer.ln_f.weight.mul_(50.0)
        for block in model.transformer.h:
            block.attn.c_attn.weight.mul_(20.0)
            block.attn.c_proj.weight.mul_(10.0)
    os.makedirs(out, exist_ok=True)
    torch.save({"model": model.state_dict(), "model_args": config_dict(model.config)}, os.path.join(out, "ckpt.pt"))
    return str(out)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, wikitext2_dir):
    return save_checkpoint(tmp_path_factory.mktemp("ckpt"))


def evaluate(checkpoint, tmp_path, *args, fraction=0.003, offset=0.3):
    path = tmp_path / "r.json"
    result = eval_ppl.main([f"--out_dir={checkpoint}", "--split=test", f"--fraction={fraction}",
                            f"--offset={offset}", f"--out_json={path}", *args])
    assert json.loads(path.read_text()) == json.loads(json.dumps(result))
    return result


def split_tokens():
    from data.wikitext2 import prepare as wt2
    return np.asarray(wt2.load_split("test"), dtype=np.int64)


def test_token_range_rule():
    # start at block ceil(offset N / L), ceil(fraction N / L) blocks, clipped to the split
    assert eval_ppl.token_range(1000, 16, 0.01, 0.3) == (304, 320)  # ceil(18.75) = 19 blocks in; 1 block
    assert eval_ppl.token_range(1000, 16, 0.05, 0.0) == (0, 64)  # ceil(3.125) = 4 blocks
    assert eval_ppl.token_range(100, 16, 1.0, 0.5) == (64, 100)  # clipped
    for fraction, offset in [(0.0, 0.0), (1.5, 0.0), (0.1, 1.0), (0.1, -0.1)]:
        with pytest.raises(configurator.ConfigError, match="fraction"):
            eval_ppl.token_range(1000, 16, fraction, offset)
    with pytest.raises(configurator.ConfigError, match="nothing to score"):
        eval_ppl.token_range(100, 16, 0.1, 0.99)  # starts at 112 > 100


def test_blocks_matches_direct_computation(checkpoint, tmp_path):
    result = evaluate(checkpoint, tmp_path, "--protocol=blocks")
    data = split_tokens()
    start, n = math.ceil(0.3 * len(data) / L) * L, math.ceil(0.003 * len(data) / L) * L
    assert (result["range_start"], result["range_tokens"], result["split_tokens"]) == (start, n, len(data))
    model = eval_ppl.load_model(dict(eval_ppl.DEFAULTS, out_dir=checkpoint))
    tokens = data[start:start + n]
    nll, count = 0.0, 0
    with torch.no_grad():
        for b in range(0, len(tokens), L):
            x = torch.from_numpy(tokens[b:b + L])[None]
            _, loss = model(x[:, :-1], x[:, 1:])
            nll, count = nll + loss.item() * (x.shape[1] - 1), count + x.shape[1] - 1
    assert result["tokens_scored"] == count == n - n // L
    assert result["mean_nll"] == pytest.approx(nll / count, rel=1e-5)
    assert result["value"] == pytest.approx(math.exp(result["mean_nll"]), rel=1e-12)
    assert result["metric"] == "perplexity" and result["context_length"] == L
    assert result["value_denominator"] == "tokens_scored"


def test_strided_with_stride_block_size_equals_blocks(checkpoint, tmp_path):
    blocks = evaluate(checkpoint, tmp_path, "--protocol=blocks")
    strided = evaluate(checkpoint, tmp_path, "--protocol=strided", f"--stride={L}")
    assert strided["tokens_scored"] == blocks["tokens_scored"]
    assert strided["mean_nll"] == pytest.approx(blocks["mean_nll"], rel=1e-6)


def test_strided_scores_every_token_once(checkpoint, tmp_path):
    result = evaluate(checkpoint, tmp_path, "--protocol=strided", "--stride=4")
    assert result["tokens_scored"] == result["range_tokens"] - 1


def test_windows_cover_range():
    for n, win, stride in [(100, 16, 16), (100, 16, 5), (17, 16, 8), (16, 16, 1)]:
        scored = []
        for begin, end, first in eval_ppl.windows(n, win, stride):
            assert end - begin <= win
            scored += list(range(max(first, begin + 1), end))
        if stride == win:
            assert scored == [m for m in range(1, n) if m % win]
        else:
            assert scored == list(range(1, n))


def hand_logits(model, ids, exclude_self, bias_at_first=False):
    """GPT-2 forward of one block written out from the weights, one query at a time. With
    exclude_self, query t reads keys 0..t-1 and the attention block adds exactly 0 at position 0
    (no c_proj bias; bias_at_first=True adds it, the wrong variant), as the authors' model does."""
    tr, c = model.transformer, model.config
    C, H = c.n_embd, c.n_head
    D = C // H
    T = len(ids)
    x = tr.wte.weight[ids] + tr.wpe.weight[:T]
    for blk in tr.h:
        a = blk.attn
        h = F.layer_norm(x, (C,), blk.ln_1.weight, blk.ln_1.bias, c.layer_norm_epsilon)
        q, k, v = (h @ a.c_attn.weight.T + a.c_attn.bias).split(C, dim=1)
        y = torch.zeros(T, C)
        for t in range(T):
            keys = range(t) if exclude_self else range(t + 1)
            for hd in range(H):
                sl = slice(hd * D, (hd + 1) * D)
                if keys:
                    w = torch.softmax(torch.stack([q[t, sl] @ k[j, sl] for j in keys]) / math.sqrt(D), 0)
                    y[t, sl] = w @ v[list(keys), sl]
        out = y @ a.c_proj.weight.T + a.c_proj.bias
        if exclude_self and not bias_at_first:
            out[0] = 0.0
        x = x + out
        h2 = F.layer_norm(x, (C,), blk.ln_2.weight, blk.ln_2.bias, c.layer_norm_epsilon)
        x = x + F.gelu(h2 @ blk.mlp.c_fc.weight.T + blk.mlp.c_fc.bias, approximate="tanh") @ blk.mlp.c_proj.weight.T \
            + blk.mlp.c_proj.bias
    return F.layer_norm(x, (C,), tr.ln_f.weight, tr.ln_f.bias, c.layer_norm_epsilon) @ tr.wte.weight.T


def hand_casino(model, tokens, exclude_self, bias_at_first=False, temperature=0.8):
    """Sum over blocks of L and positions 0..L-2 of the tempered entropy and of the tempered NLL
    of the TRUE next token."""
    entropy, true_nll = 0.0, 0.0
    with torch.no_grad():
        for b in range(0, len(tokens), L):
            ids = torch.from_numpy(tokens[b:b + L])
            logp = F.log_softmax(hand_logits(model, ids, exclude_self, bias_at_first)[:-1] / temperature, -1)
            entropy += -(logp.exp() * logp).sum().item()
            true_nll += -logp.gather(-1, ids[1:, None]).sum().item()
    return entropy, true_nll


def test_casino_matches_hand_computation(checkpoint, tmp_path):
    """Fails if self-exclusion is dropped (or a bias reaches position 0), if the true next token
    is scored instead of a sampled one, or if the denominator is not the whole range."""
    result = evaluate(checkpoint, tmp_path, "--protocol=casino", "--batch_size=3", fraction=0.001)
    data = split_tokens()
    start = math.ceil(0.3 * len(data) / L) * L
    n = math.ceil(0.001 * len(data) / L) * L
    assert (result["range_start"], result["range_tokens"]) == (start, n)
    assert result["tokens_scored"] == n - n // L and result["value_denominator"] == "range_tokens"
    assert result["attention_params"] == {"exclude_self": True}
    model = eval_ppl.load_model(dict(eval_ppl.DEFAULTS, out_dir=checkpoint))
    tokens = data[start:start + n]
    entropy, true_nll = hand_casino(model, tokens, exclude_self=True)
    # the expectation is deterministic: exactly the hand computation, over all range tokens
    assert math.log(result["casino_expected"]) == pytest.approx(entropy / n, rel=1e-4)
    assert math.log(result["casino_expected_per_scored_token"]) == pytest.approx(entropy / result["tokens_scored"], rel=1e-4)
    # ... and the wrong variants are far from it, so the check above bites
    for wrong in (dict(exclude_self=False), dict(exclude_self=True, bias_at_first=True)):
        assert abs(hand_casino(model, tokens, **wrong)[0] - entropy) / entropy > 1e-2
    # the value is exp(sum of sampled NLLs / range tokens); its per-scored-token twin divides by the scored ones
    assert math.log(result["value"]) == pytest.approx(result["nll_sum"] / n, rel=1e-9)
    assert math.log(result["casino_per_scored_token"]) == pytest.approx(result["mean_nll"], rel=1e-9)
    # sampled tokens: their mean NLL is near the mean entropy (~3.5 nats), far from the true tokens' (~20)
    count = result["tokens_scored"]
    gap = true_nll / count - entropy / count
    assert gap > 5.0
    assert abs(result["mean_nll"] - entropy / count) < 0.1 * gap


def test_casino_is_seeded_and_sampling_varies(checkpoint, tmp_path):
    a = evaluate(checkpoint, tmp_path, "--protocol=casino", fraction=0.001)
    b = evaluate(checkpoint, tmp_path, "--protocol=casino", fraction=0.001)
    c = evaluate(checkpoint, tmp_path, "--protocol=casino", "--seed=1", fraction=0.001)
    assert a["value"] == b["value"] and a["value"] != c["value"]
    assert a["casino_expected"] == pytest.approx(c["casino_expected"], rel=1e-6)


def test_casino_rebuilds_the_models_own_attention(tmp_path, wikitext2_dir):
    ckpt = save_checkpoint(tmp_path / "win", attention="softmax_reference", attention_params={"window": 4})
    model = eval_ppl.load_model(dict(eval_ppl.DEFAULTS, out_dir=ckpt, protocol="casino"))
    assert model.config.attention == "softmax_reference"
    assert all(m.exclude_self and m.window == 4 for m in model.attention_modules())
    swapped = eval_ppl.load_model(dict(eval_ppl.DEFAULTS, out_dir=ckpt, protocol="casino", attention="softmax",
                                       attention_params={"window": 2}))
    assert all(type(m).__name__ == "Softmax" and m.exclude_self and m.window == 2
               for m in swapped.attention_modules())
    plain = eval_ppl.load_model(dict(eval_ppl.DEFAULTS, out_dir=ckpt, protocol="blocks"))
    assert not any(m.exclude_self for m in plain.attention_modules())


@pytest.fixture
def attention_without_exclude_self():
    @attention.register("_probe_no_self")
    class NoSelf(attention.Attention):
        causal = "exact"

        def forward(self, q, k, v, causal, attention_mask=None):
            return v

    yield "_probe_no_self"
    attention._REGISTRY.pop("_probe_no_self", None)


def test_casino_needs_exclude_self(checkpoint, tmp_path, attention_without_exclude_self):
    with pytest.raises(configurator.ConfigError, match="attention '_probe_no_self' has no exclude_self.*softmax"):
        evaluate(checkpoint, tmp_path, "--protocol=casino", f"--attention={attention_without_exclude_self}")
    with pytest.raises(configurator.ConfigError, match="always uses exclude_self=True"):
        evaluate(checkpoint, tmp_path, "--protocol=casino", "--attention=softmax", "--attention.exclude_self=False")
    # the other protocols take it as it is
    assert evaluate(checkpoint, tmp_path, "--protocol=blocks", f"--attention={attention_without_exclude_self}",
                    fraction=0.001)["attention"] == attention_without_exclude_self


def test_per_position(checkpoint, tmp_path):
    for protocol in ("blocks", "casino"):
        result = evaluate(checkpoint, tmp_path, f"--protocol={protocol}", "--per_position=True")
        per = result["per_position"]
        assert per["context_length"] == list(range(1, L))
        assert sum(per["count"]) == result["tokens_scored"] and len(set(per["count"])) == 1
        assert sum(m * c for m, c in zip(per["mean_nll"], per["count"])) == pytest.approx(result["nll_sum"], rel=1e-6)
        assert ("mean_entropy" in per) == (protocol == "casino")
    result = evaluate(checkpoint, tmp_path, "--protocol=blocks")
    assert "per_position" not in result
    # position p of blocks: the same as scoring only the token at position p + 1 by hand
    model = eval_ppl.load_model(dict(eval_ppl.DEFAULTS, out_dir=checkpoint))
    data = split_tokens()
    tokens = data[result["range_start"]:result["range_start"] + result["range_tokens"]]
    x = torch.from_numpy(tokens.reshape(-1, L))
    with torch.no_grad():
        nll = F.cross_entropy(model(x)[0][:, :-1].transpose(1, 2), x[:, 1:], reduction="none").mean(0)
    per = evaluate(checkpoint, tmp_path, "--protocol=blocks", "--per_position=True")["per_position"]
    np.testing.assert_allclose(per["mean_nll"], nll.numpy(), rtol=1e-5)
    with pytest.raises(configurator.ConfigError, match="per_position needs protocol=blocks or casino"):
        evaluate(checkpoint, tmp_path, "--protocol=strided", "--per_position=True")


def test_attention_swap_and_errors(checkpoint, tmp_path):
    a = evaluate(checkpoint, tmp_path, "--protocol=blocks")
    b = evaluate(checkpoint, tmp_path, "--protocol=blocks", "--attention=softmax_reference")
    assert b["attention"] == "softmax_reference"
    assert b["mean_nll"] == pytest.approx(a["mean_nll"], rel=1e-5)
    with pytest.raises(ValueError, match="registered"):
        evaluate(checkpoint, tmp_path, "--attention=nope")
    with pytest.raises(configurator.ConfigError, match="model supplies"):
        evaluate(checkpoint, tmp_path, "--attention=softmax", "--attention.layer_idx=1")
    with pytest.raises(ValueError, match="allowed: strided, blocks, casino"):
        evaluate(checkpoint, tmp_path, "--protocol=sliding")
    with pytest.raises(configurator.ConfigError, match="no checkpoint.*needs the network"):
        eval_ppl.main([f"--out_dir={tmp_path}/none"])


def run_cli(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, os.path.join(ROOT, "eval_ppl.py"), *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)


def test_help_lists_every_key():
    assert set(eval_ppl.HELP) == set(eval_ppl.DEFAULTS)
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    for key in eval_ppl.DEFAULTS:
        assert f"--{key}" in proc.stdout
    assert " ".join(eval_ppl.HELP["per_position"].split()) in " ".join(proc.stdout.split())  # wrapped at 100 columns


def test_bad_key_exits_2_without_traceback():
    proc = run_cli("--protocl=blocks")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and "protocol" in proc.stderr and "Traceback" not in proc.stderr


def test_checkpoint_written_by_train_py(tmp_path_factory, tmp_path, wikitext2_dir):
    import train
    out = tmp_path_factory.mktemp("trained")
    train.main([TINY, f"--out_dir={out}", "--max_iters=2", "--eval_interval=2", "--eval_iters=1", "--num_threads=1"])
    result = evaluate(str(out), tmp_path, "--protocol=casino", "--attention=softmax_reference", fraction=0.002)
    assert result["metric"] == "casino" and math.isfinite(result["value"]) and result["value"] > 1
    assert result["context_length"] == 64


def test_hf_tiny_gpt2(tmp_path, wikitext2_dir):
    path = os.environ["GPT2_TINY_HF_DIR"]
    if not os.path.exists(os.path.join(path, "config.json")):
        pytest.skip(f"no tiny HF GPT-2 at {path}")
    result = eval_ppl.main([f"--init_from={path}", "--protocol=strided", "--stride=64", "--block_size=128",
                            "--fraction=0.002", f"--out_json={tmp_path / 'hf.json'}"])
    # random tiny weights: close to a uniform guess over the 50,257 tokens
    assert abs(result["mean_nll"] - np.log(50257)) < 0.5


def test_grid_runner_skips_done_and_survives_failures(checkpoint, tmp_path, capsys):
    from scripts.sweeps import eval_grid as grid
    common = f"--out_dir={checkpoint} --fraction=0.001"
    lines = [f"{common} --protocol=blocks --out_json={tmp_path}/good.json",
             f"{common} --protocol=casino --per_position=True --out_json={tmp_path}/casino.json",
             f"{common} --attention=nope --out_json={tmp_path}/bad.json",
             f"{common} --protocl=blocks --out_json={tmp_path}/badkey.json",
             "# a comment"]
    assert grid.main(lines) == 1
    err = capsys.readouterr().err
    assert "error: unknown config key 'protocl'" in err and "error: unknown attention 'nope'" in err
    assert "Traceback" not in err  # configuration errors are one line each
    assert json.loads((tmp_path / "good.json").read_text())["metric"] == "perplexity"
    assert len(json.loads((tmp_path / "casino.json").read_text())["per_position"]["mean_nll"]) == L - 1
    assert not (tmp_path / "bad.json").exists() and not (tmp_path / "badkey.json").exists()
    mtime = (tmp_path / "good.json").stat().st_mtime_ns
    assert grid.main(lines[:1]) == 0 and (tmp_path / "good.json").stat().st_mtime_ns == mtime
    with pytest.raises(SystemExit, match="line 2 has no --out_json"):  # checked before any run
        grid.main([f"{common} --out_json={tmp_path}/first.json", common])
    assert not (tmp_path / "first.json").exists()


def test_eval_refuses_an_attention_that_is_not_exactly_causal(checkpoint):
    with pytest.raises(configurator.ConfigError, match="attention='reformer' is not exactly causal"):
        eval_ppl.main([f"--out_dir={checkpoint}", "--attention=reformer", "--fraction=0.001"])
