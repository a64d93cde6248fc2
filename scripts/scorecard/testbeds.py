"""The scorecard's testbeds (a library: ``python -m scripts.scorecard`` runs them; issue 45): what an
attention is measured on, each with one definition of its budget and protocol.

- ``recall``: multi-query associative recall (tasks/recall.py, docs/recall.md; the task of Zoology,
  Arora et al. 2023, "Zoology: Measuring and Improving Recall in Efficient Language Models", Figure
  2), the model of ``configs/recall/mqar.py`` (no token shift; warmup, gradient clipping, up to
  3,000 steps stopped once validation accuracy reaches 0.995) with the attention's layer (its
  ``configs/recall/attention/<name>.py`` where one exists, as ``scripts/sweeps/recall.sh``).
  Full tier, at 256/16 width 64 and at 64/4 width 64 separately: the rate picked on seed 0
  (``RECALL_SELECTION_SEED``) among ``RECALL_RATES``: the one whose run stopped earliest at 0.995,
  else the best validation accuracy (ties: the smaller rate; ``pick_rate``),
  then reported on ``RECALL_SEEDS`` (1-3), which play no part in the pick; the softmax baseline also
  on ``RECALL_CHECK_SEEDS`` (4, 5), the protocol's check that the baseline solves the task in every
  seed. Quick tier: 64/4 width 64, seed 0, the config's rate. Metric: test accuracy, a seed
  "solved" at ``RECALL_SOLVED`` or more. Causal methods that train only. (Protocol 1, the cards
  before ``RECALL_VERSION`` 2: 1,500 steps without warmup or clipping, the rate picked at 256/16
  and reused at 64/4, seeds 0-2 reported.)
- ``wikitext2``: the mini GPT on WikiText-2 (``configs/wikitext2_gpt_mini.py``, the softmax
  baseline's budget: 650 steps of 4,096 tokens, seed 1337) with the attention's layer, as
  ``scripts/sweeps/gpt_mini.sh``; then eval_ppl.py's test perplexity over blocks of 1,024 tokens
  (``WIKITEXT2_EVAL``); the softmax baseline also on ``WIKITEXT2_BASELINE_SEEDS``, so that the
  column's reference has a spread. Metrics: test perplexity, training tokens per second, training
  time. Quick
  tier: the same model after ``WIKITEXT2_QUICK_ITERS`` steps, evaluated on the first quarter of the
  test split (``WIKITEXT2_QUICK_FRACTION``). Causal methods that train only.
- ``lra``: Long Range Arena Text (tasks/classify.py, docs/lra.md; Tay et al. 2021, "Long Range
  Arena: A Benchmark for Efficient Transformers") with the CPU model of ``configs/lra/text_cpu.py``,
  the attention's layer and its LRA override (``configs/lra/<name>/text_cpu.py``), as
  ``scripts/sweeps/lra.sh``; full tier: the 8,000-step schedule of docs/lra.md's Text runs, quick:
  300 steps. Metric: test accuracy (the best validation accuracy's weights), steps per second.
  Trainable methods (the task is not causal).
- ``swap``: an inference-time approximation (an attention that does not train, e.g. tree
  attention) swapped into a trained softmax mini GPT (``configs/wikitext2_gpt_mini.py``; quick tier:
  ``configs/wikitext2_gpt_tiny.py`` trained for 500 steps), trained once per protocol and reused: eval_ppl.py's test
  perplexity with the attention (``--attention=``) beside the same model's with softmax.
- ``speed``: one call of the attention on (1, 8, T, 64) float32 inputs against SDPA
  (``torch.nn.functional.scaled_dot_product_attention``) in the same process, causal and not,
  forward and forward + backward (forward only for an inference-only method): after one warm-up
  call of each, ``SPEED_PAIRS`` pairs of samples, the method's then SDPA's (A B A B ...;
  ``interleaved_ratios``), each sample timed as the attention benchmark times a call
  (``scripts.bench.common``: one call, or a loop of calls lasting ``MIN_SAMPLE_SECONDS`` for a
  short one); the cell is the median of the per-pair ratios and their interquartile range
  (``ratio_summary``), so a drift of the machine's speed during the cell moves both samples of a
  pair alike. Softmax (which calls SDPA) is the control: its cells measure the noise floor. For the
  leaderboard's call (causal forward + backward where the method has it) also the peak memory one
  call adds on top of its inputs, SDPA's and the method's, each in a fresh process
  (``scripts.bench.methods.peak_memory``; ``MEMORY_VERSION``). Full tier: T = 1024, 4096, 16384;
  quick: 1024, 4096. Metrics: time / SDPA's time, peak memory / SDPA's. (Version 1, the cells
  before ``SPEED_VERSION`` 2: the median of repeated calls of the method, then SDPA's, not
  interleaved, no spread.)

A cell's protocol (``protocol``) is everything that decides its result: for a training cell the
fully resolved configuration of train.py (every model, attention and training key after defaults,
the attention's parameters with the method's own defaults filled in; paths, logging and thread
counts left out: ``NOT_PROTOCOL``) plus the testbed's version; for a speed cell the call's sizes,
the method and the CPU. A cell whose protocol has a result (``results/scorecard/cells.jsonl``) is
not run again; a training run under ``results/`` whose protocol matches (the testbed's ``ARCHIVES``)
and that started after its attention's last change of a default (``Attention.defaults_date``: a
run of fastmax before normalization="paper" became the default reads the same) is used, not
repeated. Raise a
testbed's version when its protocol changes in a way the configuration does not show.
"""
import hashlib
import json
import os
import platform
import statistics
import sys

