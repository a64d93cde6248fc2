"""The published numbers: what the table tools aggregate from finished runs, and the renderers that
turn the files under ``results/`` into the tables and sentences of README.md and docs/*.md
(issue 42, item 5: no number typed by hand; ``python -m scripts.analysis.publish`` writes them,
its ``--check`` and ``tests/scripts/test_publish.py`` fail when a committed block differs).

A library of ``scripts/analysis`` (like ``runs.py``): the table tools (``recall_table``,
``recall_ablation_table``, ``gpt_mini_table``, ``lra_table``) and the publishing command
(``publish.py``) import it; tools never import tools.

Renderers (``RENDERERS``, the names a block's marker uses): each is ``fn(root, *args, **kwargs)``
returning the block's markdown (ending in a newline); ``root`` is the repository root and every
path argument is relative to it. Each reads only files under ``results/`` (a run's
``final_metrics.json``, ``log.jsonl``, ``train.log``, ``manifest.json``, through ``runs.open_run`` /
``runs.find_runs``, from its packed file or its folder; a tool's ``summary.csv``; a benchmark's
``.json``), and raises ``SourceMissing`` (a FileNotFoundError naming the file) when one is absent.
Output is byte-stable: fixed row orders and fixed formats.

- ``recall_ablation <folder> [base=<row>] [link_root=<prefix>]``: the ablation table of
  ``recall_ablation_table`` from the runs (packed files or folders) under ``<folder>``.
- ``recall_glance <summary.csv> cells=<T/N/width>,... [params=<folder>]``: test accuracy mean ± sd
  over the seeds at the picked learning rate per attention x cell; a cell whose runs are all at one
  learning rate says so (nothing was picked there); ``params`` names a folder of runs whose
  configurations describe the attentions' settings (BigBird's blocks, Longformer's window).
- ``gpt_mini_table <folder>``: the WikiText-2 table of ``gpt_mini_table``.
- ``lra_text <folder>``: our LRA Text runs under ``<folder>`` beside the published Text numbers.
- ``lra_tasks <pattern>``: our reduced LRA runs matching ``<pattern>``, a row per task (accuracy,
  steps/s and the majority rate; docs/lra.md's results table).
- ``lra_text_budgets <pattern> <pattern> [attentions=a,b]``: each attention's Text accuracy in the
  runs of the first pattern beside the second's, with the step of the weights kept.
- ``bench_aims``: issue 27's performance aims (``BENCH`` and ``TREE_BENCH`` name the files).
- ``fastmax_grid <grid.json> <memory.json> [retimed=<json>]``: docs/fastmax.md's benchmark tables
  (seconds per causal call, the targets, the break-even T against SDPA) from the attention
  benchmark's JSONs; ``retimed``: a later run of the target cells, shown beside them.
- ``swap_ranges <run> [<run> ...] [base=softmax]``: one model's test perplexity with each attention
  on the same ranges of the test split (eval_ppl.py's JSONs in packed runs or folders), a row per
  range, the change against ``base``'s (docs/scorecard.md: tree attention's swap cell by range).
- ``tree_sweep <table.csv> [protocol=blocks] [normalization=bud_mean] [quantity=change|value]``: a
  tree sweep's table from ``tree_sweep_table``'s CSV, a row per sampler and a column per E (the
  paired change of perplexity against exact attention, or the metric itself), and the cost row
  (docs/tree_attention.md).
- ``published_lra [attentions=a,b]``: the papers' LRA rows of those attentions (``PUBLISHED_ACCURACY``,
  the one copy of them in the repository; docs/baselines.md).
- ``per_position <eval.json> [edges=1,2,8,...]``: mean test NLL by context length in bins, from an
  eval_ppl.py JSON's per_position field (docs/gpt_mini_wikitext2.md).
- ``table_file <tool output .md> [n=1]``: the n-th table of a table tool's markdown output, verbatim
  (only files that tests/scripts/test_results_rebuild.py rebuilds from the runs).
- ``tree_bench <run.json> [<run.json> ...] [L=1024] [E=0.5]``: the tree benchmark's seconds per block
  of each implementation, a column per run, our kernel's factor over the authors' code in brackets
  (docs/tree_attention.md).
- ``bench_layer <layer suite .json> [methods=a,b]``: tokens/s of the DANet and softmax layers per T,
  forward and forward + backward (docs/dense_attention.md).
- ``bench_pair <bench.json> first=<spec> second=<spec> cells=D:mode:causal,... T=t,... [base=sdpa]``: two
  methods' times over the base's in one benchmark run, "first / second" per cell (docs/fastmax.md).
- ``authors_fastmax <compare.json> cells=p:causal:mode:T,...``: our Fastmax beside the authors'
  PyTorch paths, time and peak memory per cell (docs/fastmax.md).
- ``bench_linearity <bench.json> methods=a,b``: per method and call, time(16384) / (16 time(1024))
  and SDPA's time over the method's at 16384, misses in bold (docs/baselines.md).
- ``lm_runs <throughput.json|log> <label@train_log@test_json@config> ... [val_iters=600,650]``:
  language-model runs side by side: validation and test perplexity, tokens/s (measured side by side,
  or the median of each run's log), wall time (docs/fastmax.md, docs/dense_attention.md).
- ``leaderboard FOLDER [part=table|floor]``: the scorecard's leaderboard from ``FOLDER/cards/*.json``
  with the notes under it, or its noise-floor sentence (``scripts/scorecard/leaderboard.py``, which
  ``python -m scripts.scorecard`` also writes to ``FOLDER/leaderboard.md``).
- ``kernel_report <report.json>``: the offline sm_90 compilation of Fastmax's Triton kernels
  (scripts/bench/kernel_report.py's table: registers, stack, shared memory, tensor cores, compile
  time, the verdict per kernel), with a line naming Triton's version, the target and the count of
  kernels missing a limit (docs/gpu.md).
- ``readme_results``: README.md's Results table (``README_ROWS``: a template per row, its fields
  computed from the files each row function names).
"""
import csv
import glob
import inspect
import json
import math
import os
import re
import statistics

from scripts.analysis.runs import (FINAL_METRICS, RUN_SUFFIX, RunNotFound, attention_label, find_runs, open_run, run_cpu,
                                   run_date)
from scripts.bench.kernel_report import markdown_table as kernel_report_table


class SourceMissing(FileNotFoundError):
    """A results file a renderer needs does not exist (the message names it)."""


class RenderError(ValueError):
    """A block names an unknown renderer, or arguments the renderer does not take."""


# ----------------------------------------------------------------------------- reading and formatting


def source(root, rel):
    """The absolute path of ``rel`` (relative to ``root``). Raises SourceMissing when it does not exist."""
    path = os.path.join(root, rel)
    if not os.path.exists(path):
        raise SourceMissing(f"a rendered block needs {rel}, which does not exist")
    return path


def load_json(root, rel):
    """The parsed JSON file ``root/rel``. Raises SourceMissing when it does not exist."""
    with open(source(root, rel)) as f:
        return json.load(f)


def load_jsonl(root, rel):
    """The records of the JSON-lines file ``root/rel`` (a training log), blank lines skipped. Raises
    SourceMissing when it does not exist."""
    with open(source(root, rel)) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_csv(root, rel):
    """The rows (dicts of strings) of the CSV file ``root/rel``. Raises SourceMissing when it does not exist."""
    with open(source(root, rel), newline="") as f:
        return list(csv.DictReader(f))


def sources(root, pattern):
    """The files matching the glob ``pattern`` (relative to ``root``), sorted, as paths relative to
    ``root``. Raises SourceMissing when none matches."""
    found = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, pattern)))
    if not found:
        raise SourceMissing(f"a rendered block needs {pattern}, which matches no file")
    return found


def spread(values, fmt):
    """"mean +- sd (min-max, n seeds)" of ``values`` in format ``fmt`` (e.g. ".3f"), or "v (1 seed)"."""
    if len(values) == 1:
        return f"{values[0]:{fmt}} (1 seed)"
    return (f"{statistics.mean(values):{fmt}} +- {statistics.stdev(values):{fmt}} "
            f"({min(values):{fmt}}-{max(values):{fmt}}, {len(values)} seeds)")


def mean_sd(values, fmt, scale=1.0, sep=" ± "):
    """"mean ± sd" of ``values`` times ``scale`` in format ``fmt``; one value alone when there is one."""
    values = [scale * v for v in values]
    if len(values) == 1:
        return f"{values[0]:{fmt}}"
    return f"{statistics.mean(values):{fmt}}{sep}{statistics.stdev(values):{fmt}}"


def sci(x):
    """``x`` with two significant digits in scientific notation, exponent without padding: 5.4e-15."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def rate(x):
    """A learning rate as the docs write it: 3e-3, 1e-2, 2.5e-4."""
    mantissa, exponent = f"{x:.6e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def about(x):
    """``x`` rounded to one significant digit, as an integer string ("about 30" for 32)."""
    if x == 0:
        return "0"
    digits = 10 ** int(math.floor(math.log10(abs(x))))
    return f"{round(x / digits) * digits:.0f}"


def short_cpu(name):
    """A CPU model name without trademarks and the trailing "Processor"/"CPU": "Intel(R) Xeon(R)
    Processor" -> "Intel Xeon"; "not recorded" for None."""
    if not name:
        return "not recorded"
    name = re.sub(r"\((R|TM)\)", "", name)
    name = re.sub(r"\s+(Processor|CPU)$", "", name.strip())
    return re.sub(r"\s+", " ", name).strip()


NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def number_word(n):
    """The English word of a small count ("three"), the digits beyond ten."""
    return NUMBER_WORDS.get(n, str(n))


def join_words(words):
    """"a", "a and b", "a, b and c"."""
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


NAMES = {"softmax": "softmax", "fastmax1": "fastmax p = 1", "fastmax2": "fastmax p = 2", "dense": "dense (DANet)",
         "linear": "linear", "performer": "Performer", "linformer": "Linformer", "longformer": "Longformer",
         "bigbird": "BigBird", "reformer": "Reformer", "informer": "Informer", "danet": "DANet mini"}


def display_name(label, params=None):
    """The published name of an attention label (``NAMES``; else the label), with BigBird's block size
    and Longformer's window and global tokens when ``params`` (its attention_params) gives them."""
    name = NAMES.get(label, label)
    params = params or {}
    if label == "bigbird" and "block_size_sparse" in params:
        name += f" (blocks of {params['block_size_sparse']})"
    elif label == "longformer" and "window" in params:
        g = params.get("num_global", 0)
        extra = "" if not g else " + first token" if g == 1 else f" + {g} global tokens"
        name += f" (window {params['window']}{extra})"
    return name


def older_defaults(name, date):
    """"made with <old setting>, the default before <day>" for a run of the registered attention
    ``name`` started at ``date`` (ISO 8601 str or None, ``runs.run_date``) under a default the method
    has since changed (``Attention.made_before_defaults``, ``defaults_before``); "" for a run of
    today's defaults, an attention no longer registered or none named. Tables that show such a run
    say so (``bracketed``)."""
    import attention

    if name is None:
        return ""
    try:
        cls = attention.attention_class(name)
    except ValueError:
        return ""
    if not cls.made_before_defaults(date):
        return ""
    return f"made with {cls.defaults_before}, the default before {cls.defaults_date[:10]}"


def bracketed(note):
    """" (note)" to follow a name or a number; "" for no note."""
    return f" ({note})" if note else ""


def _markdown(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]) + "\n"


# ----------------------------------------------------------------------------- recall (MQAR)

RECALL_COLUMNS = ("attention", "seq_len", "num_pairs", "d_model", "token_shift", "seed", "test_accuracy",
                  "tokens_per_s", "learning_rate", "val_accuracy", "picked", "num_threads")


def read_recall_runs(files, label_params=()):
    """One dict per recall run (the RECALL_COLUMNS but ``picked``, plus ``path``: its final_metrics.json,
    in the run folder or the packed run; ``train_time_s`` and ``attention_params``) from train.py's final
    metrics of the runs ``files`` (``runs.find_runs``'s Runs, or anything ``runs.open_run`` takes); runs of
    other tasks are skipped. The attention column is ``runs.attention_label(config, label_params)``."""
    runs = []
    for run in map(open_run, files):
        metrics = run.final_metrics or {}
        path = os.path.join(run.path, FINAL_METRICS)
        cfg = metrics.get("config", {})
        if cfg.get("task") != "recall" or "test_accuracy" not in metrics:
            continue
        tokens = metrics["iters"] * cfg["batch_size"] * cfg["block_size"]
        runs.append({"attention": attention_label(cfg, label_params), "seq_len": cfg["block_size"],
                     "num_pairs": cfg["recall_pairs"], "d_model": cfg["n_embd"],
                     "token_shift": bool(cfg.get("token_shift", False)), "seed": cfg["seed"],
                     "test_accuracy": metrics["test_accuracy"],
                     "tokens_per_s": tokens / metrics["train_time_s"] if metrics.get("train_time_s") else None,
                     "learning_rate": cfg["learning_rate"], "val_accuracy": metrics["best_metric"]["value"],
                     "num_threads": cfg.get("num_threads"), "path": path, "train_time_s": metrics.get("train_time_s"),
                     "attention_params": cfg.get("attention_params", {})})
    return runs


def read_recall_summary(root, rel):
    """The runs of a ``summary.csv`` written by ``recall_table`` (RECALL_COLUMNS, typed: ints, floats,
    ``picked`` a bool; an empty cell None). Raises SourceMissing when the file does not exist."""
    ints, floats = ("seq_len", "num_pairs", "d_model", "seed", "num_threads"), \
        ("test_accuracy", "tokens_per_s", "learning_rate", "val_accuracy")
    runs = []
    for row in load_csv(root, rel):
        run = {"attention": row["attention"], "picked": row["picked"] == "True",
               "token_shift": row["token_shift"] == "True"}
        run.update({k: int(row[k]) if row[k] else None for k in ints})
        run.update({k: float(row[k]) if row[k] else None for k in floats})
        runs.append(run)
    return runs


def cell_key(run):
    """(attention, seq_len, num_pairs, d_model, token_shift) of a recall run: runs with and without a
    token shift are different cells (a rate is picked, and a table row is formed, within one)."""
    return run["attention"], run["seq_len"], run["num_pairs"], run["d_model"], run["token_shift"]


def pick_rate(runs, key):
    """The learning rate picked for one (attention, seq_len, num_pairs, d_model): the seed-0 run with
    the highest validation accuracy, ties to the smaller rate; None without a seed-0 run."""
    candidates = [r for r in runs if cell_key(r) == key and r["seed"] == 0]
    if not candidates:
        return None
    return min(candidates, key=lambda r: (-r["val_accuracy"], r["learning_rate"]))["learning_rate"]


