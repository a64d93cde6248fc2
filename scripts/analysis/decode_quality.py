"""Quality at decode (issue 59 item 5, the question of "High Attention Scores and Where to Find
Them"): how often a swapped-in attention picks exact attention's next token, and how far its
next-token distribution is from exact's, along exact attention's own greedy continuations.

    python -m scripts.analysis.decode_quality --out_dir=out/wikitext2_gpt_mini \\
        --methods="tree:E=0.2,tree:E=0.5,longformer:window=32" --samplers=all
    python -m scripts.analysis.decode_quality --out_dir=<run> --prompts=100 --prompt_len=256 --steps=64 --seed=0
    python -m scripts.analysis.decode_quality --help

Protocol. The model is loaded as eval_ppl.py and sample.py load it (``eval_ppl.load_run``, once per
method: the same sources, the same swap and the same refusals, e.g. of an attention that is not
exactly causal); "exact" is the run's own attention (softmax for the GPT mini). --prompts windows of
--prompt_len tokens start at seeded offsets of the WikiText-2 --split (``data.sample_windows``
with --seed, over the split as eval_ppl.py reads it). Exact attention continues each prompt
greedily by --steps tokens (``GPT.generate``, temperature 0, over the tokenizer's ids:
``sample.tokenizer_for``). Each method is then teacher-forced on the same prompt + continuation:
one causal forward over the --prompt_len + --steps - 1 tokens gives all --steps next-token
distributions at once (positions prompt_len - 1 ...). That equals decoding the continuation a token
at a time with the method's own decode path, because every decode step equals the last row of the
method's causal forward on the prefix (the decode contract, tested for every decode-capable
attention in tests/attention/test_decode.py, at the attention and at the model level: each decode
step's logits equal the whole forward's), and it also serves a method without a decode path.

Per prompt and method: ``agreement``, the fraction of the --steps steps at which the method's
argmax is exact attention's greedy token, and ``kl``, the mean over the steps of
KL(exact || method) = sum_v p_exact(v) (log p_exact(v) - log p_method(v)) in nats, both
distributions from the teacher-forced forwards (float64 log-softmax over the tokenizer's ids).
Across prompts: mean, median, min and max, and a bootstrap 95% interval of the mean (--bootstrap
resamples of the prompts, seeded). ``reference_agreement``: the same agreement of exact
attention's teacher-forced forward with its own greedy tokens (1.0 up to near-ties between the
decode path's and the forward's rounding), a check of the protocol.

Methods: --methods, the benchmark's method syntax (``name:key=value,...``; an item with "=" and no
":" continues the previous method, scripts/bench/methods.py), e.g. ``tree:E=0.2`` (tree
attention's E: n_terms = ceil(l^E)) or ``longformer:window=32`` (a 32-key sliding window, the
cheap baseline). --samplers: a comma list of tree attention's samplers
(``attention.tree.samplers.SAMPLERS``, or ``all``); every tree method that does not set
``sampler`` is measured once per sampler ("" = tree's default sampler only). Tree attention's
random draws hash the batch index, so its numbers depend on --batch_size (recorded).

Writes <results_dir>/<name>/quality.json (settings, the model run and its manifest's ``train``
entry, per method its summary and per-prompt values) and quality.csv (one row per method), each
atomically, then the folder's manifest entry ``quality`` (``provenance.record``, with the model
run's folder and commit). --name defaults to the run folder's name.

Bad input (no checkpoint, an unknown method or parameter, a prompt and continuation longer than
learned positions allow, no WikiText-2 data) is one line, ``error: ...``, exit status 2.
"""
import csv
import os
import statistics

import numpy as np
import torch
import torch.nn.functional as F

import configurator
import data
import eval_ppl
import provenance
import sample
from scripts.bench.methods import parse_method, split_methods

