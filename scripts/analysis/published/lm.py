"""Language models: the mini GPT's runs on WikiText-2 (reading them, the ``gpt_mini_table`` tool's table),
one model's perplexity with each attention swapped in, the test NLL by context length, and several
runs side by side (docs/gpt_mini_wikitext2.md, docs/baselines.md, docs/scorecard.md, docs/fastmax.md,
docs/dense_attention.md).

Renderers (``RENDERERS``):

- ``gpt_mini_table <folder>``: the WikiText-2 table of ``gpt_mini_table``.
- ``swap_ranges <run> [<run> ...] [base=softmax]``: one model's test perplexity with each attention
  on the same ranges of the test split (eval_ppl.py's JSONs in packed runs or folders), a row per
  range, the change against ``base``'s (docs/scorecard.md: tree attention's swap cell by range).
- ``per_position <eval.json> [edges=1,2,8,...]``: mean test NLL by context length in bins, from an
  eval_ppl.py JSON's per_position field (docs/gpt_mini_wikitext2.md).
- ``lm_runs <throughput.json|log> <label@train_log@test_json@config> ... [val_iters=600,650]``:
  language-model runs side by side: validation and test perplexity, tokens/s (measured side by side,
  or the median of each run's log), wall time (docs/fastmax.md, docs/dense_attention.md).
- ``train_logs <label@train_log> ... iters=i,... [quantity=val_loss|val_ppl] [labels=a,b] [speed=yes]
  [wall=yes]``: training logs side by side: a validation quantity at each of ``iters``, optionally the
  median tokens/s and the wall time to the last training step (docs/fastmax.md).
- ``lm_record <train_log> <test.json> [<test.json> ...] [val_iters=i,...]``: one language-model run's
  record: wall time, throughput, validation and test perplexities, each with its file
  (docs/gpt_mini_wikitext2.md).
"""
import json
import math
import os
import statistics

from scripts.analysis.published.formatting import display_name, markdown_table, older_defaults, spread
from scripts.analysis.published.loading import (RenderError, SourceMissing, load_json, load_jsonl, marker_numbers,
                                                source)
from scripts.analysis.runs import attention_label, find_runs, open_run, run_cpu, run_date


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
    return markdown_table(header, gpt_mini_rows(runs))


def render_gpt_mini_table(root, folder):
    """The WikiText-2 table of ``gpt_mini_table`` from the runs under ``folder``. Raises SourceMissing
    when ``folder`` is absent or holds no lm run."""
    runs = read_gpt_mini_runs(find_runs([source(root, folder)]))
    if not runs:
        raise SourceMissing(f"a rendered block needs lm runs (final_metrics.json) under {folder}; there are none")
    return gpt_mini_table(runs)


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
    return markdown_table(header, rows)


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
    return markdown_table(["context length", *(f"{lo}" if hi == lo + 1 else f"{lo}-{hi - 1}" for lo, hi, _ in bins)],
                     [["mean NLL", *(f"{mean:.3f}" for _, _, mean in bins)]])


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
    return markdown_table(["attention", f"val ppl at {' / '.join(map(str, iters))}", "test ppl, `blocks`", speed_header,
                      "wall time of the run (training + its evaluations)"], table)


def minutes(seconds):
    """"45 min 34 s" of a duration in seconds (rounded to the second)."""
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60} s"


def _evaluations(root, log):
    """(records, {iter: eval dict}) of a train.py log (``log`` relative to ``root``)."""
    records = load_jsonl(root, log)
    return records, {r["iter"]: r["eval"] for r in records if "eval" in r}


def _val(evaluation, quantity):
    """The validation loss or perplexity of one evaluation record (old logs name the loss ``val``)."""
    loss = evaluation.get("val_loss", evaluation.get("val"))
    if quantity == "val_ppl":
        return evaluation.get("val_ppl") or math.exp(loss)
    return loss


