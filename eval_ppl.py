"""Teacher-forced perplexity of our checkpoints or Hugging Face GPT-2 models on WikiText-2, with
any registered attention swapped in at evaluation time (no retraining), and the "casino"
measurement of "High Attention Scores and Where to Find Them".

    python eval_ppl.py --out_dir=out/wikitext2_gpt_mini --split=test --protocol=strided --stride=512
    python eval_ppl.py --init_from=gpt2 --protocol=strided --stride=1024
    python eval_ppl.py --init_from=$GPT2_TINY_HF_DIR --attention=tree --attention.E=0.5
        (any local directory of a Hugging Face GPT-2, e.g. a local copy of a tiny GPT-2 model;
        the tests read the variable GPT2_TINY_HF_DIR)
    python eval_ppl.py --help

Evaluated range (one rule for every protocol, as in the authors' ``nanoGPT/inference_bench.py``):
with N the number of tokens of the split and L the context length (the model's block size unless
--block_size is given), the range starts at token ceil(offset·N/L)·L and holds ceil(fraction·N/L)
blocks of L tokens, clipped to the end of the split. The JSON records it as ``range_start`` and
``range_tokens``.

Protocols:
- ``strided``: Hugging Face's "perplexity of fixed-length models". Windows of L tokens start
  every ``stride`` tokens; each window scores only the tokens not scored by the previous window,
  with up to L - 1 tokens of context. The first token of the range is never scored.
- ``blocks``: non-overlapping blocks of L tokens, context reset at each block; every token but
  the first of a block is scored. Identical to ``strided`` with stride = L.
- ``casino``: the authors' measurement, which is NOT perplexity. Blocks as in ``blocks``; the
  attention is built with ``exclude_self=True`` (query t sees keys before t only, the first
  position of a block gets a zero attention output); at each position p = 0..L-2 of a block a
  token is SAMPLED from the model's distribution at temperature 0.8 and the log-probability of
  that sampled token under the tempered distribution is summed. The reported ``value`` follows
  the authors: exp(-sum / range_tokens), i.e. the denominator counts every token of the range,
  including the unscored first token of each block. ``casino_per_scored_token`` divides by the
  number of scored tokens instead; ``casino_expected`` (and its ``_per_scored_token`` twin) is
  the same quantity in expectation (the sum of the tempered entropies), without sampling noise.
  Parameters of the attention that depend on the model (tree attention's default P) come from the
  model's block size through the build context, as in the authors' code.

Perplexity = exp(mean negative log-likelihood in nats per GPT-2 BPE token scored).
"""
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

import attention
import checkpoint
import configurator
from data import DataError, write_json
from data.wikitext2 import prepare as wt2
import provenance
import training as T
from model import run_key_defaults

# Keys that mean here what they mean in train.py take its declaration (default and help); the
# others are this script's own, with the reason a same-named train.py key does not fit.
SHARED_KEYS = (("device", T.COMMON_DEFAULTS, T.COMMON_HELP), ("num_threads", T.COMMON_DEFAULTS, T.COMMON_HELP),
               ("dataset_config", wt2.CONFIG_DEFAULTS, wt2.CONFIG_HELP),
               ("data_source_dir", wt2.CONFIG_DEFAULTS, wt2.CONFIG_HELP),
               ("attention_params", *run_key_defaults()))