import attention
from scripts.bench.common import ROOT

RECALL_VERSION = 2  # 2: warmup, clipping, 3,000 steps stopped at 0.995, the rate picked on seed 0 and reported on 1-3 (issue 57)
WIKITEXT2_VERSION = 1
SPEED_VERSION = 2  # 2: the method and SDPA interleaved in SPEED_PAIRS pairs, median ratio and its quartiles (issue 57)
MEMORY_VERSION = 1  # the peak-memory cells of the speed testbed (unchanged by SPEED_VERSION 2)
SPEED_PAIRS = 7  # pairs (method, SDPA) per speed cell after the warm-up
RECALL_CONFIG = "configs/recall/mqar.py"
RECALL_REFERENCE = (256, 16, 64)  # length, pairs, width
RECALL_SMALL = (64, 4, 64)
RECALL_RATES = (1e-3, 3e-3, 1e-2)
RECALL_SELECTION_SEED = 0  # picks the rate of each cell; never reported
RECALL_SEEDS = (1, 2, 3)  # reported at the picked rate
RECALL_CHECK_SEEDS = (4, 5)  # the softmax baseline only: the protocol's check
RECALL_SOLVED = 0.99  # a seed "solves" a cell at this test accuracy or more
# Examples per split of the reference cell; a shorter cell gets proportionally more sequences, so
# that every cell trains on as many tokens (and key-value pairs) and tests as many queries. At
# 64/4 on 20,000 training sequences softmax fit its training set (train accuracy 0.997) and stopped
# near test accuracy 0.99 in seeds 1-3 (0.992 / 0.990 / 0.988), inside the 4,000 test queries'
# sampling noise of the threshold; on 80,000 it reached the 0.995 stop in each (docs/recall.md).
RECALL_REFERENCE_SIZES = {"train": 20000, "val": 1000, "test": 1000}
# folders of archived recall runs made with the current defaults (moved out when a default changes)
RECALL_ARCHIVES = ("results/recall/noshift_256_16", "results/recall/protocol_v2", "results/scorecard/runs")
WIKITEXT2_CONFIG = "configs/wikitext2_gpt_mini.py"
WIKITEXT2_EVAL = ("--split=test", "--protocol=blocks")
# The quick tier scores the first quarter of the test split (about 74k tokens): over the whole split
# the evaluation of the slowest attention (fastmax p = 2) took 200 of the tier's 20 minutes.
WIKITEXT2_QUICK_FRACTION = 0.25
WIKITEXT2_QUICK_ITERS = 100
WIKITEXT2_ARCHIVES = ("results/gpt_mini_baselines", "results/scorecard/runs")
WIKITEXT2_BASELINE_SEEDS = (1, 2)  # the softmax baseline's seeds besides the config's (1337), full tier
LRA_VERSION = 1
LRA_CONFIG = "configs/lra/text_cpu.py"
LRA_ITERS = {"quick": 300, "full": 8000}
LRA_ARCHIVES = ("results/lra/text_8k", "results/scorecard/runs")
SWAP_VERSION = 1
SWAP_BASE = {"quick": ["configs/wikitext2_gpt_tiny.py", "--max_iters=500", "--lr_decay_iters=500", "--eval_interval=500"],
             "full": [WIKITEXT2_CONFIG]}