SHARED_KEYS = ("device", "num_threads", "dataset_config", "data_source_dir")  # as eval_ppl.py declares them
OWN_KEYS = {  # train.py key -> why this script declares its own (the convention of eval_ppl.py and sample.py)
    "out_dir": "the run read (its ckpt.pt), not written",
    "init_from": "our run ('resume') or a Hugging Face GPT-2, never a new model",
    "seed": "the prompts' offsets and the bootstrap, not the initialisation",
    "batch_size": "prompts per forward pass",
}
DEFAULTS = dict(
    out_dir=eval_ppl.DEFAULTS["out_dir"],
    init_from="resume",
    split="test",
    prompts=100,
    prompt_len=256,
    steps=64,
    seed=0,
    methods="tree:E=0.2,tree:E=0.5,longformer:window=32",
    samplers="",
    batch_size=5,
    bootstrap=1000,
    name="",
    results_dir=os.path.join("results", "decode_quality"),
    **{key: eval_ppl.DEFAULTS[key] for key in SHARED_KEYS},
)
HELP = dict(
    out_dir="the trained run (out_dir/ckpt.pt), read when init_from='resume'",
    init_from="'resume' (our run in out_dir) | a Hugging Face GPT-2 name | a local HF directory",
    split="WikiText-2 split of the prompts: train | val | test",
    prompts="number of prompts",
    prompt_len="tokens per prompt",
    steps="tokens of exact attention's greedy continuation, teacher-forced for every method",
    seed="seed of the prompts' offsets and of the bootstrap",
    methods="comma list of swapped-in attentions, name:key=value,... (scripts/bench/methods.py's syntax)",
    samplers="tree attention's samplers (comma list or 'all'): each tree method without a sampler is run once "
             "per sampler; '' = tree's default",
    batch_size="prompts per forward (tree attention's draws depend on the batch index)",
    bootstrap="bootstrap resamples of the prompts for the 95% interval of a mean (0 = none)",
    name="result folder name under results_dir ('' = the run folder's name)",
    results_dir="where <name>/quality.json goes",
    **{key: eval_ppl.HELP[key] for key in SHARED_KEYS},
)
FIELDS = ["method", "name", "params", "prompts", "steps", "agreement_mean", "agreement_median", "agreement_min",
          "agreement_max", "agreement_ci_low", "agreement_ci_high", "kl_mean", "kl_median", "kl_min", "kl_max",
          "kl_ci_low", "kl_ci_high"]
TREE = "tree"


# ----------------------------------------------------------------------------------------------
# methods


def expand_methods(methods, samplers):
    """[(label, attention name, params)] of ``methods`` (a comma list in the benchmark's method
    syntax), each tree method without ``sampler`` repeated for every sampler of ``samplers`` (a
    comma list or "all" = ``attention.tree.samplers.SAMPLERS``; "" = none added).

    Raises:
        ConfigError: an empty list, a malformed or unknown method or parameter, an unknown sampler
            (the message lists them), --samplers without a tree method.
    """
    from attention.tree.samplers import SAMPLERS

    try:
        parsed = [parse_method(text) for text in split_methods(methods)]
    except ValueError as e:
        raise configurator.ConfigError(f"--methods: {e}") from None
    if not parsed or any(m.kind != "registry" for m in parsed):
        raise configurator.ConfigError(f"--methods must name registered attentions; got {methods!r}")
    chosen = list(SAMPLERS) if samplers.strip() == "all" else [s.strip() for s in samplers.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SAMPLERS]
    if unknown:
        raise configurator.ConfigError(f"--samplers: unknown {', '.join(unknown)}; tree attention's samplers: "
                                       f"{', '.join(SAMPLERS)} (or all)")
    if chosen and not any(m.name == TREE for m in parsed):
        raise configurator.ConfigError("--samplers applies to tree methods, and --methods names none")
    out = []
    for m in parsed:
        if m.name == TREE and chosen and "sampler" not in m.params:
            for s in chosen:
                params = {**m.params, "sampler": s}
                out.append((f"{m.label},sampler={s}" if m.params else f"{m.label}:sampler={s}", m.name, params))
        else:
            out.append((m.label, m.name, dict(m.params)))
    return list({label: (label, name, params) for label, name, params in out}.values())


# ----------------------------------------------------------------------------------------------
# the measurement (the tests call these on tiny models)


@torch.no_grad()
def greedy_continuations(model, prompts, steps, vocab, batch_size):
    """Exact attention's greedy continuations: (N, P + steps) int64, the prompts (N, P) int64 and
    ``steps`` tokens of ``model.generate`` at temperature 0 over the ids below ``vocab``."""
    parts = [model.generate(prompts[i:i + batch_size], steps, temperature=0, vocab_size=vocab)
             for i in range(0, len(prompts), batch_size)]
    return torch.cat(parts)