OWN_KEYS = {  # train.py key -> why this script declares its own
    "out_dir": "the run read (its ckpt.pt), not written",
    "init_from": "our run ('resume') or a Hugging Face GPT-2, never a new model",
    "block_size": "the evaluation's context length, 0 = the model's",
    "batch_size": "windows per forward pass",
    "attention": "'' keeps the trained model's attention",
    "seed": "the casino protocol's sampling only",
}
DEFAULTS = dict(
    out_dir="out/wikitext2_gpt_mini",
    init_from="resume",
    split="test",
    protocol="strided",
    stride=512,
    block_size=0,
    fraction=1.0,
    offset=0.0,
    batch_size=4,
    attention="",
    temperature=0.8,
    seed=0,
    out_json="",
    per_position=False,
    **{key: source[key] for key, source, _ in SHARED_KEYS},
)
HELP = dict(
    out_dir="checkpoint directory (out_dir/ckpt.pt), read when init_from='resume'",
    init_from="'resume' (our checkpoint) | a Hugging Face GPT-2 name (gpt2, gpt2-medium, ...) | a local HF directory",
    split="train | val | test",
    protocol="strided | blocks | casino (the paper's sampled measurement; not perplexity)",
    stride="tokens between window starts of the strided protocol (1..L)",
    block_size="context length L in tokens; 0 = the model's block size",
    fraction="size of the range: ceil(fraction*N/L) blocks of L tokens (0 < fraction <= 1)",
    offset="start of the range: block ceil(offset*N/L) of the split (0 <= offset < 1)",
    batch_size="windows evaluated together",
    attention="'' keeps the model's attention; a registered name swaps it in (see attention.registered())",
    temperature="sampling temperature of the casino protocol",
    seed="seed of the casino protocol's token sampling",
    out_json="result file; '' = <out_dir, or results/eval_ppl for a Hugging Face model>/eval_<split>_<protocol>_<attention>.json (its folder's manifest.json records the command)",
    per_position="blocks/casino: also store the mean NLL at each position of the block",
    **{key: help[key] for key, _, help in SHARED_KEYS},
)
PROTOCOLS = ("strided", "blocks", "casino")


def load_model(cfg):
    """Our checkpoint (init_from="resume") or a Hugging Face GPT-2, in eval mode, with the
    requested attention swapped in: ``load_run(cfg)``'s model."""
    return load_run(cfg)[0]


def load_run(cfg):
    """(model, run_config): the model of ``load_model`` and the configuration it was trained with
    (the checkpoint's ``config``, which names its data set and so its tokenizer; None for a Hugging
    Face GPT-2). sample.py loads through it too. For the casino protocol the attention (the
    requested one, else the model's own with its parameters) is rebuilt with ``exclude_self=True``.

    Raises:
        ConfigError: no checkpoint in out_dir, a damaged checkpoint, a Hugging Face model that
            cannot be loaded (offline, unknown name); unknown attention name or parameter; --attention.<param> without
            --attention; an attention that is not exactly causal (``attention.causal_refusal``);
            casino with an attention that has no ``exclude_self`` parameter or with
            ``exclude_self=False``.
    """
    source = cfg["out_dir"] if cfg["init_from"] == "resume" else cfg["init_from"]
    if cfg["init_from"] == "resume" and not os.path.exists(os.path.join(source, "ckpt.pt")):
        raise configurator.ConfigError(
            f"no checkpoint at {os.path.join(source, 'ckpt.pt')}; train one there (python train.py "
            f"configs/wikitext2_gpt_mini.py --out_dir={source}), point --out_dir at a run's folder, or evaluate a "
            f"Hugging Face GPT-2: --init_from=gpt2 (downloads it from the hub: needs the network) or "
            f"--init_from=<a local folder in Hugging Face format>")
    try:
        model, run_config, meta = checkpoint.load(source)
    except (FileNotFoundError, ValueError) as e:  # a missing file, a damaged checkpoint, not a GPT-2
        raise configurator.ConfigError(str(e)) from None
    except OSError as e:  # transformers: the hub name is unknown or unreachable
        raise configurator.ConfigError(
            f"could not load the Hugging Face model {source!r} ({type(e).__name__}: {str(e).splitlines()[0][:160]}); "
            f"a hub name needs the network, offline pass --init_from=<a local folder in Hugging Face format>") from None
    if meta["task"] != "lm":
        raise configurator.ConfigError(f"{source} holds a task {meta['task']!r} model; eval_ppl.py and sample.py "
                                       f"take language models (task 'lm') and Hugging Face GPT-2")
    if cfg["attention_params"] and not cfg["attention"]:
        raise configurator.ConfigError("--attention.<param> given without --attention=<name>")
    name = cfg["attention"] or model.config.attention
    params = dict(cfg["attention_params"] if cfg["attention"] else model.config.attention_params)
    if cfg["attention"]:
        configurator.check_attention_params(name, params, model.transformer.h[0].attn.context(model.config))
    if cfg["protocol"] == "casino":
        params = casino_params(name, params)
    if cfg["attention"] or cfg["protocol"] == "casino":
        try:  # the GPT refuses an attention that is not exactly causal (attention.causal_refusal)
            model.set_attention(name, params)
        except ValueError as e:
            raise configurator.ConfigError(str(e)) from None
    return model.to(cfg["device"]).eval(), run_config