SPEED_T = {"quick": (1024, 4096), "full": (1024, 4096, 16384)}
SPEED_D, SPEED_HEADS = 64, 8
TIERS = ("quick", "full")
TESTBEDS = ("recall", "wikitext2", "lra", "swap", "speed")
# train.py keys that say where files go, how much is printed or how fast it runs, not what is trained
NOT_PROTOCOL = ("out_dir", "num_threads", "device", "wandb_log", "wandb_project", "wandb_run_name", "wandb_mode",
                "log_interval", "eval_only", "init_from", "always_save_checkpoint", "recall_dir", "data_source_dir",
                "data_source_file", "lra_dir", "bert_vocab", "compile")


# The data of the published protocol, as the task's data summary gives them (``load_data``'s
# "manifest": examples for LRA Text, GPT-2 tokens for WikiText-2). A full-tier cell runs and an
# archived run is taken only on these: a small copy (the tests' IMDB subset of 200 reviews, say)
# trains without an error and gives a number that would read like the protocol's.
FULL_DATA = {
    "lra": ({"train_size": 22_500, "val_size": 2_500, "test_size": 25_000},
            "all of IMDB, 25,000 train and 25,000 test reviews (set IMDB_DIR to the aclImdb tarball or its "
            "folder, or lra_options imdb_source)"),
    "wikitext2": ({"train_size": 2_448_405, "val_size": 258_659, "test_size": 295_877},
                  "WikiText-2 v1 in GPT-2 tokens (set WIKITEXT2_DIR, or --data_source_dir, to the folder of "
                  "wiki.train.tokens, wiki.valid.tokens and wiki.test.tokens)"),
}


class DataNotFull(ValueError):
    """A full-tier training cell's data are not the protocol's (``FULL_DATA``)."""


def data_problem(testbed, summary):
    """None when ``summary`` (a task's data summary, e.g. a run's final_metrics.json ``data``) has
    the sizes of ``FULL_DATA[testbed]`` or the testbed names no data; else one sentence naming
    the sizes found and the data the protocol needs."""
    if testbed not in FULL_DATA:
        return None
    sizes, needed = FULL_DATA[testbed]
    found = {k: (summary or {}).get(k) for k in sizes}
    if found == sizes:
        return None
    shown = ", ".join(f"{k} {v if v is None else format(v, ',')}" for k, v in found.items())
    return (f"{testbed}'s full tier needs {needed}; the prepared data ({(summary or {}).get('source', 'source unknown')}) "
            f"have {shown}")