def _ppl(x):
    """A perplexity as the docs print it: 285.8, 6,948."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.1f}"


def render_train_logs(root, *runs, iters="", quantity="val_loss", labels="model", speed="no", wall="no"):
    """train.py logs side by side, a row per run "label@train_log.jsonl" (``runs``; a label of one
    field is an attention label, shown by ``display_name``; a label "a:b" fills the columns named by
    ``labels``, "a,b"): the validation ``quantity`` (val_loss: 3 decimals; val_ppl: ``_ppl``) at each
    of ``iters`` (comma list); ``speed=yes``: the median of the log's training tokens/s; ``wall=yes``:
    the ``elapsed_s`` of the log's last training-step record. Raises SourceMissing when a log is
    absent or lacks an evaluation, RenderError for a malformed argument."""
    if quantity not in ("val_loss", "val_ppl"):
        raise RenderError(f"train_logs: quantity={quantity!r}: expected val_loss or val_ppl")
    wanted = marker_numbers("train_logs", iters)
    if not wanted or not runs:
        raise RenderError("train_logs: give label@train_log ... iters=i,...")
    columns = labels.split(",")
    table = []
    for run in runs:
        label, _, log = run.partition("@")
        fields = label.split(":")
        if not log or len(fields) != len(columns):
            raise RenderError(f"train_logs: {run!r} is not label@train_log with {len(columns)} label field(s)")
        records, evals = _evaluations(root, log)
        if not all(i in evals for i in wanted):
            raise SourceMissing(f"a rendered block needs the evaluations at {wanted} in {log}; it has {sorted(evals)}")
        values = [_val(evals[i], quantity) for i in wanted]
        row = [display_name(fields[0])] if len(fields) == 1 else fields
        row += [_ppl(v) if quantity == "val_ppl" else f"{v:.3f}" for v in values]
        steps = [r for r in records if "tok_per_s" in r]
        if speed == "yes":
            row.append(f"{statistics.median(r['tok_per_s'] for r in steps):,.0f}" if steps else "-")
        if wall == "yes":
            row.append(minutes(steps[-1]["elapsed_s"]) if steps else "-")
        table.append(row)
    name = "val ppl" if quantity == "val_ppl" else "val loss"
    header = columns + [f"{name} at {i}" for i in wanted]
    header += ["training tokens/s (median of the log)"] * (speed == "yes")
    header += ["wall time to the last training step"] * (wall == "yes")
    return markdown_table(header, table)


def render_lm_record(root, log, *tests, val_iters=""):
    """One language-model run's record (docs/gpt_mini_wikitext2.md), a row per quantity with the file
    it comes from: the wall time (the log's last ``elapsed_s``: training, evaluations and
    checkpoints), the training tokens/s (median and mean of the log's steps), the validation
    perplexity at each of ``val_iters`` (train.py's estimate; default the last evaluation) and the
    test perplexity of each eval_ppl.py JSON of ``tests`` (its protocol, tokens scored and seconds).
    Raises SourceMissing when a file is absent or the log lacks an evaluation."""
    records, evals = _evaluations(root, log)
    wanted = marker_numbers("lm_record", val_iters) if val_iters else [max(evals, default=0)]
    if not all(i in evals for i in wanted):
        raise SourceMissing(f"a rendered block needs the evaluations at {wanted} in {log}; it has {sorted(evals)}")
    steps = [r for r in records if "tok_per_s" in r]
    if not steps:
        raise SourceMissing(f"a rendered block needs training steps (tok_per_s) in {log}; it has none")
    speeds = [r["tok_per_s"] for r in steps]
    code = f"`{log}`"
    table = [[f"wall time ({steps[-1]['iter']:,} iterations, with the evaluations and checkpoints)",
              minutes(max(r.get("elapsed_s", 0) for r in records)), code],
             ["training throughput (tokens/s: median of the log; mean)",
              f"{statistics.median(speeds):,.0f}; {statistics.mean(speeds):,.0f}", code],
             [f"validation perplexity at iteration {' / '.join(map(str, wanted))} (train.py's estimate)",
              " / ".join(f"{_val(evals[i], 'val_ppl'):.1f}" for i in wanted), code]]
    for test in tests:
        record = load_json(root, test)
        protocol = record.get("protocol")
        where = f"`{protocol}`, stride {record['stride']}" if protocol == "strided" else \
            f"`{protocol}` (L = {record.get('context_length')})"
        table.append([f"test perplexity, {where}",
                      f"{record['value']:.2f} ({record['tokens_scored']:,} tokens, {record['seconds']:.0f} s)", f"`{test}`"])
    return markdown_table(["what", "result", "artifact"], table)


RENDERERS = {"gpt_mini_table": render_gpt_mini_table, "swap_ranges": render_swap_ranges,
             "per_position": render_per_position, "lm_runs": render_lm_runs, "train_logs": render_train_logs,
             "lm_record": render_lm_record}
