"""Teacher-forced perplexity of our checkpoints or Hugging Face GPT-2 models on WikiText-2, with
any registered attention swapped in at evaluation time (no retraining).

    python eval_ppl.py --out_dir=out/wikitext2_gpt_mini --split=test --protocol=strided --stride=512
    python eval_ppl.py --init_from=gpt2 --protocol=strided --stride=1024
    python eval_ppl.py --init_from=../shared/data/gpt2-tiny-hf --attention=tree --attention.E=0.5

Protocols (L = context length = the model's block size unless --block_size is given):
- ``strided``: Hugging Face's "perplexity of fixed-length models". Windows of L tokens start
  every ``stride`` tokens; each window scores only the tokens not scored by the previous window,
  with up to L - 1 tokens of context. The first token of the range is never scored.
- ``blocks``: non-overlapping blocks of L tokens, context reset at each block; every token but
  the first of a block is scored. Identical to ``strided`` with stride = L.
- ``casino``: the measurement of "High Attention Scores and Where to Find Them" (Sec. 3), which
  is NOT perplexity: blocks of L tokens with context reset, each query excluded from its own
  attention (the first position gets a zero attention output), and at each position a token
  is SAMPLED at temperature 0.8 and its log-probability under that tempered distribution is
  scored. Reported as ``casino`` (exp of the mean negative log-probability); the JSON also holds
  ``casino_expected``, the same quantity in expectation (exp of the mean entropy of the tempered
  distribution), which has no sampling noise.

The evaluated range is tokens [floor(offset N), floor(offset N) + ceil(fraction N)) of the split.
Perplexity = exp(mean negative log-likelihood in nats per GPT-2 BPE token).
"""
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import configurator
from data.wikitext2 import prepare as wt2
from model import GPT, ModelConfig

DEFAULTS = dict(
    out_dir="out/wikitext2_gpt_mini",  # our checkpoint (out_dir/ckpt.pt), used when init_from="resume"
    init_from="resume",  # "resume" | a Hugging Face GPT-2 name (gpt2, gpt2-medium, ...) | a local HF directory
    dataset_config="wikitext-2-v1",
    data_source_dir="",
    split="test",  # train | val | test
    protocol="strided",  # strided | blocks | casino
    stride=512,
    block_size=0,  # context length L; 0 = the model's block size
    fraction=1.0,
    offset=0.0,
    batch_size=4,
    attention="",  # "" keeps the model's attention; any registered name swaps it in
    attention_params={},
    temperature=0.8,  # casino protocol only
    seed=0,
    device="cpu",
    out_json="",  # default: <out_dir or results>/eval_<split>_<protocol>_<attention>.json
    num_threads=0,
)
PROTOCOLS = ("strided", "blocks", "casino")


def load_model(cfg):
    """Our checkpoint (init_from="resume") or a Hugging Face GPT-2, in eval mode, with the
    requested attention swapped in.

    Raises:
        FileNotFoundError: no checkpoint in out_dir.
        ValueError: unknown attention name or parameter.
    """
    if cfg["init_from"] == "resume":
        path = os.path.join(cfg["out_dir"], "ckpt.pt")
        if not os.path.exists(path):
            raise FileNotFoundError(f"no checkpoint at {path}; train one with train.py or pass --init_from=gpt2")
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        model = GPT(ModelConfig(**ckpt["model_args"]))
        model.load_state_dict(ckpt["model"])
    else:
        model = GPT.from_hf(cfg["init_from"])
    if cfg["attention"]:
        configurator.check_attention_params(cfg["attention"], cfg["attention_params"])
        model.set_attention(cfg["attention"], cfg["attention_params"])
    elif cfg["attention_params"]:
        raise configurator.ConfigError("--attention.<param> given without --attention=<name>")
    return model.to(cfg["device"]).eval()


def load_tokens(cfg):
    """The evaluated token range of the split as an int64 numpy array."""
    split = {"valid": "val", "validation": "val"}.get(cfg["split"], cfg["split"])
    try:
        data = wt2.load_split(split, cfg["dataset_config"], cfg["data_source_dir"] or None)
    except wt2.DataUnavailable as e:
        sys.exit(f"error: {e}")
    if not (0.0 < cfg["fraction"] <= 1.0 and 0.0 <= cfg["offset"] < 1.0):
        raise configurator.ConfigError(f"need 0 < fraction <= 1 and 0 <= offset < 1; got {cfg['fraction']}, {cfg['offset']}")
    start = int(math.floor(cfg["offset"] * len(data)))
    end = min(len(data), start + int(math.ceil(cfg["fraction"] * len(data))))
    return np.asarray(data[start:end], dtype=np.int64)


def windows(n_tokens, L, stride):
    """(begin, end, first_scored) triples of the strided protocol over n_tokens tokens.

    Token m is scored in the window that contains it with the most context; first_scored is
    the first scored token index (absolute). The first token of the range is never scored.
    """
    if stride < 1 or stride > L:
        raise ValueError(f"stride must be in [1, L={L}], got {stride}")
    out, prev_end, begin = [], 1, 0
    while prev_end < n_tokens:
        end = min(begin + L, n_tokens)
        out.append((begin, end, prev_end))
        prev_end = end
        begin += stride
    return out