def casino_params(name, params):
    """``params`` of attention ``name`` with ``exclude_self=True`` (the casino protocol).

    Raises:
        ConfigError: ``name`` has no ``exclude_self`` constructor parameter (the message lists the
            attentions that have one), or params sets ``exclude_self`` to something else.
    """
    accepted = attention.accepted_params(name)
    if "exclude_self" not in accepted:
        able = [n for n in attention.registered() if "exclude_self" in attention.accepted_params(n)]
        raise configurator.ConfigError(
            f"the casino protocol needs self-exclusion, but attention '{name}' has no exclude_self "
            f"parameter; attentions that have one: {', '.join(able)}")
    if params.get("exclude_self", True) is not True:
        raise configurator.ConfigError(
            f"the casino protocol always uses exclude_self=True; got --attention.exclude_self={params['exclude_self']!r}")
    return {**params, "exclude_self": True}


def token_range(n_tokens, L, fraction, offset):
    """(start, end) of the evaluated range of a split of ``n_tokens`` tokens: the range starts at
    ceil(offset·n/L)·L and holds ceil(fraction·n/L) blocks of L tokens, clipped to the split
    (the rule of the authors' inference_bench.py).

    Raises:
        ConfigError: fraction not in (0, 1], offset not in [0, 1), or an empty range.
    """
    if not (0.0 < fraction <= 1.0 and 0.0 <= offset < 1.0):
        raise configurator.ConfigError(f"need 0 < fraction <= 1 and 0 <= offset < 1; got fraction={fraction}, offset={offset}")
    start = math.ceil(offset * n_tokens / L) * L
    end = min(n_tokens, start + math.ceil(fraction * n_tokens / L) * L)
    if end - start < 2:
        raise configurator.ConfigError(f"offset={offset} leaves {max(0, end - start)} token(s) of the {n_tokens} "
                                       f"in the split at L={L}; nothing to score")
    return start, end


def load_tokens(cfg, L):
    """The evaluated range of the split (``token_range``) as (int64 numpy array, range start,
    number of tokens of the split).

    Raises:
        ConfigError: unknown split, data unavailable (the message says how to supply it), bad
            fraction / offset.
    """
    split = {"valid": "val", "validation": "val"}.get(cfg["split"], cfg["split"])
    try:
        data = wt2.load_split(split, cfg["dataset_config"], cfg["data_source_dir"] or None)
    except (DataError, ValueError) as e:  # missing, malformed or mismatched data; an unknown split
        raise configurator.ConfigError(str(e)) from None
    start, end = token_range(len(data), L, cfg["fraction"], cfg["offset"])
    return np.asarray(data[start:end], dtype=np.int64), start, len(data)


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


def sampled_nll(logits, temperature, generator):
    """The casino score at each position: sample a token from softmax(logits / temperature) and
    return its negative log-probability under that tempered distribution.

    Args:
        logits: (B, T, V) float. temperature: > 0. generator: CPU torch.Generator (sampling is
            done on the CPU so that a seed gives the same tokens on every device).

    Returns:
        (nll (B, T), entropy (B, T), sampled ids (B, T) int64), nats.
    """
    logp = F.log_softmax(logits / temperature, dim=-1)
    probs = logp.exp()
    sampled = torch.multinomial(probs.reshape(-1, probs.shape[-1]).cpu(), 1, generator=generator)
    sampled = sampled.view(logits.shape[:-1]).to(logits.device)
    nll = -logp.gather(-1, sampled.unsqueeze(-1)).squeeze(-1)
    entropy = -(probs * logp).sum(-1)
    return nll, entropy, sampled