@torch.no_grad()
def next_token_logprobs(model, sequences, prompt_len, vocab):
    """(B, S, vocab) float64 log-probabilities of the next token at the S = L - prompt_len steps of
    ``sequences`` (B, L) int64, teacher-forced: one causal forward over the first L - 1 tokens, the
    rows of positions prompt_len - 1 ... L - 2, logits restricted to the ids below ``vocab``."""
    logits = model(sequences[:, :-1])[0][:, prompt_len - 1:, :vocab]
    return F.log_softmax(logits.double(), dim=-1)


@torch.no_grad()
def compare(reference, models, sequences, prompt_len, vocab, batch_size):
    """Per-prompt agreement and KL of every model against the reference on teacher-forced sequences.

    Args:
        reference (GPT): exact attention's model; models (dict): label -> GPT (another attention
            swapped in), all in evaluation mode on one device.
        sequences (torch.Tensor): (N, P + S) int64, prompts followed by the reference's greedy
            continuation (``greedy_continuations``); prompt_len (int): P; vocab (int): ids scored.
        batch_size (int): sequences per forward.

    Returns:
        {label: {"agreement": (N,) float numpy, "kl": (N,) float numpy}} (agreement: fraction of
        the S steps whose argmax is the continuation's token; kl: mean over steps of
        KL(reference || model) in nats), plus the key None for the reference's own agreement.
    """
    out = {label: {"agreement": [], "kl": []} for label in [None, *models]}
    for i in range(0, len(sequences), batch_size):
        batch = sequences[i:i + batch_size]
        target = batch[:, prompt_len:]
        exact = next_token_logprobs(reference, batch, prompt_len, vocab)
        out[None]["agreement"].append((exact.argmax(-1) == target).double().mean(-1))
        out[None]["kl"].append(torch.zeros(len(batch), dtype=torch.float64))
        for label, model in models.items():
            ours = next_token_logprobs(model, batch, prompt_len, vocab)
            out[label]["agreement"].append((ours.argmax(-1) == target).double().mean(-1))
            # KL >= 0; a sum that rounds below it (identical distributions) counts 0
            out[label]["kl"].append((exact.exp() * (exact - ours)).sum(-1).clamp_min(0).mean(-1))
    return {label: {k: torch.cat(v).cpu().numpy() for k, v in d.items()} for label, d in out.items()}


def summary(values, resamples, seed):
    """mean, median, min, max of per-prompt ``values`` and the bootstrap 95% interval of the mean
    (``resamples`` resamples of the prompts with replacement, numpy seeded with ``seed``; None
    with resamples 0)."""
    values = np.asarray(values, dtype=np.float64)
    low = high = None
    if resamples:
        rng = np.random.default_rng(seed)
        means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
        low, high = (float(x) for x in np.percentile(means, [2.5, 97.5]))
    return {"mean": float(values.mean()), "median": float(statistics.median(values.tolist())),
            "min": float(values.min()), "max": float(values.max()), "ci_low": low, "ci_high": high}


# ----------------------------------------------------------------------------------------------
# the command


def loader_cfg(cfg, name="", params=None):
    """eval_ppl.load_run's settings for this run with attention ``name`` ("" = the run's own)."""
    return dict(eval_ppl.DEFAULTS, out_dir=cfg["out_dir"], init_from=cfg["init_from"], device=cfg["device"],
                attention=name, attention_params=dict(params or {}))


def check_settings(cfg):
    """Raises ConfigError on a setting outside its range."""
    for key, low in (("prompts", 1), ("prompt_len", 1), ("steps", 1), ("batch_size", 1), ("bootstrap", 0),
                     ("num_threads", 0)):
        if cfg[key] < low:
            raise configurator.ConfigError(f"{key} must be >= {low}; got {cfg[key]}")
    configurator.check_device(cfg["device"])


def prompts_of(cfg):
    """(N, prompt_len) int64 prompts at seeded offsets of the split (``data.sample_windows``).

    Raises:
        ConfigError: no data, or a split shorter than a prompt."""
    tokens, _, _ = eval_ppl.load_tokens(dict(eval_ppl.DEFAULTS, split=cfg["split"], fraction=1.0, offset=0.0,
                                             dataset_config=cfg["dataset_config"],
                                             data_source_dir=cfg["data_source_dir"]), cfg["prompt_len"])
    try:
        windows = data.sample_windows(tokens, cfg["prompts"], cfg["prompt_len"], cfg["seed"],
                                      f"the {cfg['split']} split")
    except ValueError as e:
        raise configurator.ConfigError(str(e)) from None
    return torch.from_numpy(windows).to(cfg["device"])