def prepared_data_problem(testbed, cfg):
    """Prepare the data of a training cell of ``testbed`` as train.py would (the task's
    ``prepare_data``, then ``load_data``'s summary) and return ``data_problem``'s sentence: None
    when they are ``FULL_DATA``'s (or the testbed names no data).

    Raises:
        what the task's prepare_data / load_data raise (configurator.ConfigError, data.DataError).
    """
    import tasks

    if testbed not in FULL_DATA:
        return None
    task = tasks.get(cfg["task"])
    task.prepare_data(cfg)
    return data_problem(testbed, task.load_data(cfg)["manifest"])


class Spec:
    """The attention under test, from the text the user gives (the benchmark's method syntax,
    ``scripts.bench.methods.parse_method``): a registered name with parameters (``fastmax:p=2``),
    the name of a file in ``configs/attention/`` (``fastmax2``) or a config file's path.

    Attributes:
        text (str): as given; label (str): the leaderboard's row name; name (str): the registered
        attention; params (dict): its parameters as given; config (str | None): the config file
        (repository-relative where it is inside the repository).

    Raises:
        ValueError: an unknown attention or parameter, an unreadable config file.
    """

    def __init__(self, text):
        from scripts.bench.methods import parse_method

        self.text = text
        named = os.path.join(ROOT, "configs", "attention", f"{text}.py")
        if text.endswith(".py") or (":" not in text and os.path.exists(named)):
            path = text if text.endswith(".py") else named
            self.config = os.path.relpath(os.path.abspath(path), ROOT) if os.path.abspath(path).startswith(ROOT) \
                else os.path.abspath(path)
            method = parse_method("@" + (path if os.path.isabs(path) else os.path.join(ROOT, path)))
            self.label = os.path.splitext(os.path.basename(path))[0]
        else:
            self.config = None
            method = parse_method(text)
            self.label = text
        if method.kind != "registry":
            raise ValueError(f"{text!r} is not an attention of the registry (the scorecard measures those)")
        self.method = method
        self.name, self.params = method.name, dict(method.params)

    @property
    def cls(self):
        return attention.attention_class(self.name)

    def layers(self, testbed):
        """train.py arguments that select this attention in ``testbed`` ("recall", "lra", ...): its
        config file (for recall the override ``configs/recall/attention/<label>.py`` instead where
        one exists; for LRA Text the override ``configs/lra/<label>/text_cpu.py`` after it, as
        lra.sh layers it) or ``--attention=`` and ``--attention.<param>=`` settings."""
        if testbed == "lra" or self.config is None:
            return self.lra_layers(LRA_CONFIG)
        override = os.path.join("configs", testbed, "attention", os.path.basename(self.config))
        return [override if os.path.exists(os.path.join(ROOT, override)) else self.config]


    def lra_layers(self, task_config):
        """The attention's layers for an LRA task whose config is ``task_config``
        (``configs/lra/<task><size>.py``): its config file, then its override of that task and
        size, ``configs/lra/<label>/<task><size>.py``, where one exists (DenseAttention's depth,
        window and training per task). The one rule of the scorecard and ``scripts/sweeps/lra.sh``."""
        if self.config is None:
            return [f"--attention={self.name}", *(f"--attention.{k}={v!r}" for k, v in self.params.items())]
        override = os.path.join("configs", "lra", self.label, os.path.basename(task_config))
        return [self.config, *([override] if os.path.exists(os.path.join(ROOT, override)) else [])]


def applies(testbed, spec):
    """None if ``testbed`` applies to ``spec``'s attention, else why not (a short phrase)."""
    cls = spec.cls
    if testbed in ("recall", "wikitext2"):
        if cls.causal != "exact":
            return "not exactly causal"
        if not cls.trainable:
            return "inference only"
        return None
    if testbed == "lra":
        return None if cls.trainable else "inference only"
    if testbed == "swap":
        if cls.trainable:
            return "it trains: see its WikiText-2 column"
        if cls.causal != "exact":
            return "not exactly causal"
        return None
    if testbed == "speed":
        return None
    raise ValueError(f"unknown testbed {testbed!r}; known: {', '.join(TESTBEDS)}")