@torch.no_grad()
def score(model, tokens, cfg, L):
    """Score the token array under ``cfg["protocol"]``, batching windows of equal length.

    Returns a dict: ``nll_sum`` (nats; for casino: of the sampled tokens), ``entropy_sum``
    (casino: sum of tempered entropies, else 0), ``count`` (scored tokens), and
    ``position_nll`` / ``position_entropy`` / ``position_count``: numpy arrays of length L - 1
    whose entry p sums over the tokens predicted at block position p, i.e. with p + 1 tokens
    of context (filled for blocks / casino only).
    """
    stride = L if cfg["protocol"] in ("blocks", "casino") else cfg["stride"]
    if stride > L:
        raise configurator.ConfigError(f"stride must be in [1, L={L}] (the context length); got {stride}")
    wins = windows(len(tokens), L, stride)
    gen = torch.Generator().manual_seed(cfg["seed"])
    out = dict(nll_sum=0.0, entropy_sum=0.0, count=0, position_nll=np.zeros(L - 1),
               position_entropy=np.zeros(L - 1), position_count=np.zeros(L - 1, dtype=np.int64))
    t0 = time.time()
    desc = f"{cfg['protocol']} L={L}"
    bar = (tqdm(total=len(wins), unit="window", desc=desc, file=sys.stderr) if sys.stderr.isatty()
           else ProgressLines(len(wins), desc, sys.stderr))  # a log file gets a line every few percent
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
        keep = torch.zeros(x.shape[0], length - 1, dtype=torch.bool, device=x.device)
        for row, (b, _, first) in enumerate(group):
            keep[row, max(0, first - b - 1):] = True
        if cfg["protocol"] == "casino":
            token_nll, entropy, _ = sampled_nll(logits, cfg["temperature"], gen)
            entropy = entropy.masked_fill(~keep, 0.0)
            out["entropy_sum"] += entropy.sum().item()
            out["position_entropy"][:length - 1] += entropy.sum(0).double().cpu().numpy()
        else:
            token_nll = F.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")
        token_nll = token_nll.masked_fill(~keep, 0.0)
        out["nll_sum"] += token_nll.sum().item()
        out["count"] += int(keep.sum())
        if stride == L:
            out["position_nll"][:length - 1] += token_nll.sum(0).double().cpu().numpy()
            out["position_count"][:length - 1] += keep.sum(0).cpu().numpy()
        bar.set_postfix_str(f"{out['count'] / max(time.time() - t0, 1e-9):,.0f} tokens/s", refresh=False)
        bar.update(len(group))
    bar.close()
    return out


class ProgressLines:
    """The progress of ``score`` when stderr is not a terminal (a log file, a pipe), where tqdm's
    bar would print nothing: a line ``<desc>: 35% (700/2,000 windows), <postfix>, elapsed 4m10s, ETA
    7m45s`` each time another ``every`` of the ``total`` is done (tqdm's ``update``,
    ``set_postfix_str`` and ``close``)."""

    def __init__(self, total, desc, file, every=0.05):
        self.total, self.desc, self.file, self.every = total, desc, file, every
        self.done, self.postfix, self.next, self.start = 0, "", every, time.time()

    def set_postfix_str(self, text, refresh=True):
        self.postfix = text

    def update(self, n):
        self.done += n
        fraction = self.done / max(self.total, 1)
        if fraction + 1e-12 < self.next and self.done < self.total:
            return
        self.next = (math.floor(fraction / self.every + 1e-9) + 1) * self.every
        elapsed = time.time() - self.start
        left = elapsed / fraction * (1 - fraction) if fraction > 0 else 0.0
        postfix = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {100 * fraction:.0f}% ({self.done:,}/{self.total:,} windows){postfix}, elapsed "
              f"{T.format_duration(elapsed)}, ETA {T.format_duration(left)}", file=self.file, flush=True)

    def close(self):
        pass