def model_entry(cfg):
    """The model run as the results name it: its folder (or Hugging Face source), and its manifest's
    ``train`` entry (None when absent)."""
    if cfg["init_from"] != "resume":
        return {"source": cfg["init_from"], "train": None}
    manifest = data.read_manifest(cfg["out_dir"]) or {}
    return {"source": cfg["out_dir"], "train": manifest.get("train")}


def write_outputs(folder, payload, rows, commit, model):
    """quality.json and quality.csv into ``folder`` (atomically), then the manifest entry."""
    def write(tmp):
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)

    os.makedirs(folder, exist_ok=True)
    data.write_json(os.path.join(folder, "quality.json"), payload)
    data.atomic_write(os.path.join(folder, "quality.csv"), write)
    train = model["train"] or {}
    provenance.record(os.path.join(folder, "quality"), commit=commit,
                      extra={"model_run": model["source"], "model_commit": train.get("commit"),
                             "model_trained": train.get("date")})


def main(argv):
    """Parse ``argv`` (see HELP), measure, write the outputs; returns the payload written to
    quality.json."""
    argv, _ = configurator.import_files(argv)  # a user's attention (--import=FILE) for --methods
    cfg = configurator.parse(DEFAULTS, argv, help=HELP)
    check_settings(cfg)
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])
    commit = provenance.git_commit()
    methods = expand_methods(cfg["methods"], cfg["samplers"])
    reference, run_config = eval_ppl.load_run(loader_cfg(cfg))
    if run_config is not None and run_config.get("dataset", "wikitext2") != "wikitext2":
        raise configurator.ConfigError(f"the study reads WikiText-2 prompts; {cfg['out_dir']} was trained on "
                                       f"{run_config['dataset']!r}")
    models = {label: eval_ppl.load_run(loader_cfg(cfg, name, params))[0] for label, name, params in methods}
    total = cfg["prompt_len"] + cfg["steps"]
    if reference.transformer.wpe is not None and total > reference.config.block_size:
        raise configurator.ConfigError(f"prompt_len + steps = {total} is more than the model's block_size "
                                       f"{reference.config.block_size} (learned positions)")
    vocab = min(reference.config.vocab_size, sample.tokenizer_for(run_config, reference).n_vocab)
    prompts = prompts_of(cfg)
    sequences = greedy_continuations(reference, prompts, cfg["steps"], vocab, cfg["batch_size"])
    per_prompt = compare(reference, models, sequences, cfg["prompt_len"], vocab, cfg["batch_size"])
    rows, results = [], []
    for label, name, params in methods:
        values = per_prompt[label]
        agreement = summary(values["agreement"], cfg["bootstrap"], cfg["seed"])
        kl = summary(values["kl"], cfg["bootstrap"], cfg["seed"])
        results.append({"method": label, "name": name, "params": params, "agreement": agreement, "kl": kl,
                        "per_prompt": {k: v.tolist() for k, v in values.items()}})
        rows.append({"method": label, "name": name, "params": repr(params), "prompts": cfg["prompts"],
                     "steps": cfg["steps"], **{f"agreement_{k}": v for k, v in agreement.items()},
                     **{f"kl_{k}": v for k, v in kl.items()}})
        print(f"{label:40s} agreement {agreement['mean']:.3f} (median {agreement['median']:.3f}, "
              f"{agreement['min']:.3f}-{agreement['max']:.3f})  KL {kl['mean']:.4f} nats", flush=True)
    model = model_entry(cfg)
    name = cfg["name"] or os.path.basename(os.path.normpath(model["source"]))
    payload = {
        "settings": {k: v for k, v in cfg.items() if k != "methods"} | {"methods": [m[0] for m in methods],
                                                                        "vocab": vocab},
        "model": model,
        "reference": {"attention": reference.config.attention, "params": reference.config.attention_params,
                      "agreement_with_own_greedy": summary(per_prompt[None]["agreement"], 0, cfg["seed"])},
        "protocol": ("exact attention's greedy continuation (GPT.generate, temperature 0) of prompts at seeded "
                     "offsets; every method teacher-forced on it, one causal forward; agreement = argmax equals "
                     "exact's token; kl = mean over steps of KL(exact || method), nats"),
        "methods": results,
    }
    folder = os.path.join(cfg["results_dir"], name)
    write_outputs(folder, payload, rows, commit, model)
    print(f"wrote {folder}/quality.json, quality.csv")
    return payload


if __name__ == "__main__":
    configurator.run_cli(main)