def resolved_config(argv, imports=()):
    """The configuration train.py would run for ``argv`` (config files and --key=value), every key
    after defaults, with the attention's parameters completed by the method's own defaults.

    Raises:
        configurator.ConfigError: what train.py would refuse.
    """
    import configurator
    import training

    configurator.import_files([f"--import={path}" for path in imports])
    training.config_keys()
    cfg = configurator.parse(training.DEFAULTS, list(argv))
    training.follow_max_iters(cfg, list(argv))  # as train.py: --max_iters alone moves lr_decay_iters
    return with_full_params(cfg)


def with_full_params(cfg):
    """``cfg`` (a train.py configuration) with ``attention_params`` completed by the attention's
    defaults (``attention.accepted_params``), so that a default of the method is part of it."""
    out = dict(cfg)
    defaults = {k: v for k, v in attention.accepted_params(cfg["attention"]).items()}
    out["attention_params"] = {**defaults, **cfg["attention_params"]}
    return out


def protocol(cfg, testbed, version, evaluation=()):
    """(key, fields): the protocol of a training cell, a dict of what decides its result (``cfg``
    without ``NOT_PROTOCOL``, plus the testbed, its version and the evaluation's arguments), and
    its key, the first 16 hex digits of the SHA-256 of the fields as sorted JSON."""
    import tasks

    fields = {k: v for k, v in sorted(cfg.items()) if k not in NOT_PROTOCOL}
    for key, entries in getattr(tasks.get(cfg["task"]), "RUN_ONLY_ENTRIES", {}).items():  # e.g. LRA's workers
        fields[key] = {k: v for k, v in fields[key].items() if k not in entries}
    fields["testbed"], fields["testbed_version"] = testbed, version
    if evaluation:
        fields["evaluation"] = list(evaluation)
    return digest(fields), fields


def eval_attention_args(spec):
    """eval_ppl.py arguments that swap ``spec``'s attention into a model (its parameters as the
    method resolves them, a config file's included)."""
    return [f"--attention={spec.name}", *(f"--attention.{k}={v!r}" for k, v in spec.params.items())]


def speed_calls(cls):
    """(causals, modes) the speed testbed measures for an attention class: not causal, and causal where
    the method has a causal form; forward, and forward + backward where it trains."""
    causals = (False,) if cls.causal == "unsupported" else (False, True)
    modes = ("forward", "forward_backward") if cls.trainable else ("forward",)
    return causals, modes


def leaderboard_call(causals, modes):
    """(causal, mode) of the call the leaderboard shows and measures peak memory for, among the calls
    measured (``speed_calls``): causal where the method has it, forward + backward where it trains."""
    return True in causals, "forward_backward" if "forward_backward" in modes else "forward"


def speed_protocol(spec, T, causal, mode, threads, measure="time"):
    """(key, fields) of a speed cell: the call's sizes and mode, the method with its parameters
    completed, the threads and the CPU model (times are comparable on one machine only);
    ``measure``: "time" (the cell's time) or "peak_memory" (its memory cell: a key of its own, so
    either can be measured without the other)."""
    full = {**attention.accepted_params(spec.name), **spec.params}
    fields = {"testbed": "speed", "testbed_version": SPEED_VERSION if measure == "time" else MEMORY_VERSION,
              "attention": spec.name, "attention_params": dict(sorted(full.items())), "T": T, "D": SPEED_D,
              "heads": SPEED_HEADS, "causal": causal, "mode": mode, "threads": threads, "cpu": cpu_model()}
    if measure == "time":
        fields["pairs"] = SPEED_PAIRS
    else:
        fields["measure"] = measure
    return digest(fields), fields