def evaluate(cfg):
    """Run one evaluation described by ``cfg`` (see DEFAULTS / HELP); returns the result dict.

    Raises:
        ConfigError: unknown protocol, block_size above the model's, per_position with the
            strided protocol, and the errors of ``load_model`` / ``load_tokens``.
    """
    if cfg["protocol"] not in PROTOCOLS:
        raise configurator.ConfigError(f"unknown protocol {cfg['protocol']!r}; allowed: {', '.join(PROTOCOLS)}")
    if cfg["per_position"] and cfg["protocol"] == "strided":
        raise configurator.ConfigError("per_position needs protocol=blocks or casino (positions of a block)")
    if cfg["temperature"] <= 0:
        raise configurator.ConfigError(f"temperature must be > 0; got {cfg['temperature']}")
    for key in ("batch_size", "stride"):
        if cfg[key] < 1:
            raise configurator.ConfigError(f"{key} must be at least 1; got {cfg[key]}")
    if cfg["block_size"] < 0:
        raise configurator.ConfigError(f"block_size must be >= 0 (0 = the model's); got {cfg['block_size']}")
    configurator.check_device(cfg["device"])
    model = load_model(cfg)
    L = cfg["block_size"] or model.config.block_size
    if not 2 <= L <= model.config.block_size:
        raise configurator.ConfigError(f"block_size must be in [2, {model.config.block_size}] (the model's); got {L}")
    for module in model.attention_modules():
        module.reset_stats()
    tokens, start, n_split = load_tokens(cfg, L)
    t0 = time.time()
    s = score(model, tokens, cfg, L)
    seconds = time.time() - t0
    stats = {}
    for module in model.attention_modules():
        for key, value in module.stats().items():
            stats[key] = stats.get(key, 0) + value
    casino = cfg["protocol"] == "casino"
    count, n_range = s["count"], len(tokens)
    mean_nll = s["nll_sum"] / count
    result = {
        "metric": "casino" if casino else "perplexity",
        "value": math.exp(s["nll_sum"] / (n_range if casino else count)),
        "value_denominator": "range_tokens" if casino else "tokens_scored",
        "mean_nll": mean_nll, "nll_sum": s["nll_sum"], "tokens_scored": count,
        "seconds": seconds, "tokens_per_second": count / seconds,
        "protocol": cfg["protocol"], "stride": cfg["stride"] if cfg["protocol"] == "strided" else L,
        "context_length": L, "split": cfg["split"], "dataset_config": cfg["dataset_config"],
        "fraction": cfg["fraction"], "offset": cfg["offset"],
        "range_rule": "start ceil(offset*N/L)*L, ceil(fraction*N/L) blocks of L, clipped to the split",
        "range_start": start, "range_tokens": n_range, "split_tokens": n_split,
        "model": cfg["out_dir"] if cfg["init_from"] == "resume" else cfg["init_from"],
        "model_block_size": model.config.block_size,
        "attention": model.config.attention, "attention_params": model.config.attention_params,
        "attention_stats": stats, "seed": cfg["seed"], "torch": torch.__version__,
    }
    if casino:
        result.update(temperature=cfg["temperature"],
                      casino_per_scored_token=math.exp(mean_nll),
                      casino_expected=math.exp(s["entropy_sum"] / n_range),
                      casino_expected_per_scored_token=math.exp(s["entropy_sum"] / count))
    if cfg["per_position"]:
        n = s["position_count"]
        per = {"context_length": list(range(1, L)), "count": n.tolist(),
               "mean_nll": (s["position_nll"] / np.maximum(n, 1)).tolist()}
        if casino:
            per["mean_entropy"] = (s["position_entropy"] / np.maximum(n, 1)).tolist()
        result["per_position"] = per
    return result


def main(argv):
    """Parse ``argv`` (see HELP), evaluate, print a summary and write the JSON; returns the result dict."""
    torch.set_flush_denormal(True)
    argv, _ = configurator.import_files(argv)  # a user's attention (--import=FILE), for --attention=NAME
    cfg = configurator.parse(DEFAULTS, argv, help=HELP)
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])
    torch.manual_seed(cfg["seed"])
    commit = provenance.git_commit()  # the code that makes the result, not code edited during a long run
    result = evaluate(cfg)
    if result["metric"] == "casino":
        label = "casino pseudo-perplexity (NOT perplexity: sampled tokens at T=%.2f)" % cfg["temperature"]
    else:
        label = "perplexity"
    print(f"{label}: {result['value']:.3f}  mean NLL {result['mean_nll']:.4f} nats/scored token  "
          f"tokens scored {result['tokens_scored']:,} of {result['range_tokens']:,} from {result['range_start']:,}  "
          f"time {result['seconds']:.1f}s  ({result['protocol']}, L={result['context_length']}, "
          f"stride={result['stride']}, attention={result['attention']} {result['attention_params']})")
    out_json = cfg["out_json"] or os.path.join(
        cfg["out_dir"] if cfg["init_from"] == "resume" else os.path.join("results", "eval_ppl"),
        f"eval_{cfg['split']}_{cfg['protocol']}_{result['attention']}.json")
    write_json(out_json, result, indent=2)
    provenance.record(os.path.splitext(out_json)[0], commit=commit, argv=[os.path.abspath(__file__), *argv])
    print(f"wrote {out_json}")
    return result


if __name__ == "__main__":
    configurator.run_cli(main)