@torch.no_grad()
def score(model, tokens, cfg, L):
    """Sum of negative log-likelihoods and number of scored tokens (and for casino the sum of
    tempered entropies) over the token array, batching windows of equal length."""
    stride = L if cfg["protocol"] in ("blocks", "casino") else cfg["stride"]
    wins = windows(len(tokens), L, stride)
    gen = torch.Generator().manual_seed(cfg["seed"])
    nll_sum, entropy_sum, count = 0.0, 0.0, 0
    i = 0
    while i < len(wins):
        length = wins[i][1] - wins[i][0]
        group = [wins[i]]
        while (len(group) < cfg["batch_size"] and i + len(group) < len(wins)
               and wins[i + len(group)][1] - wins[i + len(group)][0] == length):
            group.append(wins[i + len(group)])
        i += len(group)
        x = torch.from_numpy(np.stack([tokens[b:e] for b, e, _ in group])).to(cfg["device"])
        logits, _ = model(x)
        logits = logits[:, :-1].float()  # position j predicts token j + 1
        targets = x[:, 1:]
        keep = torch.zeros_like(targets, dtype=torch.bool)
        for row, (b, _, first) in enumerate(group):
            keep[row, max(0, first - b - 1):] = True
        if cfg["protocol"] == "casino":
            logp = F.log_softmax(logits / cfg["temperature"], dim=-1)
            probs = logp.exp()
            sampled = torch.multinomial(probs.view(-1, probs.shape[-1]).cpu(), 1, generator=gen).view(targets.shape)
            token_nll = -logp.gather(-1, sampled.to(logp.device).unsqueeze(-1)).squeeze(-1)
            entropy_sum += (-(probs * logp).sum(-1))[keep].sum().item()
        else:
            token_nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        nll_sum += token_nll[keep].sum().item()
        count += int(keep.sum())
    return nll_sum, entropy_sum, count


def evaluate(cfg):
    """Run one evaluation described by ``cfg`` (see DEFAULTS); returns the result dict."""
    if cfg["protocol"] not in PROTOCOLS:
        raise configurator.ConfigError(f"unknown protocol {cfg['protocol']!r}; allowed: {', '.join(PROTOCOLS)}")
    model = load_model(cfg)
    L = cfg["block_size"] or model.config.block_size
    if L > model.config.block_size:
        raise configurator.ConfigError(f"block_size {L} exceeds the model's block_size {model.config.block_size}")
    for module in model.attention_modules():
        module.exclude_self = cfg["protocol"] == "casino"
        module.reset_stats()
    tokens = load_tokens(cfg)
    t0 = time.time()
    nll_sum, entropy_sum, count = score(model, tokens, cfg, L)
    seconds = time.time() - t0
    if count == 0:
        raise ValueError(f"no token scored: the range has {len(tokens)} tokens")
    stats = {}
    for module in model.attention_modules():
        for key, value in module.stats().items():
            stats[key] = stats.get(key, 0) + value
    mean_nll = nll_sum / count
    result = {
        "metric": "casino" if cfg["protocol"] == "casino" else "perplexity",
        "value": math.exp(mean_nll), "mean_nll": mean_nll, "tokens_scored": count,
        "seconds": seconds, "tokens_per_second": count / seconds,
        "protocol": cfg["protocol"], "stride": cfg["stride"] if cfg["protocol"] == "strided" else L,
        "context_length": L, "split": cfg["split"], "dataset_config": cfg["dataset_config"],
        "fraction": cfg["fraction"], "offset": cfg["offset"],
        "model": cfg["out_dir"] if cfg["init_from"] == "resume" else cfg["init_from"],
        "attention": model.config.attention, "attention_params": model.config.attention_params,
        "attention_stats": stats, "seed": cfg["seed"], "torch": torch.__version__,
    }
    if cfg["protocol"] == "casino":
        result["temperature"] = cfg["temperature"]
        result["casino_expected"] = math.exp(entropy_sum / count)
    return result


def main(argv):
    torch.set_flush_denormal(True)
    cfg = configurator.parse(DEFAULTS, argv)
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])
    torch.manual_seed(cfg["seed"])
    result = evaluate(cfg)
    label = "casino pseudo-perplexity (NOT perplexity: sampled tokens at T=%.2f)" % cfg["temperature"] \
        if result["metric"] == "casino" else "perplexity"
    print(f"{label}: {result['value']:.3f}  mean NLL {result['mean_nll']:.4f} nats/token  "
          f"tokens scored {result['tokens_scored']:,}  time {result['seconds']:.1f}s  "
          f"({result['protocol']}, L={result['context_length']}, stride={result['stride']}, "
          f"attention={result['attention']} {result['attention_params']})")
    out_json = cfg["out_json"] or os.path.join(
        cfg["out_dir"] if cfg["init_from"] == "resume" else "results",
        f"eval_{cfg['split']}_{cfg['protocol']}_{result['attention']}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out_json)), exist_ok=True)
    tmp = out_json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=2)
    os.replace(tmp, out_json)
    print(f"wrote {out_json}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