def pick_rate(val_accuracies, rates=RECALL_RATES, stopped_at=None):
    """The rate of ``rates`` picked from its selection runs (lists in the order of ``rates``).

    Runs that reached the early stop (``stopped_at[i]``: the step at which run i stopped at
    ``stop_at``, None where it ran its whole budget) come first, the earliest stop winning: their
    best validation accuracies all lie within a few test queries of each other above the stop
    threshold, so the step at which a rate solved the cell is the stronger signal (issue 57). Among
    runs that did not stop, the best validation accuracy (``val_accuracies``). Ties: the smaller rate.
    """
    stopped_at = stopped_at or [None] * len(rates)
    solved = [i for i in range(len(rates)) if stopped_at[i] is not None]
    if solved:
        best = min(solved, key=lambda i: (stopped_at[i], -val_accuracies[i], rates[i]))
    else:
        best = max(range(len(rates)), key=lambda i: (val_accuracies[i], -rates[i]))
    return rates[best]


def stopped_step(row):
    """The step at which a recall row's run stopped at its ``stop_at`` before its budget, else None
    (a run that ran every step, a protocol without an early stop, or a row without the step)."""
    budget = row.get("budget") or {}
    steps = budget.get("steps_run")
    if not budget.get("stop_at") or steps is None or steps >= budget.get("max_steps", 0):
        return None
    return steps


def interleaved_ratios(first, second, pairs=SPEED_PAIRS):
    """The ratios first / second of ``pairs`` pairs of samples taken in turn, first then second
    (A B A B ...): ``first()`` and ``second()`` each return one sample's seconds (warm-up done). A
    slow spell of a shared machine lands on both samples of a pair, so it moves a pair's ratio
    far less than it moves either time."""
    ratios = []
    for _ in range(pairs):
        a = first()
        ratios.append(a / second())
    return ratios


def ratio_summary(ratios):
    """(median, first quartile, third quartile) of a speed cell's per-pair ratios
    (``statistics.quantiles``, inclusive method: the quartiles lie within the values)."""
    q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return median, q1, q3


def is_baseline(spec):
    """Whether ``spec`` is the softmax baseline (softmax with its default parameters): it runs the
    recall check seeds and the WikiText-2 baseline seeds too."""
    if spec.name != "softmax":
        return False
    defaults = attention.accepted_params("softmax")
    return {**defaults, **spec.params} == defaults


def run_budget(testbed, metrics, evaluation=None):
    """What a training cell's run spent and was scored on, from its final_metrics.json (and, for
    WikiText-2, eval_ppl.py's JSON): recall ``max_steps``, ``stop_at`` (0: none),
    ``train_sequences``, ``test_sequences`` and ``steps_run`` (the steps it ran: fewer than ``max_steps`` when it stopped); LRA Text ``steps``, ``test_examples`` and ``test_size`` (the test split's
    reviews; a run made before the data summary was recorded was made on the full set, ``FULL_DATA``);
    WikiText-2 ``steps``, ``tokens_per_step``, ``test_tokens`` (scored) and ``split_tokens``."""
    cfg = metrics.get("config", {})
    if testbed == "recall":
        sizes = cfg.get("recall_sizes") or {}
        test = sizes.get("test") if isinstance(sizes, dict) else None
        return {"max_steps": cfg.get("max_iters"), "stop_at": cfg.get("stop_at", 0.0) or 0.0,
                "train_sequences": sizes.get("train") if isinstance(sizes, dict) else None,
                "test_sequences": test, "steps_run": metrics.get("iters")}
    if testbed == "lra":
        size = (metrics.get("data") or {}).get("test_size", FULL_DATA["lra"][0]["test_size"])
        return {"steps": cfg.get("max_iters"), "test_examples": int(metrics["test_examples"]), "test_size": size}
    if testbed == "wikitext2":
        tokens = cfg.get("batch_size", 0) * cfg.get("block_size", 0) * cfg.get("gradient_accumulation_steps", 1)
        return {"steps": cfg.get("max_iters"), "tokens_per_step": tokens,
                "test_tokens": (evaluation or {}).get("tokens_scored"), "split_tokens": (evaluation or {}).get("split_tokens")}
    return {}