def mark_picked(runs):
    """Set ``picked`` on every run: its learning rate is the one picked for its cell. Returns ``runs``."""
    rates = {key: pick_rate(runs, key) for key in {cell_key(r) for r in runs}}
    for r in runs:
        r["picked"] = r["learning_rate"] == rates[cell_key(r)]
    return runs


def cell_label(seq_len, num_pairs, d_model, token_shift=False):
    """"256/16 w64", or "256/16 w64 shift" for runs with a token shift."""
    return f"{seq_len}/{num_pairs} w{d_model}" + (" shift" if token_shift else "")


def recall_order(attentions):
    """softmax, fastmax1, fastmax2, dense first (those present), then the others sorted."""
    first = ["softmax", "fastmax1", "fastmax2", "dense"]
    return [a for a in first if a in attentions] + sorted(a for a in attentions if a not in first)


def picked_runs(runs, attention, cell):
    """The runs of ``attention`` in ``cell`` (seq_len, num_pairs, d_model) at the picked rate, by seed."""
    return sorted((r for r in runs if cell_key(r) == (attention, *cell) and r["picked"]), key=lambda r: r["seed"])


def one_rate(runs, attention, cell):
    """The learning rate when every run of ``attention`` in ``cell`` used the same one (nothing was
    picked between rates), else None."""
    rates = {r["learning_rate"] for r in runs if cell_key(r) == (attention, *cell)}
    return rates.pop() if len(rates) == 1 else None


def _cells_arg(cells, token_shift):
    if token_shift not in ("True", "False"):
        raise RenderError(f"token_shift={token_shift}: expected True or False")
    try:
        return [(*(int(x) for x in c.split("/")), token_shift == "True") for c in cells.split(",")]
    except ValueError:
        raise RenderError(f"cells={cells}: expected T/N/width,... (e.g. 64/4/64,256/16/64)") from None


def _recall_params(root, folder):
    """{attention label: attention_params} of the recall runs under ``folder`` (the first run of each)."""
    params = {}
    for run in read_recall_runs(find_runs([source(root, folder)])):
        params.setdefault(run["attention"], run["attention_params"])
    return params


def render_recall_glance(root, summary, cells, token_shift="False", params=""):
    """The "sweep at a glance" table of docs/recall.md from ``summary`` (a recall_table summary.csv):
    a row per attention (``recall_order``) that has runs in one of the cells, a column per cell of
    ``cells`` ("T/N/width,..."; the runs with ``token_shift`` True or False, default False): test
    accuracy mean ± sd over the seeds at the picked rate (3 decimals; "(1 seed)" for one run, "(n
    seeds)" where a cell has fewer seeds than the table's most, "-" for none), "(one rate, <lr>)"
    when every run of the cell used one learning rate. ``params``: a folder of runs whose
    configurations name BigBird's and Longformer's settings in the row label.
    Raises SourceMissing (a file is absent), RenderError (malformed ``cells``)."""
    runs = read_recall_summary(root, summary)
    cells = _cells_arg(cells, token_shift)
    described = _recall_params(root, params) if params else {}
    attentions = recall_order({r["attention"] for r in runs if cell_key(r)[1:] in cells})
    values = {(a, cell): [r["test_accuracy"] for r in picked_runs(runs, a, cell)] for a in attentions for cell in cells}
    most = max(map(len, values.values()), default=0)
    rows = []
    for attention in attentions:
        row = [display_name(attention, described.get(attention))]
        for cell in cells:
            n = len(values[attention, cell])
            if not n:
                row.append("-")
                continue
            seeds = f" ({n} seed{'s' if n > 1 else ''})" if n == 1 or n < most else ""
            text = mean_sd(values[attention, cell], ".3f") + seeds
            lr = one_rate(runs, attention, cell)
            row.append(text + (f" (one rate, {rate(lr)})" if lr is not None else ""))
        rows.append(row)
    return _markdown(["attention", *(cell_label(*c[:3]) for c in cells)], rows)


# ----------------------------------------------------------------------------- recall ablation

ABLATION_COMPARED = ("mlp", "tie_lm_head", "embedding_init_std", "pos_emb", "pos_embedding_init_std", "linear_init",
                     "scale_residual_init", "token_shift", "beta2", "lr_schedule", "warmup_iters", "grad_clip",
                     "learning_rate", "weight_decay", "max_iters", "recall_sizes", "seed")
ABLATION_COLUMNS = ("row", "base", "changes", "test_accuracy", "best_val_accuracy", "best_iter",
                    "first_iter_val_acc_0.5", "last_train_loss", "cpu", "run")


def read_log(run):
    """(evaluations [(iter, val_accuracy)], last logged training loss or None) of the log.jsonl of ``run``
    (a Run or anything ``runs.open_run`` takes). Raises runs.RunNotFound when the run has no log."""
    run = open_run(run)
    records = run.log
    if records is None:
        raise RunNotFound(f"{run.source}: the run has no log.jsonl")
    evals, last = [], None
    for record in records:
        if "eval" in record and "val_accuracy" in record["eval"]:
            evals.append((record["iter"], record["eval"]["val_accuracy"]))
        elif "loss" in record:
            last = record["loss"]
    return evals, last


def describe(value):
    """A configuration value as the ablation table writes it: floats %g, dicts k=v,k=v."""
    if isinstance(value, dict):  # recall_sizes: {'train': 100000, ...} -> train=100000,val=1000,test=1000
        return ",".join(f"{k}={v}" for k, v in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)


def _unused(key, cfg):
    """Whether ``key`` has no effect in a run of configuration ``cfg`` (the position embedding's init
    without learned positions), so a difference in it is not a change."""
    return key == "pos_embedding_init_std" and cfg.get("pos_emb", "learned") != "learned"


def ablation_rows(root, base_row=""):
    """The ablation table's rows (dicts of ``ABLATION_COLUMNS``, and ``link``: the run's file or folder
    name, what the markdown links) of the runs under ``root`` (run folders or packed runs, each with
    final_metrics.json and log.jsonl), base rows first, then by name. A row's base is the
    row named by its name's part before the first "_", or ``base_row`` for every row; "changes" lists
    the ``ABLATION_COMPARED`` configuration keys whose values differ from the base's (but for keys
    the row's configuration does not use, ``_unused``)."""
    runs = {}
    for run in find_runs([root]):
        runs[run.name] = (run, run.final_metrics)
    out = []
    for name, (run, final) in runs.items():
        base = base_row or name.split("_", 1)[0]
        cfg, base_cfg = final["config"], runs.get(base, (None, {"config": {}}))[1]["config"]
        changes = [f"{k}={describe(cfg.get(k))}" for k in ABLATION_COMPARED if base != name and base_cfg
                   and cfg.get(k) != base_cfg.get(k) and not _unused(k, cfg)]
        evals, last = read_log(run)
        best_iter, best = max(evals, key=lambda e: (e[1], -e[0])) if evals else (None, None)
        first = next((it for it, acc in evals if acc >= 0.5), None)
        out.append({"row": name, "base": base if base in runs else "", "changes": " ".join(changes) or
                    ("(the base)" if base == name else "(none)"), "test_accuracy": final.get("test_accuracy"),
                    "best_val_accuracy": best, "best_iter": best_iter,
                    "first_iter_val_acc_0.5": first if first is not None else "-", "last_train_loss": last,
                    "cpu": run_cpu(run) or "", "run": run.path,
                    "link": os.path.basename(run.source) + ("" if run.packed else "/")})
    return sorted(out, key=lambda r: (r["base"], r["row"] != r["base"], r["row"]))


def ablation_markdown(table, link_root=""):
    """The ablation table (rows of ``ablation_rows``) as markdown; each row links its run: ``link_root`` +
    the packed file's name, or the folder's name and "/"."""
    head = ("| row | changes from its base | test acc. | best val acc. (step) | val acc. >= 0.5 from step "
            "| last train loss | run |")
    lines = [head, "|---|---|---:|---:|---:|---:|---|"]
    for r in table:
        link = f"[{os.path.basename(r['run'])}]({link_root}{r.get('link', os.path.basename(r['run']) + '/')})"
        lines.append(f"| {r['row']} | {r['changes']} | {r['test_accuracy']:.4f} | {r['best_val_accuracy']:.4f} "
                     f"({r['best_iter']}) | {r['first_iter_val_acc_0.5']} | {r['last_train_loss']:.3f} | {link} |")
    return "\n".join(lines) + "\n"


def render_recall_ablation(root, folder, base="", link_root=""):
    """The ablation table of the run folders under ``folder`` (``ablation_rows`` with ``base``,
    ``ablation_markdown`` with ``link_root``). Raises SourceMissing when ``folder`` is absent or holds no run."""
    rows = ablation_rows(source(root, folder), base)
    if not rows:
        raise SourceMissing(f"a rendered block needs runs (final_metrics.json) under {folder}; there are none")
    return ablation_markdown(rows, link_root)


# ----------------------------------------------------------------------------- mini GPT on WikiText-2

GPT_MINI_COLUMNS = ("attention", "seed", "test_ppl", "test_tokens", "protocol", "best_val_loss", "best_iter", "iters",
                    "tokens", "train_time_s", "tokens_per_s", "num_threads", "cpu", "attention_params")
GPT_MINI_FIRST = ("softmax", "fastmax1", "fastmax2", "dense", "danet")


def attention_name(run_dir, seed):
    """The sweep's attention name of a run folder ``<attention>_s<seed>`` (the folder name otherwise)."""
    name = os.path.basename(os.path.normpath(run_dir))
    suffix = f"_s{seed}"
    return name[: -len(suffix)] if name.endswith(suffix) else name


def read_gpt_mini_runs(files):
    """One dict per lm run (the GPT_MINI_COLUMNS, ``path``, the run path, and ``older_defaults``, the
    note of a run made under an older default of its method, else "") from the final metrics of the
    runs ``files`` (``runs.find_runs``'s Runs, or anything ``runs.open_run`` takes) and the eval_ppl.py
    result ``eval_test.json`` of each (test_ppl None without it); other tasks skipped."""
    runs = []
    for run in map(open_run, files):
        metrics = run.final_metrics or {}
        cfg = metrics.get("config", {})
        if cfg.get("task") != "lm":
            continue
        run_dir = run.path
        tokens = metrics["iters"] * cfg["batch_size"] * cfg["block_size"] * cfg.get("gradient_accumulation_steps", 1)
        best = metrics.get("best_metric") or {}
        row = {"attention": attention_name(run_dir, cfg["seed"]), "seed": cfg["seed"], "test_ppl": None,
               "test_tokens": None, "protocol": None, "best_val_loss": best.get("value"),
               "best_iter": metrics.get("best_iter"), "iters": metrics["iters"], "tokens": tokens,
               "train_time_s": metrics.get("train_time_s"),
               "tokens_per_s": tokens / metrics["train_time_s"] if metrics.get("train_time_s") else None,
               "num_threads": cfg.get("num_threads"), "cpu": run_cpu(run),
               "attention_params": json.dumps(cfg.get("attention_params", {}), sort_keys=True), "path": run_dir,
               "older_defaults": older_defaults(cfg.get("attention"), run_date(run))}
        result = run.read_json("eval_test.json")
        if result is not None:
            row.update(test_ppl=result["value"], test_tokens=result["tokens_scored"], protocol=result["protocol"])
        runs.append(row)
    return runs


def gpt_mini_order(names):
    """GPT_MINI_FIRST (those present), then the other names sorted."""
    return [n for n in GPT_MINI_FIRST if n in names] + sorted(n for n in names if n not in GPT_MINI_FIRST)


def median_per_cpu(runs, value, fmt):
    """The median of ``value(run)`` over ``runs`` (None values left out), formatted with ``fmt``; one median
    per CPU model when the runs ran on more than one (speeds and times of different CPUs do not compare)."""
    by_cpu = {}
    for r in runs:
        v = value(r)
        if v is not None:
            by_cpu.setdefault(r["cpu"] or "CPU not recorded", []).append(v)
    if len(by_cpu) <= 1:
        values = next(iter(by_cpu.values()), [])
        return f"{statistics.median(values):{fmt}}" if values else "-"
    return ", ".join(f"{statistics.median(values):{fmt}} ({cpu})" for cpu, values in sorted(by_cpu.items()))


def gpt_mini_rows(runs):
    """Rows per attention: name, test perplexity, best val loss, tokens/s, wall time, tokens, note."""
    softmax_tokens = {r["tokens"] for r in runs if r["attention"] == "softmax"}
    rows = []
    for name in gpt_mini_order({r["attention"] for r in runs}):
        mine = [r for r in runs if r["attention"] == name]
        ppl = [r["test_ppl"] for r in mine if r["test_ppl"] is not None]
        val = [r["best_val_loss"] for r in mine if r["best_val_loss"] is not None]
        tokens = sorted({r["tokens"] for r in mine})
        notes = [] if not softmax_tokens or set(tokens) <= softmax_tokens else ["other budget than softmax"]
        notes += sorted({r["older_defaults"] for r in mine if r["older_defaults"]})
        note = "; ".join(notes)
        rows.append([name, spread(ppl, ".2f") if ppl else "not evaluated", spread(val, ".4f") if val else "-",
                     median_per_cpu(mine, lambda r: r["tokens_per_s"] or None, ",.0f"),
                     median_per_cpu(mine, lambda r: r["train_time_s"] / 60 if r["train_time_s"] else None, ".1f"),
                     "/".join(f"{t:,}" for t in tokens), note])
    return rows


def gpt_mini_table(runs):
    """The markdown table of ``gpt_mini_rows`` (header included, ending in a newline)."""
    header = ["attention", "test perplexity", "best val loss (nats)", "tokens/s (median)", "training min (median)",
              "training tokens", "note"]
    return _markdown(header, gpt_mini_rows(runs))


def render_gpt_mini_table(root, folder):
    """The WikiText-2 table of ``gpt_mini_table`` from the runs under ``folder``. Raises SourceMissing
    when ``folder`` is absent or holds no lm run."""
    runs = read_gpt_mini_runs(find_runs([source(root, folder)]))
    if not runs:
        raise SourceMissing(f"a rendered block needs lm runs (final_metrics.json) under {folder}; there are none")
    return gpt_mini_table(runs)