def digest(fields):
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def cpu_model():
    """The CPU's model name (``/proc/cpuinfo``), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def recall_cell_sizes(length):
    """Examples per split of a recall cell of sequence length ``length``: the reference cell's
    (``RECALL_REFERENCE_SIZES``) times reference length / ``length``, the same tokens per split
    (64/4: 80,000 / 4,000 / 4,000 sequences).

    Raises:
        ValueError: a length that does not divide the reference cell's."""
    if length < 1 or RECALL_REFERENCE[0] % length:
        raise ValueError(f"a recall cell's length must divide the reference cell's {RECALL_REFERENCE[0]}; got {length}")
    scale = RECALL_REFERENCE[0] // length
    return {split: n * scale for split, n in RECALL_REFERENCE_SIZES.items()}


def recall_cell_args(cell, lr, seed):
    """train.py arguments of one recall run besides the config and attention layers (the cell's
    sizes, ``recall_cell_sizes``, given only where they differ from the config's)."""
    length, pairs, width = cell
    sizes = recall_cell_sizes(length)
    return [f"--block_size={length}", f"--recall_pairs={pairs}", f"--n_embd={width}", f"--learning_rate={lr:g}",
            f"--seed={seed}", *([f"--recall_sizes={sizes!r}"] if sizes != RECALL_REFERENCE_SIZES else [])]


def wikitext2_eval(tier):
    """eval_ppl.py's arguments of the WikiText-2 testbed's evaluation in ``tier``."""
    return WIKITEXT2_EVAL + ((f"--fraction={WIKITEXT2_QUICK_FRACTION}",) if tier == "quick" else ())


def recall_cell_name(cell, lr, seed):
    length, pairs, width = cell
    return f"recall_T{length}_N{pairs}_d{width}_lr{lr:g}_s{seed}"


def shell_values():
    """The definitions the sweep scripts read instead of keeping their own (``scripts/sweeps/recall.sh``,
    ``gpt_mini.sh``): name -> text, lists space-separated."""
    return {"recall_config": RECALL_CONFIG, "recall_rates": " ".join(f"{lr:g}" for lr in RECALL_RATES),
            "recall_seeds": " ".join(str(seed) for seed in RECALL_SEEDS),
            "wikitext2_config": WIKITEXT2_CONFIG, "wikitext2_eval": " ".join(WIKITEXT2_EVAL)}


def main(argv):
    """``python -m scripts.scorecard.testbeds NAME`` prints one of ``shell_values``;
    ``... layers TESTBED SPEC`` the train.py arguments that select SPEC's attention in TESTBED
    (``Spec.layers``), one per line; ``... lra_layers TASK_CONFIG SPEC`` SPEC's layers for that LRA
    task (``Spec.lra_layers``); ``... recall_sizes LENGTH`` a recall cell's ``--recall_sizes`` value
    (``recall_cell_sizes``). The sweep scripts call it, so a sweep and the scorecard run the
    same protocol."""
    values = shell_values()
    if len(argv) == 3 and argv[0] in ("layers", "lra_layers"):
        try:
            spec = Spec(argv[2])
            print("\n".join(spec.layers(argv[1]) if argv[0] == "layers" else spec.lra_layers(argv[1])))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    if len(argv) == 2 and argv[0] == "recall_sizes":  # the sweep's --recall_sizes of a cell length
        try:
            print(repr(recall_cell_sizes(int(argv[1]))))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    if len(argv) != 1 or argv[0] not in values:
        print(f"usage: python -m scripts.scorecard.testbeds {{{'|'.join(values)}}} | layers TESTBED SPEC"
              " | lra_layers TASK_CONFIG SPEC | recall_sizes LENGTH", file=sys.stderr)
        return 2
    print(values[argv[0]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