def marker_numbers(renderer, text, kind=int):
    """The numbers of a marker's comma list ``text`` ("1024" or "0.2,0.5") as ``kind``. Raises
    RenderError naming the renderer and the text when one is not a number."""
    try:
        return [kind(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise RenderError(f"{renderer}: {text!r} is not a comma list of {kind.__name__} numbers") from None


def marker_number(renderer, text, kind=int):
    """The one number of a marker's argument ``text``. Raises RenderError unless it is one number."""
    numbers = marker_numbers(renderer, text, kind)
    if len(numbers) != 1:
        raise RenderError(f"{renderer}: {text!r} is not one {kind.__name__} number")
    return numbers[0]


def marker_cells(renderer, cells, fields):
    """The ``cells`` argument of a marker ("a:b:c,a:b:c") as tuples of len(``fields``) strings.
    Raises RenderError naming the fields when an entry has another number of parts."""
    out = [tuple(cell.split(":")) for cell in cells.split(",") if cell]
    bad = [":".join(c) for c in out if len(c) != len(fields)]
    if bad or not out:
        raise RenderError(f"{renderer}: cells={cells!r}; each entry is {':'.join(fields)}")
    return out


def render_swap_ranges(root, *runs, base="softmax"):
    """Perplexity of one model with each attention on the same test tokens (eval_ppl.py's JSONs
    ``eval_*.json`` / ``*.json`` in ``runs``: packed runs or folders), a row per range of the test split
    (its first token, its length, the tokens scored), ``base``'s perplexity beside each other
    attention's and the change, 100 (ppl / ppl_base - 1) % (the same scored tokens, so
    exp(NLL - NLL_base) - 1). Raises SourceMissing when ``runs`` hold no such JSON, RenderError when
    a range lacks ``base``'s evaluation or the JSONs name different models (the last folder of
    their ``model``)."""
    evals, models = {}, set()
    for rel in runs:
        run = open_run(source(root, rel))
        for name in run.files():
            record = run.read_json(name) if name.endswith(".json") and name != "manifest.json" else None
            if record and record.get("metric") == "perplexity" and "range_start" in record:
                label = attention_label({"attention": record["attention"],
                                         "attention_params": record.get("attention_params", {})})
                params = ", ".join(f"{k} = {v}" for k, v in sorted(record.get("attention_params", {}).items()))
                tokens = (record["range_start"], record["range_tokens"], record["tokens_scored"])
                evals.setdefault(tokens, {})[(label, params)] = record["value"]
                models.add(os.path.basename(os.path.normpath(record.get("model", ""))))
    if not evals:
        raise SourceMissing(f"a rendered block needs eval_ppl.py JSONs in {', '.join(runs)}; there are none")
    if len(models) > 1:
        raise RenderError(f"the evaluations in {', '.join(runs)} are of different models ({', '.join(sorted(models))})")
    others = sorted({a for by in evals.values() for a in by if a[0] != base})
    header = ["test tokens (first, length; scored)", base, *(f"{display_name(label)} ({params})" if params else
                                                             display_name(label) for label, params in others)]
    rows = []
    for (start, length, scored), by in sorted(evals.items(), key=lambda item: (-item[0][1], item[0][0])):
        base_ppl = next((v for (label, _), v in by.items() if label == base), None)
        if base_ppl is None:
            raise RenderError(f"the test tokens from {start:,} ({length:,}) have no {base} evaluation in {', '.join(runs)}")
        rows.append([f"{start:,}, {length:,}; {scored:,}", f"{base_ppl:.2f}",
                     *(f"{by[a]:.2f} ({100 * (by[a] / base_ppl - 1):+.2f}%)" if a in by else "not run" for a in others)])
    return _markdown(header, rows)


# Zoology's Figure 2 as its text says and its plot shows (the recall table and the leaderboard quote it)
ZOOLOGY_NOTE = ("Zoology (Arora et al. 2023, Figure 2; 2 layers, one head, no MLP, 100k examples, best of 4 "
                "learning rates in 1e-4..1e-2, 64 epochs): attention about 1.0 in every cell; at 256/16 "
                "BaseConv, H3, RWKV and Hyena 0.05-0.14 at width 64 and 0.54-0.82 at width 256.")


# ----------------------------------------------------------------------------- Long Range Arena

TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
TITLES = ("ListOps", "Text", "Retrieval", "Image", "Pathfinder", "Path-X")
FAST_TASKS = TASKS[:5]
PAPER_METHODS = ("softmax", "fastmax1", "fastmax2", "dense")  # their published rows always show
BASELINES = ("linear", "performer", "linformer", "longformer", "bigbird", "reformer", "informer")
ORDER = PAPER_METHODS + BASELINES  # a baseline's published rows show beside our runs of it

# (attention, source): (accuracies in TASKS order, None = not reported, "fail" = at chance; avg)
PUBLISHED_ACCURACY = [
    ("softmax", "LRA paper, Tay et al. 2021", (36.37, 64.27, 57.46, 42.44, 71.40, "fail"), 54.39),
    ("softmax", "FAST Table 1", (38.37, 61.95, 80.69, 40.57, 65.26, None), 57.37),
    ("fastmax1", "FAST Table 1", (37.20, 63.25, 78.21, 42.76, 66.67, None), 57.62),
    ("fastmax2", "FAST Table 1", (37.40, 64.30, 78.11, 43.18, 66.55, None), 57.90),
    ("dense", "DenseAttention Table 1", (50.50, 81.19, 87.51, 72.55, 87.40, 88.82), 77.99),
    # the baselines (docs/baselines.md): LRA Table 1 as quoted in DenseAttention Table 5 (and FAST
    # Table 1 for Linear Trans.), then FAST Table 1's own runs and DenseAttention's Informer row
    ("linear", "LRA paper, Tay et al. 2021", (16.13, 65.90, 53.09, 42.34, 75.30, "fail"), 50.55),
    ("performer", "LRA paper, Tay et al. 2021", (18.01, 65.40, 53.82, 42.77, 77.05, "fail"), 51.41),
    ("performer", "FAST Table 1", (37.80, 64.39, 79.05, 39.78, 67.41, None), 57.69),
    ("linformer", "LRA paper, Tay et al. 2021", (35.70, 53.94, 52.27, 38.56, 76.34, "fail"), 51.36),
    ("longformer", "LRA paper, Tay et al. 2021", (35.63, 62.85, 56.89, 42.22, 69.71, "fail"), 53.46),
    ("bigbird", "LRA paper, Tay et al. 2021", (36.05, 64.02, 59.29, 40.83, 74.87, "fail"), 55.01),
    ("reformer", "LRA paper, Tay et al. 2021", (37.27, 56.10, 53.40, 38.07, 68.50, "fail"), 50.67),
    ("reformer", "FAST Table 1", (37.00, 64.75, 78.50, 43.72, 66.40, None), 58.07),
    ("informer", "FAST Table 1", (36.95, 63.60, 75.25, 37.55, 50.33, None), 52.74),
    ("informer", "DenseAttention Table 5 (from Chen et al. 2021)", (32.53, 62.64, 77.57, 38.10, 57.83, None), 53.73),
]
PUBLISHED_STEPS = [  # FAST Table 2: training steps per second on an RTX A5000, head dim 32
    ("softmax", "FAST Table 2 (RTX A5000)", (6.4, 1.8, 1.7, 3.0, 6.1, None), 3.8),
    ("fastmax1", "FAST Table 2 (RTX A5000)", (47.4, 26.7, 24.7, 12.8, 24.4, None), 27.2),
    ("fastmax2", "FAST Table 2 (RTX A5000)", (11.6, 6.1, 6.9, 3.0, 6.8, None), 6.9),
]
SHORT_SOURCES = {"LRA paper, Tay et al. 2021": "LRA Table 1",
                 "DenseAttention Table 5 (from Chen et al. 2021)": "DenseAttention Table 5"}
# where else a published row is printed, or whose runs it is (docs/baselines.md's table)
PUBLISHED_NOTES = {("linear", "LRA paper, Tay et al. 2021"): "= FAST Table 1, DenseAttention Table 5",
                   **{(a, "LRA paper, Tay et al. 2021"): "= DenseAttention Table 5"
                      for a in ("performer", "linformer", "longformer", "bigbird", "reformer")},
                   ("performer", "FAST Table 1"): "their runs",
                   ("informer", "DenseAttention Table 5 (from Chen et al. 2021)"): "from Chen et al. 2021"}


def render_published_lra(root, attentions=""):
    """The papers' LRA accuracies (%) of the attentions in ``attentions`` (a comma list of labels;
    default every one), a row per published row of PUBLISHED_ACCURACY in its order: ListOps, Text,
    Retrieval, Image, Pathfinder and the average as printed (Path-X left out: failed or not
    reported), the source with PUBLISHED_NOTES. Reads no file; ``root`` is unused. Raises RenderError
    for a label without a published row."""
    wanted = [a for a in attentions.split(",") if a] or list(dict.fromkeys(a for a, *_ in PUBLISHED_ACCURACY))
    unknown = sorted(set(wanted) - {a for a, *_ in PUBLISHED_ACCURACY})
    if unknown:
        raise RenderError(f"published_lra: no published LRA row for {', '.join(unknown)}")
    rows = []
    for label, source, accuracies, average in PUBLISHED_ACCURACY:
        if label in wanted:
            note = PUBLISHED_NOTES.get((label, source))
            rows.append([display_name(label), SHORT_SOURCES.get(source, source) + (f" ({note})" if note else ""),
                         *(f"{a:.2f}" for a in accuracies[:5]), f"{average:.2f}"])
    return _markdown(["method", "source", "ListOps", "Text", "Retrieval", "Image", "Pathfinder", "Avg"], rows)


def task_column(cfg):
    """Column of a run's config (one of TASKS): its ``lra_task``, Pathfinder at resolution 128 is Path-X."""
    task = cfg.get("lra_task", "")
    if task == "pathfinder" and (cfg.get("lra_options") or {}).get("resolution", 32) == 128:
        return "pathx"
    return task


def read_lra_runs(files, skipped=None):
    """One record per LRA classification run of ``files`` (``runs.find_runs``'s Runs, or anything
    ``runs.open_run`` takes): file (its final_metrics.json, in the run folder or the packed run), run (the
    run path), label, task, test/val accuracy, steps_per_s, iters, best_iter, majority, test_examples,
    examples_seen, max_len, cpu (of the run's manifest.json, None without one), older_defaults (the
    note of a run made under an older default of its method, else ""). Other runs are left out,
    and their final_metrics.json paths appended to ``skipped`` if given."""
    runs = []
    for run in map(open_run, files):
        m = run.final_metrics or {}
        f = os.path.join(run.path, FINAL_METRICS)
        cfg = m.get("config", {})
        if cfg.get("task", "classify") != "classify" or "test_accuracy" not in m:
            if skipped is not None:
                skipped.append(f)
            continue
        runs.append({"file": f, "run": run.path, "label": attention_label(cfg), "task": task_column(cfg),
                     "test_accuracy": m["test_accuracy"], "val_accuracy": m.get("val_accuracy"),
                     "steps_per_s": m.get("steps_per_s"), "iters": m.get("iters"), "best_iter": m.get("best_iter"),
                     "majority": m.get("test_majority"), "test_examples": m.get("test_examples"),
                     "examples_seen": (m.get("iters") or 0) * cfg.get("batch_size", 0),
                     "max_len": cfg.get("max_len"), "cpu": run_cpu(run),
                     "older_defaults": older_defaults(cfg.get("attention"), run_date(run))})
    return runs


def choose(runs):
    """The run of one cell: the most training examples seen, then the higher val accuracy, then
    the path (a rule, so the table does not depend on which file was written last)."""
    return max(runs, key=lambda r: (r["examples_seen"], r["val_accuracy"] or 0.0, r["file"]))


def at_chance(run):
    """True when the run's test accuracy is within two binomial standard errors of (or below) the
    majority-class rate of its test examples."""
    m, n = run["majority"], run["test_examples"]
    if m is None or not n:
        return False
    return run["test_accuracy"] <= m + 2 * (m * (1 - m) / n) ** 0.5


def lra_cell(run):
    """Our accuracy cell: the test accuracy in %, or "fail (acc; majority m)" at chance (``at_chance``)."""
    if run is None:
        return None
    if at_chance(run):
        return f"fail ({100 * run['test_accuracy']:.2f}; majority {100 * run['majority']:.2f})"
    return 100 * run["test_accuracy"]


def fmt_cell(v):
    """A table value: "" for None, a string as is, a number with 2 decimals."""
    if v is None:
        return ""
    return v if isinstance(v, str) else f"{v:.2f}"


def build_tables(runs):
    """(accuracy rows, steps rows, chosen runs, common tasks): rows are (attention, source, values
    in TASKS order, avg) with accuracies in %; ``chosen`` maps (label, task) -> run (``choose``); our
    accuracy avg is over FAST_TASKS when a row has all five; ``common`` lists the tasks (TASKS order)
    that every one of our rows has."""
    cells = {}
    for r in runs:
        cells.setdefault((r["label"], r["task"]), []).append(r)
    chosen = {cell: choose(rs) for cell, rs in cells.items()}
    ours = {k[0] for k in chosen}
    common = [t for t in TASKS if all((label, t) in chosen for label in ours)]
    every = ours | set(PAPER_METHODS)
    acc_rows, steps_rows = [], []
    for label in [a for a in ORDER if a in every] + sorted(every - set(ORDER)):
        if label in ours:
            vals = [lra_cell(chosen.get((label, t))) for t in TASKS]
            complete = all((label, t) in chosen for t in FAST_TASKS)
            avg = sum(100 * chosen[(label, t)]["test_accuracy"] for t in FAST_TASKS) / 5 if complete else None
            acc_rows.append((label, "ours", vals, avg))
            steps = [chosen[(label, t)]["steps_per_s"] if (label, t) in chosen else None for t in TASKS]
            five = steps[:5]
            avg = sum(five) / 5 if all(s is not None for s in five) else None
            steps_rows.append((label, "ours", steps, avg))
        for a, src, vals, avg in PUBLISHED_ACCURACY:
            if a == label:
                acc_rows.append((a, f"published: {src}", list(vals), avg))
        for a, src, vals, avg in PUBLISHED_STEPS:
            if a == label:
                steps_rows.append((a, f"published: {src}", list(vals), avg))
    return acc_rows, steps_rows, chosen, common


def run_sources(root, pattern):
    """The paths (relative to ``root``, sorted) matching the glob ``pattern``, and the run paths of the
    packed runs matching ``pattern`` + RUN_SUFFIX (``results/lra/*_cpu`` finds ``text_dense_cpu.tar.xz``
    as ``results/lra/text_dense_cpu``). Raises SourceMissing when none matches."""
    found = {os.path.relpath(p, root) for p in glob.glob(os.path.join(root, pattern))}
    found |= {os.path.relpath(p, root)[: -len(RUN_SUFFIX)] for p in glob.glob(os.path.join(root, pattern + RUN_SUFFIX))}
    if not found:
        raise SourceMissing(f"a rendered block needs {pattern}, which matches no file")
    return sorted(found)


def lra_chosen(root, pattern):
    """``build_tables``'s chosen runs {(label, task): run} of the LRA runs matching the glob ``pattern``
    (``run_sources``; folders searched recursively). Raises SourceMissing when none holds an LRA run."""
    runs = read_lra_runs(find_runs([os.path.join(root, p) for p in run_sources(root, pattern)]))
    if not runs:
        raise SourceMissing(f"a rendered block needs LRA runs (final_metrics.json) under {pattern}; there are none")
    return build_tables(runs)[2]


def render_lra_text(root, folder):
    """Our LRA Text runs under ``folder`` (one row per attention, ``ORDER``): test accuracy %, steps/s,
    the CPU (``short_cpu``), and the published Text accuracies of the attention (PUBLISHED_ACCURACY,
    a run made under an older default of its method named so, ``older_defaults``;
    sources shortened by SHORT_SOURCES). Raises SourceMissing when ``folder`` holds no LRA run."""
    chosen = lra_chosen(root, folder)
    labels = [a for a in ORDER if (a, "text") in chosen] + sorted(
        a for a, t in chosen if t == "text" and a not in ORDER)
    rows = []
    for label in labels:
        run = chosen[(label, "text")]
        published = ", ".join(f"{fmt_cell(vals[1])} ({SHORT_SOURCES.get(src, src)})"
                              for a, src, vals, _ in PUBLISHED_ACCURACY if a == label and vals[1] is not None)
        rows.append([display_name(label) + bracketed(run["older_defaults"]), fmt_cell(lra_cell(run)),
                     f"{run['steps_per_s']:.2f}",
                     short_cpu(run["cpu"]), published or "-"])
    return _markdown(["attention", "test acc % (ours, one seed)", "steps/s (ours)", "CPU",
                      "published Text accuracy %"], rows)


def starred(run, notes):
    """The stars that footnote a run made under an older default of its method ("" for none):
    one star for the first such note of a table, two for the second...; ``notes`` (note -> stars)
    collects them for ``star_notes``."""
    return "*" * notes.setdefault(run["older_defaults"], len(notes) + 1) if run["older_defaults"] else ""


def star_notes(notes):
    """The footnote lines of ``starred``'s ``notes``: "* <note>."."""
    return [f"{'*' * n} {note}." for note, n in notes.items()]


def render_lra_tasks(root, pattern):
    """docs/lra.md's table of our reduced LRA runs matching the glob ``pattern`` (``lra_chosen``):
    one row per task (its test examples and steps x batch), the majority-class rate of the test
    split, then per attention (``ORDER``) the test accuracy % with the training steps per second;
    "fail" marks a run at chance (``at_chance``), a run made under an older default of its method
    is footnoted (``older_defaults``), a cell without a run reads "not run". Raises SourceMissing
    when ``pattern`` holds no LRA run."""
    chosen = lra_chosen(root, pattern)
    labels = [a for a in ORDER if any(label == a for label, _ in chosen)] + sorted(
        {a for a, _ in chosen if a not in ORDER})
    notes = {}
    def cell(run):
        if run is None:
            return "not run"
        mark = starred(run, notes)
        accuracy = 100 * run["test_accuracy"]
        text = f"fail ({accuracy:.1f})" if at_chance(run) else f"{accuracy:.1f}"
        return f"{text}{mark} ({run['steps_per_s']:.1f} steps/s)"
    rows = []
    for task, title in zip(TASKS, TITLES):
        runs = [chosen.get((label, task)) for label in labels]
        present = [r for r in runs if r is not None]
        if not present:
            continue
        shape = {(int(r["test_examples"]), r["iters"], r["examples_seen"] // max(r["iters"] or 1, 1)) for r in present}
        examples, iters, batch = sorted(shape)[0]
        what = f"{title} ({examples:,} test examples; {iters:,} steps x {batch})" if len(shape) == 1 else \
            f"{title} (runs of different sizes: " + "; ".join(f"{e:,} test, {i:,} x {b}" for e, i, b in sorted(shape)) + ")"
        majority = {r["majority"] for r in present if r["majority"] is not None}
        rows.append([what, "/".join(f"{100 * m:.1f}" for m in sorted(majority)) or "-", *map(cell, runs)])
    out = _markdown(["task", "majority %", *(display_name(label) for label in labels)], rows)
    cpus = sorted({short_cpu(r["cpu"]) for r in chosen.values()})
    lines = star_notes(notes)
    lines.append(f"Every run on a 2-core {cpus[0]}." if len(cpus) == 1 else
                 "Runs on different CPUs (steps/s do not compare across them): " + ", ".join(cpus) + ".")
    return out + "\n" + "\n".join(lines) + "\n"


def render_lra_text_budgets(root, short, long, attentions=""):
    """docs/lra.md's Text table at two budgets: the test accuracy % of each attention's Text run
    matching the glob ``short`` beside its run matching ``long`` with the step of the weights kept
    (``best_iter``); ``attentions``: a comma list of labels (default: those of both). A run made
    under an older default of its method is footnoted. Raises SourceMissing when a pattern holds no
    LRA run."""
    first, second = lra_chosen(root, short), lra_chosen(root, long)
    wanted = attentions.split(",") if attentions else [a for a in ORDER if (a, "text") in first and (a, "text") in second]
    notes, rows = {}, []
    def cell(run, step=False):
        if run is None:
            return "not run"
        mark = starred(run, notes)
        return f"{100 * run['test_accuracy']:.1f}{mark}" + (f" ({run['best_iter']:,})" if step else "")
    for label in wanted:
        a, b = first.get((label, "text")), second.get((label, "text"))
        rows.append([display_name(label), cell(a), cell(b, step=True)])
    steps = [f"{next(r['iters'] for (_, t), r in runs.items() if t == 'text'):,} steps" for runs in (first, second)]
    out = _markdown(["attention", steps[0], f"{steps[1]} (weights of step)"], rows)
    return out + "".join(f"\n{line}\n" for line in star_notes(notes))


# ----------------------------------------------------------------------------- benchmarks (issue 27's aims)

# the benchmark runs the aims table and the README read: (name in the table, file, method label of
# fastmax p = 2 with chunks of 128 in it, a note on the run)
BENCH = {
    "full": ("the full run", "results/bench_attention/all.json", "fastmax2", "while the machine slowed"),
    "rerun": ("the re-run", "results/bench_attention/rerun_dense_fastmax_tree.json", "fastmax:p=2,chunk_size=128",
              "alone"),
    "no_mmap": ("the re-run with glibc's mmap off", "results/bench_attention/rerun_malloc_no_mmap.json",
                "fastmax:p=2,chunk_size=128", "alone"),
    "check": ("the check", "results/bench_attention/fastmax2_causal_check.json", "fastmax:p=2", "alone"),
}
FASTMAX2_RUNS = ("rerun", "check", "full")  # the measurements of fastmax p = 2 with the default allocator
OLD_CHUNK_LABEL = "fastmax:p=2"  # in the re-run: fastmax p = 2 at the chunk default before ce5898c
BENCH_MANIFEST = "results/bench_attention/manifest.json"
TREE_BENCH = "results/bench_tree/bench_tree_1024_run*.json"
TREE_AIM_SPEEDUP = 100  # issue 27: the CPU kernel 100x the authors' np_attention.py (L 1024, E 0.5, one thread)
DENSE_AIM = "dense_linear_time_per_token_(\\d+)_over_(\\d+)"
FASTMAX_AIM = "fastmax2_causal_D(\\d+)_speedup_vs_sdpa_at_(\\d+)"


def _bench(root, key):
    """(data, date) of a BENCH run: its JSON and the day of its manifest entry."""
    path = BENCH[key][1]
    data = load_json(root, path)
    entry = load_json(root, BENCH_MANIFEST).get(os.path.basename(path)[: -len(".json")], {})
    return data, (entry.get("date") or "")[:10]


def _aim(summary, pattern):
    """(key, numbers in the key, value) of the aim whose name matches ``pattern`` in a bench summary."""
    for key, value in summary["aims"].items():
        m = re.fullmatch(pattern, key)
        if m:
            return key, [int(x) for x in m.groups()], value
    raise SourceMissing(f"a rendered block needs the aim {pattern} in a benchmark summary; it has none")


def dense_ratio(data, mode="forward", causal=True):
    """(ratio, target) of the dense aim (time per token at the long T over the short one) of a bench
    JSON in ``mode`` and ``causal`` (the D its summary measured)."""
    _, _, aims = _aim(data["summary"], DENSE_AIM)
    for key, value in aims.items():
        m = re.fullmatch(r"(\w+) causal=(True|False) D=(\d+)", key)
        if m and m.group(1) == mode and m.group(2) == str(causal):
            return value["ratio"], value["target"]
    raise SourceMissing(f"a rendered block needs the dense aim in {mode} causal={causal}; the summary has none")


def bench_seconds(data, label, mode, T, D, causal=True):
    """The median seconds of ``label`` in one configuration of a bench JSON (None when not measured)."""
    for r in data["rows"]:
        if (r["method"], r["mode"], r["causal"], r["D"], r["T"]) == (label, mode, causal, D, T):
            return r["seconds"]
    return None


def sdpa_speedup(data, label, mode, T, D, causal=True):
    """SDPA's seconds over ``label``'s at T (None when either is missing)."""
    ours, ref = bench_seconds(data, label, mode, T, D, causal), bench_seconds(data, "sdpa", mode, T, D, causal)
    return ref / ours if ours and ref else None


def fastmax2_runs(root):
    """[(run key, date, forward speedup, forward + backward speedup, data)] of causal fastmax p = 2
    against SDPA in the FASTMAX2_RUNS (D and T those of the bench summary's aim)."""
    out = []
    for key in FASTMAX2_RUNS:
        data, date = _bench(root, key)
        _, (D, T), _ = _aim(data["summary"], FASTMAX_AIM)
        label = BENCH[key][2]
        out.append((key, date, sdpa_speedup(data, label, "forward", T, D),
                    sdpa_speedup(data, label, "forward_backward", T, D), data))
    return out, D, T


def median_range(values, fmt=".2f"):
    """(median, "lo-hi") of ``values`` formatted with ``fmt``."""
    return f"{statistics.median(values):{fmt}}", f"{min(values):{fmt}}-{max(values):{fmt}}"


def tree_speedups(root):
    """[(threads, speedup, our seconds, their seconds)] of the tree attention CPU kernel (float32)
    against the authors' code (the bench's ``casinoformer`` rows) in the TREE_BENCH runs, and the
    (L, E, H, D) of those rows."""
    out, setting = [], None
    for rel in sources(root, TREE_BENCH):
        data = load_json(root, rel)
        for s in data["speedups"]:
            if s["slow"] == "casinoformer" and s["fast"] == "cpu" and s["fast_dtype"] == "float32":
                out.append((s["fast_threads"], s["speedup"], s["fast_seconds"], s["slow_seconds"]))
                setting = (s["L"], s["E"], data["config"]["H"], data["config"]["D"])
    return out, setting


# the tree benchmark's implementations, as its tables name them: (impl, threads, dtype) -> row label
TREE_BENCH_ROWS = [
    (("casinoformer", 1, "float64"), "authors' `np_attention.py` (float64, 1 thread)"),
    (("numpy_authors", 1, "float64"), "our re-implementation of their NumPy design"),
    (("cpu", 1, "float32"), "CPU kernel, float32, 1 thread"),
    (("cpu", 1, "float64"), "CPU kernel, float64, 1 thread (their precision)"),
    (("cpu", 2, "float32"), "CPU kernel, float32, 2 threads"),
    (("vectorized", 1, "float32"), "`vectorized` (PyTorch ops), float32, 1 thread"),
    (("reference", 1, "float64"), "reference (one query at a time)"),
    (("softmax", 1, ""), "exact attention, SDPA, 1 thread"),
]


def render_tree_bench(root, *files, L="1024", E="0.5"):
    """docs/tree_attention.md's speed tables: seconds per block of each implementation
    (TREE_BENCH_ROWS) at block length ``L`` and ``E`` (exact SDPA at E = 1) in each benchmark run
    (``files``: scripts/bench/tree.py JSONs, a column each, named by file), 3 significant digits,
    "(extrapolated)" where the run timed a subset of queries; in brackets for our kernel and the
    vectorized path, how many times faster than the authors' code in the same run. Raises
    SourceMissing when a file is absent or has no row of the authors' code at (L, E)."""
    L, E = marker_number("tree_bench", L), marker_number("tree_bench", E, float)
    runs = []
    for rel in files:
        rows = load_json(root, rel)["rows"]
        timed = {(r["impl"], r["threads"], r["dtype"]): r for r in rows
                 if r["L"] == L and (r["E"] == E or r["impl"] == "softmax")}
        if ("casinoformer", 1, "float64") not in timed:
            raise SourceMissing(f"a rendered block needs the authors' code at L = {L}, E = {E:g} in {rel}; it has none")
        runs.append((os.path.splitext(os.path.basename(rel))[0], timed))
    table = []
    for key, label in TREE_BENCH_ROWS:
        if not any(key in timed for _, timed in runs):
            continue
        cells = []
        for _, timed in runs:
            row = timed.get(key)
            if row is None:
                cells.append("-")
                continue
            text = f"{row['seconds']:.3g}" + (" (extrapolated)" if row["extrapolated"] else "")
            if key[0] in ("cpu", "vectorized"):
                text += f" ({timed[('casinoformer', 1, 'float64')]['seconds'] / row['seconds']:.1f}x)"
            cells.append(text)
        table.append([label, *cells])
    return _markdown(["implementation", *(f"`{name}`" for name, _ in runs)], table)


LAYER_METHODS = {"danet_linear": "DANet linear", "danet_quadratic": "DANet quadratic", "danet_auto": "DANet auto",
                 "softmax_layer": "softmax"}
MODE_SHORT = {"forward": "fwd", "forward_backward": "fwd+bwd"}


def thousands(tokens_per_s):
    """Tokens/s as the layer tables print them: 509k, 32.0k, 950."""
    if tokens_per_s >= 1e5:
        return f"{tokens_per_s / 1e3:.0f}k"
    return f"{tokens_per_s / 1e3:.1f}k" if tokens_per_s >= 1e3 else f"{tokens_per_s:.0f}"


def render_bench_layer(root, bench_json, methods="danet_linear,danet_quadratic,softmax_layer"):
    """docs/dense_attention.md's layer table: tokens/s of each layer method (``methods``, LAYER_METHODS
    names) per T, forward then forward + backward, from the layer suite's JSON of
    scripts/bench/attention.py (``--suite layer``); a cell the run skipped says why in short
    ("skipped (memory)"). Raises SourceMissing when the file is absent or has none of ``methods``."""
    rows = load_json(root, bench_json)["rows"]
    wanted = [m for m in methods.split(",") if m]
    by = {(r["method"], r["mode"], r["T"]): r for r in rows if r["method"] in wanted}
    if not by:
        raise SourceMissing(f"a rendered block needs the methods {methods} in {bench_json}; it has none")
    modes = [m for m in MODE_SHORT if any(k[1] == m for k in by)]
    columns = [(method, mode) for mode in modes for method in wanted]
    table = []
    for T in sorted({k[2] for k in by}):
        cells = []
        for method, mode in columns:
            r = by.get((method, mode, T))
            if r is None:
                cells.append("-")
            elif r.get("tokens_per_s") is None:
                cells.append("skipped" + (" (memory)" if "memory" in r.get("note", "") else ""))
            else:
                cells.append(thousands(r["tokens_per_s"]))
        table.append([f"{T:,}", *cells])
    return _markdown(["T", *(f"{LAYER_METHODS.get(m, m)} {MODE_SHORT[mode]}" for m, mode in columns)], table)


def render_bench_pair(root, bench_json, first="", second="", cells="", T="", base="sdpa"):
    """Two methods' times over ``base``'s in one run of scripts/bench/attention.py (``bench_json``),
    as "first / second" per cell (one decimal), a row per ``cells`` entry ("D:mode:causal",
    mode forward or forward_backward, causal true or false; comma list) and a column per ``T`` (comma
    list); e.g. docs/fastmax.md's chunked / explicit table. Raises SourceMissing when a cell has no
    time of a method or of ``base`` in the run, RenderError when an argument is missing (the methods
    are key=value arguments: their specs hold "=")."""
    if not (first and second and cells and T):
        raise RenderError("bench_pair: give first=<spec> second=<spec> cells=D:mode:causal,... T=t,...")
    rows = load_json(root, bench_json)["rows"]
    seconds = {(r["spec"], r["D"], r["mode"], r["causal"], r["T"]): r["seconds"] for r in rows if r.get("seconds")}
    Ts = marker_numbers("bench_pair", T)
    table = []
    for D, mode, causal in marker_cells("bench_pair", cells, ("D", "mode", "causal")):
        cell = f"{D}:{mode}:{causal}"
        key = (marker_number("bench_pair", D), mode, causal == "true")
        ratios = []
        for t in Ts:
            try:
                ratios.append(" / ".join(f"{seconds[(m, *key, t)] / seconds[(base, *key, t)]:.1f}" for m in (first, second)))
            except KeyError:
                raise SourceMissing(f"a rendered block needs {first}, {second} and {base} at D = {D}, {mode}, "
                                    f"causal {causal}, T = {t} in {bench_json}") from None
        table.append([D, f"{mode.replace('_', '+')}, {'causal' if key[2] else 'non-causal'}", *ratios])
    return _markdown(["D", "mode", *(f"T = {t}" for t in Ts)], table)


def render_authors_fastmax(root, compare_json, cells=""):
    """docs/fastmax.md's speed and memory table against the authors' PyTorch paths, from the
    ``timing_rows`` of scripts/bench/authors_fastmax.py's JSON: a row per ``cells`` entry
    ("p:causal:mode:T", causal yes or no, mode forward or forward_backward; comma list), our time and
    peak memory, their ``fastmax_function``'s, their einops variant's time (3 significant digits),
    and their time over ours (``factor``; "skipped (memory)" where the run skipped a call). Raises SourceMissing when
    a cell has no row of ours or of ``fastmax_function``, RenderError without ``cells``."""
    if not cells:
        raise RenderError("authors_fastmax: give cells=p:causal:mode:T,...")
    rows = load_json(root, compare_json)["timing_rows"]
    by = {(r["method"], r["p"], r["causal"], r["mode"], r["T"]): r for r in rows}

    def timed(method, key, memory=True):
        r = by.get((method, *key))
        if r is None or r.get("seconds") is None:
            return "skipped" + (" (memory)" if r is not None and "memory" in r.get("note", "") else "")
        return f"{r['seconds']:#.3g} s" + (f", {r['peak_mb']:,.0f} MB" if memory and r.get("peak_mb") is not None else "")

    table = []
    for p, causal, mode, T in marker_cells("authors_fastmax", cells, ("p", "causal", "mode", "T")):
        cell = f"{p}:{causal}:{mode}:{T}"
        key = (marker_number("authors_fastmax", p), causal == "yes", mode, marker_number("authors_fastmax", T))
        ours, theirs = by.get(("ours", *key)), by.get(("fastmax_function", *key))
        if not (ours and theirs and ours.get("seconds") and theirs.get("seconds")):
            raise SourceMissing(f"a rendered block needs ours and fastmax_function at {cell} in {compare_json}")
        table.append([p, causal, mode.replace("_", " + "), f"{int(T):,}", timed("ours", key),
                      timed("fastmax_function", key), timed("fastattention_einops", key, memory=False),
                      factor(theirs["seconds"] / ours["seconds"])])
    return _markdown(["p", "causal", "mode", "T", "ours", "their `fastmax_function`", "their einops",
                      "theirs / ours"], table)


LINEARITY_BOUND = 1.5  # issue 26: time(16384) / (16 time(1024)) at most this, and faster than SDPA at 16384


def factor(x):
    """A speed factor as the docs print it: 25x, 5.8x, 1.04x (two decimals near and below 1)."""
    return f"{x:.0f}x" if x >= 10 else f"{x:.1f}x" if x >= 1.1 else f"{x:.2f}x"


def render_bench_linearity(root, bench_json, methods="", bold="misses"):
    """docs/baselines.md's speed table from the full benchmark's summary (``bench_json``): per method
    and call (forward, causal forward, forward + backward, causal forward + backward),
    time(16384) / (16 time(1024)) and SDPA's time over the method's at 16384, a miss of the issue's
    bounds (LINEARITY_BOUND, faster than SDPA) in bold unless ``bold`` is "none", "n/a" where the
    method has no such call; methods named as the docs name them (``display_name``). Raises
    SourceMissing when the summary lacks a method of ``methods`` (a comma list, or a semicolon list
    when a method's spec holds commas)."""
    summary = load_json(root, bench_json)["summary"]
    linear = {(r["method"], r["mode"], r["causal"]): r["ratio"] for r in summary["linearity_16384_vs_16x1024"]}
    speed = {(r["method"], r["mode"], r["causal"]): r["speedup"] for r in summary["speedup_vs_sdpa_at_16384"]}
    calls = [("forward", False), ("forward", True), ("forward_backward", False), ("forward_backward", True)]
    table = []
    for method in [m for m in methods.split(";" if ";" in methods else ",") if m]:
        if not any(k[0] == method for k in linear):
            raise SourceMissing(f"a rendered block needs {method} in the summary of {bench_json}; it has none")
        cells = []
        for mode, causal in calls:
            ratio, up = linear.get((method, mode, causal)), speed.get((method, mode, causal))
            if ratio is None or up is None:
                cells.append("n/a")
                continue
            text_ratio = f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.2f}"
            text_up = factor(up)
            if bold != "none":
                text_ratio = text_ratio if ratio <= LINEARITY_BOUND else f"**{text_ratio}**"
                text_up = text_up if up > 1 else f"**{text_up}**"
            cells.append(f"{text_ratio} / {text_up}")
        table.append([display_name(method), *cells])
    return _markdown(["method", "forward", "causal forward", "forward + backward", "causal forward + backward"], table)


def render_lm_runs(root, throughput, *runs, val_iters=""):
    """Language-model runs side by side (docs/fastmax.md, docs/dense_attention.md): a row per run
    "label@train_log.jsonl@test.json@config" (``runs``; the label an attention label, shown by
    ``display_name``): the validation perplexity at each of ``val_iters`` (comma list; default the
    last evaluation; ``val_ppl``, else exp of the validation loss), the test perplexity of the
    eval_ppl.py JSON, the training tokens/s and the wall time of the run (its log's last
    ``elapsed_s``). ``throughput``: "log" for the median of the run's own logged tokens/s, else
    scripts/bench/train_throughput.py's JSON, where the config was measured side by side with the
    others (median (min-max) over its rounds). Raises SourceMissing when a file is absent or lacks
    an evaluation or the config, RenderError for a malformed run."""
    side_by_side = load_json(root, throughput) if throughput != "log" else None
    table, iters = [], []
    for run in runs:
        try:
            label, log, test, config = run.split("@")
        except ValueError:
            raise RenderError(f"lm_runs: {run!r} is not label@train_log@test_json@config") from None
        records = load_jsonl(root, log)
        evals = {r["iter"]: r["eval"] for r in records if "eval" in r}
        iters = marker_numbers("lm_runs", val_iters) if val_iters else [max(evals, default=0)]
        if not all(i in evals for i in iters):
            raise SourceMissing(f"a rendered block needs the evaluations at {iters} in {log}; it has {sorted(evals)}")
        val = [evals[i].get("val_ppl") or math.exp(evals[i].get("val_loss", evals[i].get("val"))) for i in iters]
        if side_by_side is None:
            speed = f"{statistics.median(r['tok_per_s'] for r in records if 'tok_per_s' in r):,.0f}"
        else:
            speeds = [r["tok_per_s"] for r in side_by_side["rows"] if r["config"] == config]
            if not speeds:
                raise SourceMissing(f"a rendered block needs {config} in {throughput}; it has none")
            speed = f"{statistics.median(speeds):,.0f} ({min(speeds):,.0f}-{max(speeds):,.0f})"
        seconds = round(max(r.get("elapsed_s", 0) for r in records))
        table.append([display_name(label), " / ".join(f"{v:.2f}" for v in val),
                      f"{load_json(root, test)['value']:.2f}", speed, f"{seconds // 60} min {seconds % 60} s"])
    speed_header = "training tokens/s (median of the run's log)" if side_by_side is None else \
        "training tokens/s, side by side"
    return _markdown(["attention", f"val ppl at {' / '.join(map(str, iters))}", "test ppl, `blocks`", speed_header,
                      "wall time of the run (training + its evaluations)"], table)


def _met(values, ok):
    """"yes" when ``ok`` holds for every value, "no" for none, else "in k of n runs"."""
    hits = sum(1 for v in values if ok(v))
    return "yes" if hits == len(values) else "no" if hits == 0 else f"in {hits} of {len(values)} runs"


def method_params(data, label):
    """The attention parameters of the method ``label`` in a bench JSON ({} when it has none)."""
    for m in data["methods"]:
        if m["label"] == label:
            return m["params"]
    raise SourceMissing(f"a rendered block needs the method {label} in a benchmark file; it has none")


def _dense_aim_row(root):
    full, full_date = _bench(root, "full")
    rerun, rerun_date = _bench(root, "rerun")
    no_mmap, _ = _bench(root, "no_mmap")
    _, (t1, t0), _ = _aim(full["summary"], DENSE_AIM)

    def dense(data, mode="forward", causal=True):
        return dense_ratio(data, mode, causal)[0]

    target = dense_ratio(full)[1]
    met = _met([dense(full), dense(rerun), dense(no_mmap)], lambda v: v <= target)
    return [
        f"dense, linear regime: time per token at T = {t1} over that at {t0} (forward, causal)", f"<= {target:g}",
        f"{dense(full):.2f} in the full run of {full_date} (non-causal {dense(full, causal=False):.2f}; forward + "
        f"backward {dense(full, 'forward_backward'):.2f} causal, {dense(full, 'forward_backward', False):.2f} "
        f"non-causal); {dense(rerun):.2f} in the re-run of {rerun_date} after fb0ec13 ({dense(no_mmap):.2f} with "
        "glibc's mmap off)",
        "no: see the re-run (the output's fresh pages and the memory bandwidth)" if met == "no" else met]


def _fastmax_aim_row(root):
    runs, D, T = fastmax2_runs(root)
    by = {key: data for key, _, _, _, data in runs}
    full, check, rerun = by["full"], by["check"], by["rerun"]
    target = _aim(full["summary"], FASTMAX_AIM)[2]["forward"]["target"]
    fwd, bwd = [r[2] for r in runs], [r[3] for r in runs]
    (fmed, frange), (bmed, brange) = median_range(fwd), median_range(bwd)
    chunk = method_params(rerun, BENCH["rerun"][2])["chunk_size"]
    per_run = []
    for key, date, f, b, _ in runs:
        text = f"{BENCH[key][0]} of {date}: {f:.2f} / {b:.2f}"
        if key == "check":
            text += f" (medians of {check['settings']['repeats']} calls, {BENCH[key][3]}"
            for m in check["methods"]:
                if "normalization" in m["params"]:
                    text += (f"; `normalization={m['params']['normalization']}` beside it "
                             f"{sdpa_speedup(check, m['label'], 'forward', T, D):.2f} / "
                             f"{sdpa_speedup(check, m['label'], 'forward_backward', T, D):.2f}: the normalization "
                             "is not the cost")
            text += ")"
        elif key == "full":
            text += (f" {BENCH[key][3]} (fastmax's forward took "
                     f"{bench_seconds(full, BENCH['full'][2], 'forward', T, D):.2f} s there, "
                     f"{bench_seconds(check, BENCH['check'][2], 'forward', T, D):.2f} s in the check; SDPA's "
                     f"{bench_seconds(full, 'sdpa', 'forward', T, D):.2f} s and "
                     f"{bench_seconds(check, 'sdpa', 'forward', T, D):.2f} s)")
        else:
            text += f" ({BENCH[key][3]})"
        per_run.append(text)
    old = OLD_CHUNK_LABEL
    return [
        f"causal fastmax p = 2, D = {D}: SDPA time / fastmax time at T = {T}", f"> {target:g}",
        f"chunks of {chunk} (the default since ce5898c), {number_word(len(runs))} runs: forward {fmed} (median; "
        f"range {frange}), forward + backward {bmed} (range {brange}); forward / forward + backward per run: "
        + "; ".join(per_run) + f". The old default chunk (the re-run's `{old}`): "
        f"{sdpa_speedup(rerun, old, 'forward', T, D):.2f} / {sdpa_speedup(rerun, old, 'forward_backward', T, D):.2f}",
        _fastmax_verdict(fwd, bwd, target)]


def _tree_aim_row(root):
    speedups, (L, E, H, D) = tree_speedups(root)
    one = sorted(s for s in speedups if s[0] == 1)
    two = sorted(s[1] for s in speedups if s[0] == 2)
    met = _met([s[1] for s in one], lambda v: v >= TREE_AIM_SPEEDUP)
    return [
        f"tree attention CPU kernel vs the authors' `np_attention.py`, L = {L}, E = {E:g}, H = {H}, D = {D}, one "
        "thread, float32", f">= {TREE_AIM_SPEEDUP}x",
        ", ".join(f"{s[1]:.1f}x" for s in one) + f" in {number_word(len(one))} runs of `scripts/bench/tree.py` "
        f"({1e3 * min(s[2] for s in one):.1f}-{1e3 * max(s[2] for s in one):.1f} ms against "
        f"{min(s[3] for s in one):.2f}-{max(s[3] for s in one):.2f} s); {min(two):.0f}-{max(two):.0f}x on 2 threads",
        "no, see `docs/tree_attention.md`" if met == "no" else met]


def render_bench_aims(root):
    """Issue 27's performance aims (docs/benchmark.md) from the BENCH runs and TREE_BENCH: the dense
    time per token ratio (target from the bench summary), fastmax p = 2 against SDPA (median and range
    over FASTMAX2_RUNS, then each run; never the best alone), the tree attention kernel against the
    authors' code (TREE_AIM_SPEEDUP). Raises SourceMissing when a file or an entry is absent."""
    return _markdown(["aim", "target", "measured", "met"], [_dense_aim_row(root), _fastmax_aim_row(root),
                                                             _tree_aim_row(root)])


def _fastmax_verdict(fwd, bwd, target):
    f, b = sum(v > target for v in fwd), sum(v > target for v in bwd)
    if f == len(fwd) and b == len(bwd):
        return "**yes** in every run"
    return (f"not reliably: faster forward in {f} of {len(fwd)} runs, forward + backward in {b} of {len(bwd)} "
            f"(median {statistics.median(fwd):.2f} / {statistics.median(bwd):.2f})")


# ----------------------------------------------------------------------------- docs/fastmax.md's benchmark

FASTMAX_METHODS = (("fastmax1_pytorch", "fastmax p = 1"), ("fastmax2_pytorch", "fastmax p = 2"), ("sdpa", "SDPA"))
MODES = (("forward", "forward"), ("forward_backward", "forward + backward"))


def _seconds(x):
    return f"{x:.2g}" if x < 0.01 else f"{x:.3g}"


def render_fastmax_grid(root, grid, memory, retimed=""):
    """docs/fastmax.md's benchmark tables from the attention benchmark's JSONs ``grid`` (the T x D
    grid of fastmax p = 1, p = 2 and SDPA, with its ``targets``) and ``memory`` (fastmax p = 2 beside
    the authors' formulation at T = 4096): seconds per causal call at T = 1,024 and 16,384, the
    issue's targets met or not (the speed targets beside their values in ``retimed``, a later run of
    the target cells, when given), and the break-even T against SDPA. Raises SourceMissing when a
    file or an entry is absent."""
    data, mem = load_json(root, grid), load_json(root, memory)
    again = load_json(root, retimed)["targets"] if retimed else None
    seconds = {(r["method"], r["mode"], r["causal"], r["D"], r["T"]): r["seconds"] for r in data["rows"]}
    rows = []
    for D in sorted({r["D"] for r in data["rows"]}):
        for mode, mode_name in MODES:
            for T in (1024, 16384):
                try:
                    rows.append([D, mode_name, f"{T:,}", *(_seconds(seconds[m, mode, True, D, T]) for m, _ in FASTMAX_METHODS)])
                except KeyError as e:
                    raise SourceMissing(f"{grid} has no cell {e.args[0]}") from None
    out = ["Seconds per call, causal (the GPT's case):", "",
           _markdown(["D", "mode", "T", *(name for _, name in FASTMAX_METHODS)], rows).rstrip("\n")]

    targets = data["targets"]
    def speedup_row(key, label):
        runs = [targets[key], *([again[key]] if again else [])]
        met = all(t[m]["speedup"] >= t[m]["target"] for t in runs for m in ("forward", "forward_backward"))
        def values(m):
            return f"{runs[0][m]['speedup']:.1f}x" + (f" ({runs[1][m]['speedup']:.1f}x re-timed)" if again else "")
        return [label, f"forward {values('forward')}, forward + backward {values('forward_backward')}",
                ("met" + (" in both runs" if again else "")) if met else "not met"]
    mem_rows = {r["method"]: r for r in mem["rows"]}
    ours, theirs = mem_rows["fastmax2_pytorch"], mem_rows["authors2"]
    ratio = theirs["peak_mb"] / ours["peak_mb"]
    forward = [t for t in targets["linearity_16384_vs_16x1024"] if t["mode"] == "forward"]
    backward = {p: [t["ratio"] for t in targets["linearity_16384_vs_16x1024"]
                    if t["mode"] == "forward_backward" and t["method"] == f"fastmax{p}_pytorch"] for p in (1, 2)}
    lo, hi = min(t["ratio"] for t in forward), max(t["ratio"] for t in forward)
    target_rows = [
        speedup_row("causal_p1_D64_T16384_speedup_vs_sdpa", "causal p = 1, D = 64, T = 16384: ≥ 10x faster than SDPA"),
        speedup_row("causal_p2_D32_T16384_speedup_vs_sdpa", "causal p = 2, D = 32, T = 16384: faster than SDPA"),
        ["p = 2 causal forward + backward, T = 4096, D = 32: ≥ 10x less peak memory than the authors' formulation",
         f"{ours['peak_mb']:,.1f} MB vs {theirs['peak_mb']:,.0f} MB: {ratio:.0f}x less (theirs takes "
         f"{theirs['seconds']:.0f} s, ours {ours['seconds']:.2f} s)", "met" if ratio >= 10 else "not met"],
        [f"forward time linear in T: t(16384) ≤ 1.2 · 16 · t(1024)",
         f"ratio t(16384) / (16 · t(1024)) between {lo:.2f} and {hi:.2f} for all {len(forward)} forward configurations",
         "met" if all(t["ok"] for t in forward) else "not met"],
        ["(no target) forward + backward, the same ratio",
         f"p = 1: {min(backward[1]):.2f}-{max(backward[1]):.2f}; p = 2: {min(backward[2]):.2f}-{max(backward[2]):.2f}", "-"],
    ]
    out += ["", "The issue's targets, read from the same run (`targets` in the JSON)"
            + (f", the speed targets also from the re-timed run `{retimed}`" if again else "")
            + f", and for memory from `{memory}`:", "", _markdown(["target", "measured", ""], target_rows).rstrip("\n")]

    even = {(t["method"], t["mode"], t["causal"], t["D"]): t["T"] for t in targets["break_even_T_vs_sdpa"]}
    def shown_T(T):
        return T if isinstance(T, str) else ("not within the grid" if T is None else f"{T:,}")
    even_rows = [[D, "yes" if causal else "no", mode_name,
                  *(shown_T(even[f"fastmax{p}_pytorch", mode, causal, D]) for p in (1, 2))]
                 for D in sorted({k[3] for k in even}) for causal in (False, True) for mode, mode_name in MODES]
    out += ["", "Break-even T against SDPA (the T from which fastmax is faster at every larger measured T, "
            "interpolated on the log-log grid; \"below grid\" = faster already at the smallest T):", "",
            _markdown(["D", "causal", "mode", "p = 1", "p = 2"], even_rows)]
    return "\n".join(out)


# ----------------------------------------------------------------------------- README.md's Results table


def read_text(root, rel):
    """The text of the file ``root/rel``. Raises SourceMissing when it does not exist."""
    with open(source(root, rel)) as f:
        return f.read()


def run_text(root, run, name):
    """The text of the file ``name`` of the run ``root/run`` (its folder or packed file). Raises
    SourceMissing when the run or the file does not exist."""
    try:
        return open_run(os.path.join(root, run)).read_text(name)
    except RunNotFound:
        raise SourceMissing(f"a rendered block needs {run}/{name} (in the run folder or {run}{RUN_SUFFIX}), "
                            "which does not exist") from None


def _gpt_mini_fields(root):
    """results/gpt_mini_wikitext2: the parameter count (train_stdout.log), the training time (the last
    elapsed_s of train_log.jsonl), the test perplexity and the context used (test_blocks.json)."""
    log = read_text(root, "results/gpt_mini_wikitext2/train_stdout.log")
    params = re.search(r"model: (\S+) parameters", log)
    if not params:
        raise SourceMissing("a rendered block needs the parameter count (model: ... parameters) in "
                            "results/gpt_mini_wikitext2/train_stdout.log; it has none")
    seconds = max(r.get("elapsed_s", 0) for r in load_jsonl(root, "results/gpt_mini_wikitext2/train_log.jsonl"))
    test = load_json(root, "results/gpt_mini_wikitext2/test_blocks.json")
    return {"params": params.group(1), "minutes": int(seconds // 60), "ppl": f"{test['value']:.2f}",
            "protocol": test["protocol"], "context": about(context_used(test["per_position"]))}


def binned_nll(per_position, edges):
    """[(lo, hi, mean NLL)] of the context-length bins [lo, hi) between consecutive ``edges`` that
    hold scored tokens, each the count-weighted mean of eval_ppl.py's ``per_position`` (its
    context_length, count and mean_nll lists; nats per token)."""
    bins = []
    for lo, hi in zip(edges, edges[1:]):
        pairs = [(c, m) for length, c, m in zip(*(per_position[k] for k in ("context_length", "count", "mean_nll")))
                 if lo <= length < hi]
        if pairs:
            bins.append((lo, hi, sum(c * m for c, m in pairs) / sum(c for c, _ in pairs)))
    return bins


def context_used(per_position):
    """The number of context tokens a model gains from: mean NLL per token in bins of context length
    [1], [2, 8), [8, 32), ... (factors of 4); the lower edge of the first bin whose mean NLL is not
    below the previous bin's (``per_position``: eval_ppl.py's context_length, count, mean_nll)."""
    edges = [1, 2]
    while edges[-1] <= max(per_position["context_length"]):
        edges.append(edges[-1] * 4)
    means = [(lo, mean) for lo, _, mean in binned_nll(per_position, edges)]
    for (_, before), (lo, mean) in zip(means, means[1:]):
        if mean >= before:
            return lo
    return means[-1][0]


def render_per_position(root, eval_json, edges="1,2,8,32,128,512,768,1024"):
    """docs/gpt_mini_wikitext2.md's context table: the mean test NLL (nats per token) by the number of
    tokens of context, in the bins [lo, hi) between consecutive ``edges``, from the ``per_position``
    field of an eval_ppl.py JSON (``eval_json``, made with --per_position=True). Raises
    SourceMissing when the file or its per_position field is absent."""
    record = load_json(root, eval_json)
    if "per_position" not in record:
        raise SourceMissing(f"a rendered block needs the per_position field of {eval_json} (eval_ppl.py "
                            f"--per_position=True); it has none")
    bins = binned_nll(record["per_position"], marker_numbers("per_position", edges))
    return _markdown(["context length", *(f"{lo}" if hi == lo + 1 else f"{lo}-{hi - 1}" for lo, hi, _ in bins)],
                     [["mean NLL", *(f"{mean:.3f}" for _, _, mean in bins)]])


def render_table_file(root, path, n="1"):
    """The ``n``-th markdown table (1-based) of a table tool's output ``path`` (a .md under results/),
    verbatim. Only for a file that ``tests/scripts/test_results_rebuild.py`` makes again from the
    committed runs (its test checks that every such block names one), so the table stays the
    tool's. Raises SourceMissing when the file is absent, RenderError when it has fewer tables."""
    tables, current = [], []
    for line in read_text(root, path).splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    k = marker_number("table_file", n)
    if not 1 <= k <= len(tables):
        raise RenderError(f"table_file: {path} has {len(tables)} table(s), not a table number {n}")
    return "\n".join(tables[k - 1]) + "\n"


# tree attention's samplers in the order of the paper's Figure 2, and their short names there
# (the tree sweep's and the recall tree study's tables and plots)
SAMPLER_ORDER = ["uniform", "edh", "alignment", "positive_alignment", "rff", "favor_plus", "favor_plus_relu"]
SAMPLER_LABEL = {"uniform": "Uniform", "edh": "EDH", "alignment": "Align.", "positive_alignment": "Pos. Align.",
                 "rff": "RFF", "favor_plus": "FAVOR+", "favor_plus_relu": "FAVOR+ReLU"}


def render_tree_sweep(root, table_csv, protocol="blocks", normalization="bud_mean", quantity="change"):
    """A tree sweep's table (docs/tree_attention.md) from the "config" rows of ``tree_sweep_table``'s
    CSV (``table_csv``) for ``protocol`` and ``normalization``: a row per sampler, a column per E,
    each cell mean ± sd across sampling seeds of ``quantity``, "change" (the paired change of
    perplexity against exact attention, 100 (exp(NLL_tree - NLL_exact) - 1) %) or "value" (the
    protocol's metric); then the inner products as a fraction of exact attention's. Raises
    SourceMissing when the CSV has no such rows, RenderError for another ``quantity``."""
    if quantity not in ("change", "value"):
        raise RenderError(f"tree_sweep: quantity={quantity!r}; allowed: change, value")
    rows = [r for r in load_csv(root, table_csv) if r["row"] == "config" and r["attention"] == "tree"
            and r["protocol"] == protocol and r["normalization"] == normalization]
    if not rows:
        raise SourceMissing(f"a rendered block needs the tree rows ({protocol}, {normalization}) of {table_csv}")
    Es = sorted({float(r["E"]) for r in rows})
    by = {(r["sampler"], float(r["E"])): r for r in rows}
    samplers = sorted({r["sampler"] for r in rows}, key=lambda s: (SAMPLER_ORDER.index(s) if s in SAMPLER_ORDER
                                                                  else len(SAMPLER_ORDER), s))
    columns = {"change": ("change_pct", "change_pct_std", "+.2f", ".2f"), "value": ("value", "std", ".1f", ".1f")}
    mean_key, sd_key, mean_format, sd_format = columns[quantity]

    def cell(r):
        mean, sd = float(r[mean_key]), float(r[sd_key] or "nan")
        return f"{mean:{mean_format}}" if math.isnan(sd) else f"{mean:{mean_format}} ± {sd:{sd_format}}"

    table = [[SAMPLER_LABEL.get(s, s), *(cell(by[(s, E)]) if (s, E) in by else "–" for E in Es)] for s in samplers]
    cost = [statistics.fmean(float(r["cost_fraction"]) for r in rows if float(r["E"]) == E) for E in Es]
    table.append(["inner products / exact", *(f"{c:.3f}" for c in cost)])
    return _markdown(["sampler", *(f"E = {E:g}" for E in Es)], table)


def _tree_fields(root):
    """The perplexity change and cost at the smallest E of the default sampler (edh, bud_mean) in
    results/tree_sweep/tree_sweep_table.csv, with the sweep's slices (its exact-attention runs) and the
    change of its sliding-window baseline (``softmax_window<W>``) on the same slices; the swap cell of
    tree attention's scorecard card (``_tree_swap``: the whole test split); the kernel's speed-ups in
    TREE_BENCH."""
    table = load_csv(root, "results/tree_sweep/tree_sweep_table.csv")
    rows = [r for r in table if r["row"] == "config" and r["attention"] == "tree" and r["sampler"] == "edh"
            and r["normalization"] == "bud_mean"]
    windows = sorted((int(m.group(1)), r) for r in table if r["row"] == "config"
                     for m in [re.fullmatch(r"softmax_window(\d+)", r["attention"])] if m)
    exact = [r for r in table if r["row"] == "run" and r["attention"] == "softmax"]
    if not (rows and windows and exact):
        raise SourceMissing("a rendered block needs the edh rows, a softmax_window<W> row and the exact runs of "
                            "results/tree_sweep/tree_sweep_table.csv")
    row = min(rows, key=lambda r: float(r["E"]))
    window, window_row = windows[0]
    tokens = {int(r["tokens_scored"]) for r in exact}
    swap_E, swap_change = _tree_swap(root)
    one = [s[1] for s in tree_speedups(root)[0] if s[0] == 1]
    return {"change": f"{float(row['change_pct']):+.2f}", "E": f"{float(row['E']):g}",
            "cost": f"{100 * float(row['cost_fraction']):.1f}%", "slices": number_word(len({r["offset"] for r in exact})),
            "tokens": "/".join(f"{t:,}" for t in sorted(tokens)), "window": window,
            "window_change": f"{float(window_row['change_pct']):+.2f}", "swap_E": f"{swap_E:g}",
            "swap_change": f"{swap_change:+.2f}",
            "lo": f"{min(one):.0f}", "hi": f"{max(one):.0f}",
            "aim": TREE_AIM_SPEEDUP, "met": "met" if min(one) >= TREE_AIM_SPEEDUP else "not met"}


def _tree_swap(root):
    """(E, change of test perplexity in %) of the swap cell of tree attention's scorecard card
    (results/scorecard/cards/tree_*.json): the method in the trained softmax model, scored on the
    whole test split, against that model's own perplexity."""
    for rel in sources(root, "results/scorecard/cards/tree_*.json"):
        card = load_json(root, rel)
        cell = next((c for c in card.get("cells", []) if c.get("role") == "swap"), None)
        if card.get("attention") == "tree" and cell:
            return card["attention_params"]["E"], 100 * (cell["test_ppl"] / cell["softmax_test_ppl"] - 1)
    raise SourceMissing("a rendered block needs the swap cell of a tree card in results/scorecard/cards/")


# docs/fastmax.md's two runs of the issue's targets (the grid, then its target cells re-timed)
FASTMAX_TARGET_RUNS = ("results/bench_attention/bench_attention_grid.json",
                       "results/bench_attention/bench_attention_scan_fix.json")


def _fastmax_fields(root):
    """Fastmax p = 1 against SDPA in the full benchmark run (BENCH["full"], its summary) beside the same
    cell in FASTMAX_TARGET_RUNS (their ``targets``, with the target), the worst float64 difference from
    the authors' code (results/authors_fastmax/authors_fastmax_compare.json), and the WikiText-2 test
    perplexities of results/fastmax_gpt_mini_wikitext2 against the softmax run of
    results/gpt_mini_wikitext2 beside softmax's seed spread in results/gpt_mini_baselines."""
    full, _ = _bench(root, "full")
    T = int(next(k for k in full["summary"] if k.startswith("speedup_vs_sdpa_at_")).rsplit("_", 1)[1])
    entry = next(e for e in full["summary"][f"speedup_vs_sdpa_at_{T}"]
                 if e["method"] == "fastmax1" and e["mode"] == "forward" and e["causal"])
    earlier = [load_json(root, rel)["targets"][f"causal_p1_D{entry['D']}_T{T}_speedup_vs_sdpa"]["forward"]
               for rel in FASTMAX_TARGET_RUNS]
    target = earlier[0]["target"]
    speedups = [entry["speedup"]] + [e["speedup"] for e in earlier]
    authors = load_json(root, "results/authors_fastmax/authors_fastmax_compare.json")
    ppl = {p: load_json(root, f"results/fastmax_gpt_mini_wikitext2/fastmax{p}_test_blocks.json")["value"] for p in (1, 2)}
    made = load_json(root, "results/fastmax_gpt_mini_wikitext2/manifest.json")
    ppl_notes = {older_defaults("fastmax", made.get(f"fastmax{p}_test_blocks", {}).get("date")) for p in (1, 2)}
    softmax = load_json(root, "results/gpt_mini_wikitext2/test_blocks.json")["value"]
    seeds = [r["test_ppl"] for r in read_gpt_mini_runs(find_runs([source(root, "results/gpt_mini_baselines")]))
             if r["attention"] == "softmax" and r["test_ppl"] is not None]
    return {"T": T, "D": entry["D"], "p1": f"{entry['speedup']:.1f}",
            "earlier": join_words(f"{e['speedup']:.1f}x" for e in earlier), "n_earlier": number_word(len(earlier)),
            "target": f"{target:g}", "met": sum(v >= target for v in speedups), "runs": len(speedups),
            "rel": sci(authors["summary"]["worst_same_function_rel"]["float64"]),
            "ppl1": f"{ppl[1]:.2f}", "ppl2": f"{ppl[2]:.2f}", "ppl0": f"{softmax:.2f}",
            "ppl_note": "".join(map(bracketed, sorted(ppl_notes))),
            "d1": f"{ppl[1] - softmax:+.2f}", "d2": f"{ppl[2] - softmax:+.2f}",
            "sd": f"{statistics.stdev(seeds):.2f}", "n_sd": len(seeds)}


def _mlm_row(rows, model, eval_len):
    for r in rows:
        if r["model"] == model and int(r["eval_len"]) == eval_len and r["positions"] == "mask_input":
            return r
    raise SourceMissing(f"a rendered block needs the {model} row at length {eval_len} of "
                        "results/mlm_wikitext2/summary_mean.csv; it has none")


def _danet_fields(root):
    """results/authors_dense (the op's worst difference), the DANet mini and GPT mini test perplexities
    (test_blocks.json), results/mlm_wikitext2 (summary_mean.csv margins, summary.json's split, the
    softmax BERT mini's window in its seed-0 train.log)."""
    dense = load_json(root, "results/authors_dense/authors_dense_compare.json")
    danet = load_json(root, "results/danet_gpt_mini_wikitext2/test_blocks.json")
    gpt = load_json(root, "results/gpt_mini_wikitext2/test_blocks.json")
    mlm = load_csv(root, "results/mlm_wikitext2/summary_mean.csv")
    split = load_json(root, "results/mlm_wikitext2/summary.json")["settings"]["split"]
    short = min(int(r["eval_len"]) for r in mlm)
    bert, danet_mlm = _mlm_row(mlm, "bert_mini", short), _mlm_row(mlm, "danet_mini", short)
    local = _mlm_row(mlm, "danet_mini_localpos", short)
    log = run_text(root, "results/mlm_wikitext2/runs/bert_mini_seed0", "train.log")
    window = re.search(r"attention=softmax \{'window': (\d+)\}", log)
    if not window:
        raise SourceMissing("a rendered block needs the softmax window in "
                            "results/mlm_wikitext2/runs/bert_mini_seed0/train.log; it has none")
    return {"dense_rel": sci(dense["summary"]["op_max_rel"]), "danet_ppl": f"{danet['value']:.2f}",
            "gpt_ppl": f"{gpt['value']:.2f}", "seeds": danet_mlm["seeds"], "split": split, "L": short,
            "danet_margin": f"{float(danet_mlm['margin_mean']):.2f}",
            "bert_margin": f"{float(bert['margin_mean']):.2f} ± {float(bert['margin_std']):.2f}",
            "bert_seeds": bert["seeds"],
            "window": int(window.group(1)) - 1,  # |i - j| < window: +-(window - 1) keys (attention/softmax.py)
            "local": f"{float(local['margin_mean']):.2f} ± {float(local['margin_std']):.2f}",
            "local_seeds": local["seeds"]}


LRA_LISTOPS_SOFTMAX = "results/lra/extra_listops_softmax_cpu_b32_5000"  # softmax at LRA's 5,000 steps x 32 (docs/lra.md)


def _lra_fields(root):
    """The LRA runs results/lra/*_cpu (``lra_chosen``): Text accuracies and the standard errors of
    the DANet - softmax difference (test-set sampling only: binomial, one seed each), ListOps (with its
    steps x batch) and Pathfinder against chance (``at_chance``); softmax's ListOps run at LRA's steps
    x batch (LRA_LISTOPS_SOFTMAX)."""
    chosen = lra_chosen(root, "results/lra/*_cpu")
    text = {label: run for (label, task), run in chosen.items() if task == "text"}

    def pct(label, task="text"):
        return f"{100 * chosen[(label, task)]['test_accuracy']:.1f}"

    a, b = text["dense"], text["softmax"]
    se = math.sqrt(sum(r["test_accuracy"] * (1 - r["test_accuracy"]) / r["test_examples"] for r in (a, b)))
    listops = [label for label in ORDER if (label, "listops") in chosen]
    learned = [label for label in listops if not at_chance(chosen[(label, "listops")])]
    chance = [label for label in listops if at_chance(chosen[(label, "listops")])]
    names = {"dense": "DANet", "fastmax1": "fastmax p = 1", "fastmax2": "fastmax p = 2"}
    listops_text = ", ".join(f"{names.get(label, label)} {pct(label, 'listops')}%" for label in learned)
    majority = f"{100 * chosen[(listops[0], 'listops')]['majority']:.1f}"
    listops_text = (f"{listops_text} against a {majority}% majority" if learned else f"a {majority}% majority") + (
        f", {join_words(names.get(label, label) for label in chance)} at chance" if chance else "")
    pathfinder = [label for label in ORDER if (label, "pathfinder") in chosen]
    at = [label for label in pathfinder if at_chance(chosen[(label, "pathfinder")])]
    pathfinder_text = (f"at chance for all {number_word(len(pathfinder))}" if len(at) == len(pathfinder) else
                       f"{join_words(names.get(label, label) for label in at)} at chance" if at else "above chance")
    fastmax_notes = {text[label]["older_defaults"] for label in ("fastmax1", "fastmax2")}
    def budget(task):
        budgets = {(r["iters"], r["examples_seen"] // r["iters"]) for (label, t), r in chosen.items()
                   if t == task and r["iters"]}
        if len(budgets) != 1:
            raise SourceMissing(f"a rendered block needs one steps x batch for the {task} runs of results/lra/*_cpu")
        (steps, batch), = budgets
        return f"{steps:,} steps x {batch}"

    long_runs = read_lra_runs(find_runs([os.path.join(root, p) for p in run_sources(root, LRA_LISTOPS_SOFTMAX)]))
    if len(long_runs) != 1 or long_runs[0]["label"] != "softmax" or long_runs[0]["task"] != "listops":
        raise SourceMissing(f"a rendered block needs one softmax ListOps run at {LRA_LISTOPS_SOFTMAX}")
    long = long_runs[0]
    return {"dense": pct("dense"), "f1": pct("fastmax1"), "f2": pct("fastmax2"), "softmax": pct("softmax"),
            "listops_budget": budget("listops"), "pathfinder_budget": budget("pathfinder"),
            "x_steps": f"{long['iters']:,}",
            "x_batch": long["examples_seen"] // long["iters"], "x_acc": f"{100 * long['test_accuracy']:.1f}",
            "fastmax_note": "".join(map(bracketed, sorted(fastmax_notes))),  # both runs are fastmax's: one note
            "n_se": f"{(a['test_accuracy'] - b['test_accuracy']) / se:.0f}", "reviews": f"{int(a['test_examples']):,}",
            "listops": listops_text, "pathfinder": pathfinder_text}


def _baselines_fields(root):
    """Test perplexities of the runs in results/gpt_mini_baselines (softmax and Longformer: mean +- sd
    over their seeds; a one-seed run made under an older default of its method says so)."""
    runs = read_gpt_mini_runs(find_runs([source(root, "results/gpt_mini_baselines")]))
    ppl, notes = {}, {}
    for r in runs:
        if r["test_ppl"] is not None:
            ppl.setdefault(r["attention"], []).append(r["test_ppl"])
            notes[r["attention"]] = notes.get(r["attention"]) or r["older_defaults"]
    fields = {a: f"{ppl[a][0]:.2f}{bracketed(notes[a])}" for a in ("linear", "performer", "bigbird", "fastmax1", "dense", "danet")}
    for a in ("softmax", "longformer"):
        fields.update({a: f"{statistics.mean(ppl[a]):.2f} +- {statistics.stdev(ppl[a]):.2f}", f"{a}_n": len(ppl[a])})
    return fields


def _pct(values):
    return mean_sd(values, ".1f", scale=100)


# The recall sweep's protocol (scripts/sweeps/recall.sh's defaults): its attentions and reference cell.
RECALL_SWEEP_ATTENTIONS = ("softmax", "fastmax1", "fastmax2", "dense", "linear", "performer", "longformer", "bigbird")
RECALL_REFERENCE_CELL = (256, 16, 64)
RECALL_SMALL_CELL = (64, 4)  # length, pairs of the small cell (every width)


def _recall_noshift_fields(root):
    """The runs without a token shift in results/recall/summary.csv at the reference cell: test accuracy
    (mean ± sd in %, seeds at the picked rate) of each attention run there, the sweep's attentions not
    yet run. Raises SourceMissing when no such run exists."""
    runs = read_recall_summary(root, "results/recall/summary.csv")
    cell = (*RECALL_REFERENCE_CELL, False)
    present = [a for a in recall_order({r["attention"] for r in runs}) if picked_runs(runs, a, cell)]
    if not present:
        raise SourceMissing("a rendered block needs runs without a token shift at "
                            f"{cell_label(*RECALL_REFERENCE_CELL)} in results/recall/summary.csv")
    parts = []
    for a in present:
        values = [r["test_accuracy"] for r in picked_runs(runs, a, cell)]
        seeds = f"{len(values)} seed{'s' if len(values) > 1 else ''}"
        per_seed = " / ".join(f"{100 * v:.1f}" for v in values)
        parts.append(f"{display_name(a)} {_pct(values)}% ({seeds}: {per_seed}; rate {rate(runs_rate(runs, a, cell))})")
    missing = [NAMES.get(a, a) for a in RECALL_SWEEP_ATTENTIONS if a not in present]
    return {"T": cell[0], "N": cell[1], "W": cell[2], "methods": "; ".join(parts),
            "missing": f"; not run yet: {join_words(missing)}" if missing else ""}


def runs_rate(runs, attention, cell):
    """The learning rate of ``attention``'s picked runs in ``cell`` (T, N, width, token_shift)."""
    return picked_runs(runs, attention, cell)[0]["learning_rate"]


def _recall_fields(root):
    """results/recall/summary.csv (picked runs of each attention x cell), the reference cell (the runs
    in results/recall/sweep_256_16)."""
    runs = read_recall_summary(root, "results/recall/summary.csv")
    reference = read_recall_runs(find_runs([source(root, "results/recall/sweep_256_16")]))
    ref = {cell_key(r)[1:] for r in reference}
    if len(ref) != 1:
        raise SourceMissing("a rendered block needs the runs of one cell under results/recall/sweep_256_16")
    cell = ref.pop()
    picked = {a: picked_runs(runs, a, cell) for a in recall_order({r["attention"] for r in runs})}
    acc = {a: [r["test_accuracy"] for r in rs] for a, rs in picked.items() if rs}

    def note(a):
        lr = one_rate(runs, a, cell)
        return f" (one rate, {rate(lr)})" if lr is not None else ""

    small = sorted({k[1:] for k in map(cell_key, runs) if k[1:3] == RECALL_SMALL_CELL and k[4]})
    small_means = [statistics.mean(r["test_accuracy"] for r in picked_runs(runs, a, c))
                   for a in recall_order({r["attention"] for r in runs}) for c in small if picked_runs(runs, a, c)]
    seeds = {len(v) for v in acc.values()}
    return {
        "seeds": f"{min(seeds)} seeds each" if len(seeds) == 1 else f"{min(seeds)}-{max(seeds)} seeds",
        **{f"acc_{a}": f"{_pct(v)}%{note(a)}" for a, v in acc.items()},
        **{f"seeds_{a}": " / ".join(f"{100 * x:.1f}" for x in v) + f"%{note(a)}" for a, v in acc.items()},
        **{f"mean_{a}": f"{100 * statistics.mean(v):.1f}%{note(a)}" for a, v in acc.items()},
        "window": next(r["attention_params"]["window"] for r in reference if r["attention"] == "longformer"),
        "sT": small[0][0], "sN": small[0][1],
        "lo": f"{100 * min(small_means):.0f}", "hi": f"{100 * max(small_means):.0f}"}


FASTMAX_WIDE_SETTINGS = ("paper_sqrtD", "none_8sqrtD", "max_norm_2")  # the settings that allow |s| > 1 (docs/recall.md)


def _fastmax_norm_fields(root):
    """The runs of results/recall/fastmax_norm/<setting> (paper_D, paper_sqrtD, max_norm_1: the old
    default), test accuracy at the picked rate."""
    folder = "results/recall/fastmax_norm"

    def setting(name, attention):
        runs = mark_picked(read_recall_runs(find_runs([source(root, f"{folder}/{name}")])))
        rs = [r for r in runs if r["attention"].split()[0] == attention and r["picked"]]
        if not rs:
            raise SourceMissing(f"a rendered block needs {attention} runs under {folder}/{name}; there are none")
        return rs

    used = {name: setting(*name.split(":")) for name in ("paper_D:fastmax1", "max_norm_1:fastmax1",
                                                          "paper_sqrtD:fastmax2", "max_norm_1:fastmax2")}
    p1_paper = used["paper_D:fastmax1"]
    every = [r for rs in used.values() for r in rs]
    heads = {open_run(os.path.dirname(r["path"])).final_metrics["config"]["n_head"] for r in every}
    shifts, rates = {r["token_shift"] for r in every}, {r["learning_rate"] for r in every}
    if len(heads) != 1 or len(shifts) != 1:
        raise RenderError(f"the runs under {folder} differ in heads ({heads}) or token shift ({shifts})")
    T, N, W = cell_key(p1_paper[0])[1:4]
    H = heads.pop()
    wide = [r["test_accuracy"] for name in FASTMAX_WIDE_SETTINGS for r in setting(name, "fastmax1")]
    return {"T": T, "N": N, "W": W, "seeds": len(p1_paper), "H": H, "hd": W // H,
            "n_wide": number_word(len(FASTMAX_WIDE_SETTINGS)), "p1_wide": f"{100 * max(wide):.1f}",
            "shift": "with the token shift" if shifts.pop() else "no token shift",
            "rates": "rate " + join_words(rate(x) for x in sorted(rates)) + (" for every setting" if len(rates) == 1 else ""),
            "p1_paper": _pct([r["test_accuracy"] for r in used["paper_D:fastmax1"]]),
            "p1_max": _pct([r["test_accuracy"] for r in used["max_norm_1:fastmax1"]]),
            "p2_paper": _pct([r["test_accuracy"] for r in used["paper_sqrtD:fastmax2"]]),
            "p2_max": _pct([r["test_accuracy"] for r in used["max_norm_1:fastmax2"]])}


def _bench_fields(root):
    """The T range of the full benchmark run, fastmax p = 2 against SDPA over FASTMAX2_RUNS (median
    and range) and the dense aim in the re-run (BENCH)."""
    full, _ = _bench(root, "full")
    rerun, _ = _bench(root, "rerun")
    runs, D, T = fastmax2_runs(root)
    fwd, bwd = [r[2] for r in runs], [r[3] for r in runs]
    (fmed, frange), (bmed, brange) = median_range(fwd), median_range(bwd)
    _, (t1, t0), _ = _aim(rerun["summary"], DENSE_AIM)
    dense, target = dense_ratio(rerun)
    Ts = [int(t) for t in str(full["settings"]["T"]).split(",")]
    fast_target = _aim(full["summary"], FASTMAX_AIM)[2]["forward"]["target"]
    return {"tmin": min(Ts), "tmax": max(Ts), "T": T, "n": len(runs), "fmed": fmed, "frange": frange,
            "bmed": bmed, "brange": brange,
            "verdict": "so not reliably faster" if min(fwd + bwd) <= fast_target else "faster in every run",
            "dense": f"{dense:.2f}", "t0": t0, "t1": t1, "target": f"{target:g}",
            "met": "met" if dense <= target else "not met"}


# (experiment template, result template, page, fields function): every {field} of a row is computed
# by its function from files under results/ (the function names them)
README_ROWS = [
    ("GPT mini on WikiText-2 ({params} parameters, {minutes} min)",
     "test perplexity {ppl} (`{protocol}`); uses about {context} tokens of context",
     "[gpt_mini_wikitext2](docs/gpt_mini_wikitext2.md)", _gpt_mini_fields),
    ("Tree attention swapped into the GPT mini",
     "{change}% perplexity at E = {E} ({cost} of the inner products) on the sweep's {slices} test slices ({tokens} "
     "tokens scored each), where a {window}-key sliding window gives {window_change}%; the leaderboard's swap cell "
     "(E = {swap_E}, the whole test split) {swap_change}%; CPU kernel {lo}-{hi}x the authors' NumPy code on one "
     "thread (aim {aim}x {met})",
     "[tree_attention](docs/tree_attention.md)", _tree_fields),
    ("Fastmax vs SDPA and the authors' code",
     "causal T = {T}, D = {D}, forward: p = 1 {p1}x faster than SDPA in the latest full benchmark run, {earlier} in "
     "the {n_earlier} earlier runs of the doc (aim ≥ {target}x: met in {met} of {runs} runs); matches the authors' code "
     "to {rel}; WikiText-2 test perplexity p = 1 {ppl1}, p = 2 {ppl2}{ppl_note} vs softmax {ppl0}, one seed each: "
     "{d1} and {d2}, beside softmax's seed sd of {sd} ({n_sd} seeds, the baselines row)", "[fastmax](docs/fastmax.md)", _fastmax_fields),
    ("DANet / DenseAttention",
     "matches the authors' code ({dense_rel}); causal DANet mini GPT {danet_ppl} vs softmax {gpt_ppl}; MLM "
     "({split}, L = {L}): [MASK]-input margin over a context-free predictor {local} nats for the DANet mini "
     "(window-local RelPE positions, {local_seeds} seeds; {danet_margin} with global ones) vs {bert_margin} for a "
     "softmax BERT mini (±{window} window, {bert_seeds} seeds): two model configurations (layer pattern, blocks, "
     "schedule), not the two attentions alone",
     "[dense_attention](docs/dense_attention.md), [mlm](docs/mlm.md)", _danet_fields),
    ("Long Range Arena, CPU sizes",
     "Text: DANet {dense}%, fastmax {f1} / {f2}%{fastmax_note}, softmax {softmax}% ({dense} vs {softmax} is about {n_se} "
     "standard errors of test-set sampling on {reviews} reviews, seed variance not counted; not ranked: one seed "
     "each); ListOps at the CPU budget ({listops_budget}): {listops}, while softmax reaches {x_acc}% at LRA's "
     "{x_steps} steps x {x_batch}; Pathfinder at the CPU budget ({pathfinder_budget}) {pathfinder}",
     "[lra](docs/lra.md)", _lra_fields),
    ("Baselines of the survey",
     "implemented and tested, attention maps of every method; mini GPT on WikiText-2 at one budget, test "
     "perplexity: softmax {softmax} ({softmax_n} seeds), Longformer {longformer} ({longformer_n} seeds), linear "
     "{linear}, Performer {performer}, BigBird {bigbird}, fastmax p = 1 {fastmax1} (one seed each: not ranked), "
     "dense {dense}, the DANet mini {danet}; LRA Text: the leaderboard below",
     "[baselines](docs/baselines.md)", _baselines_fields),
    ("Associative recall (MQAR), {T} tokens, {N} pairs, width {W}, no token shift (the reference setting)",
     "test accuracy, rate picked from 3 on seed 0: {methods}{missing}. An attention-only model on a CPU budget, "
     "not Zoology's (with GPT-2's initialisation softmax stays at 1/N: ablation in the doc)", "[recall](docs/recall.md)",
     _recall_noshift_fields),
    ("Associative recall, the same cell with a token shift (the ablation layer, the sweeps before 2026-11-27)",
     "{seeds}: fastmax p = 2 {acc_fastmax2}, softmax {acc_softmax}, BigBird {acc_bigbird}, DANet {seeds_dense}, "
     "linear {seeds_linear}, fastmax p = 1 {acc_fastmax1}, Performer {acc_performer}, a {window}-key "
     "Longformer {mean_longformer}; at {sT} tokens / {sN} pairs every method {lo}-{hi}%", "[recall](docs/recall.md)", _recall_fields),
    ("Fastmax normalization on recall ({T}/{N}, width {W} as {H} heads of {hd}, {shift}, {seeds} seeds, {rates})",
     "p = 1: `paper` at temperature D {p1_paper}% vs the old default `max_norm` {p1_max}%, the {n_wide} settings "
     "allowing \\|s\\| > 1 at most {p1_wide}% in any seed; p = 2: `paper` at sqrt(D) {p2_paper}% vs {p2_max}%: the "
     "new default",
     "[recall](docs/recall.md#fastmax-normalization-with-the-score-scale-controlled-2026-11-26)",
     _fastmax_norm_fields),
    ("Benchmark of every attention",
     "every method, T = {tmin} ... {tmax}, against SDPA and this CPU's matmul peak; causal fastmax p = 2 against "
     "SDPA at T = {T}: forward {fmed}x (median of {n} runs, {frange}x), with backward {bmed}x ({brange}x), "
     "{verdict}; dense causal time per token {dense}x from T = {t0} to {t1} (aim {target}x {met}: fresh pages and "
     "memory bandwidth)", "[benchmark](docs/benchmark.md)", _bench_fields),
]


def readme_row(root, row):
    """[experiment, result, page] of one README_ROWS entry: its templates filled with the fields its
    function computes from files under results/. Raises SourceMissing when a file is absent."""
    experiment, result, page, fields = row
    try:
        values = fields(root)
    except (KeyError, IndexError, StopIteration) as e:
        raise SourceMissing(f"a rendered block (README row {experiment.split(' (')[0]!r}) needs an entry its "
                            f"results files lack: {e!r}") from None
    return [experiment.format(**values), result.format(**values), page]


def render_readme_results(root):
    """README.md's Results table: a row per README_ROWS entry (``readme_row``). Raises SourceMissing
    when a file is absent."""
    return _markdown(["experiment", "result", "page"], [readme_row(root, row) for row in README_ROWS])


def render_leaderboard(root, folder, part="table"):
    """The scorecard's leaderboard of the cards under ``root/folder/cards``
    (``scripts.scorecard.leaderboard.sections``): ``part`` "table" is the table with the notes under
    it (the recall and speed rules, the noise floor); "floor" the noise-floor sentence alone (computed
    from softmax's control cells). The cells still to run and the published rows stay in
    ``folder/leaderboard.md``, which the README links (it keeps to a summary)."""
    from scripts.scorecard.leaderboard import read_cards, sections

    parts = sections(read_cards(os.path.join(root, folder)), root=root)
    if part not in ("table", "floor"):
        raise RenderError(f"renderer leaderboard: part must be table or floor, not {part!r}")
    return parts["table"] + "\n" + parts["notes"] if part == "table" else parts["floor"]


def render_kernel_report(root, report_json):
    """docs/gpu.md's offline compilation table from scripts/bench/kernel_report.py's JSON: the
    script's own table (one format), then a line with the Triton version, the target and how many
    kernels miss a limit. Raises SourceMissing when the file is absent."""
    report = load_json(root, report_json)
    rows = report["rows"]
    missed = sum(1 for row in rows if row["failures"])
    summary = (f"{len(rows)} distinct kernels compiled for {report['target']['arch']} with Triton {report['triton']}"
               f" on {report['date'][:10]}: {missed} missing a limit.")
    return kernel_report_table(rows) + "\n\n" + summary + "\n"


RENDERERS = {
    "leaderboard": render_leaderboard,
    "recall_ablation": render_recall_ablation,
    "recall_glance": render_recall_glance,
    "gpt_mini_table": render_gpt_mini_table,
    "lra_text": render_lra_text,
    "lra_tasks": render_lra_tasks,
    "lra_text_budgets": render_lra_text_budgets,
    "bench_aims": render_bench_aims,
    "fastmax_grid": render_fastmax_grid,
    "swap_ranges": render_swap_ranges,
    "tree_sweep": render_tree_sweep,
    "published_lra": render_published_lra,
    "per_position": render_per_position,
    "table_file": render_table_file,
    "tree_bench": render_tree_bench,
    "bench_layer": render_bench_layer,
    "bench_pair": render_bench_pair,
    "authors_fastmax": render_authors_fastmax,
    "bench_linearity": render_bench_linearity,
    "lm_runs": render_lm_runs,
    "readme_results": render_readme_results,
    "kernel_report": render_kernel_report,
}


def render(spec, root):
    """The text of a block whose marker says ``spec`` ("<renderer> [arg ...] [key=value ...]"):
    the renderer of RENDERERS called with ``root``, the positional args and the key=value args.

    Raises:
        RenderError: an unknown renderer, or arguments it does not take.
        SourceMissing: a results file it needs does not exist.
    """
    name, *tokens = spec.split()
    if name not in RENDERERS:
        raise RenderError(f"unknown renderer {name!r} (known: {', '.join(sorted(RENDERERS))})")
    args = [t for t in tokens if "=" not in t]
    kwargs = dict(t.split("=", 1) for t in tokens if "=" in t)
    try:
        inspect.signature(RENDERERS[name]).bind(root, *args, **kwargs)
    except TypeError as e:
        raise RenderError(f"renderer {name}: {e}") from None
    return RENDERERS[name](root, *args, **kwargs)
