"""Decode benchmark (issue 59 item 4): time per generated token and decode-state bytes against the
context, for every attention with a decode path, one layer alone and the GPT mini end to end.

Methods: every registered attention whose ``decode`` is not None (``attention.decode_kind``), read
from the registry when the run starts, with its default parameters; tree attention also at
E = 0.5 (``VARIANTS``; one row set when that is its default). An attention that declares a decode
path later is measured without an edit here. ``--methods`` restricts the list (the benchmark's
method syntax, ``name:key=value,...``, scripts/bench/methods.py); a method without a decode path
is refused in one line. The baseline of every ratio is softmax's KV cache (``softmax``: torch's
SDPA over an ``attention.kv_cache.KVCache``).

Suite ``layer``: one attention module (B = 1, H = --heads, D = --D, float32, CPU, evaluation mode,
built with the model context layer_idx 0, block_size L, n_head H, head_dim D). For every context L
of --contexts it prefills a seeded standard normal prompt of L tokens (``prefill``, timed once),
then decodes --steps tokens untimed (warm-up) and --repeats samples of --steps tokens, each timed
as a whole (wall clock around the ``step`` calls; the random step inputs are drawn before). Per
token: the median of the samples' seconds / --steps, and their range. State bytes: the bytes of
every tensor the state holds, each storage once (``attention.state_nbytes``: a preallocated cache
counts with its spare room), after the last step. Counted work: for a module whose ``stats()``
counts inner products (tree attention), the alignment inner products per (query, head) of the
timed and warm-up steps (``stats()["alignment_inner_products"] / stats()["queries"]``) and the
buds per query (``terms``). A context is skipped (row with a note) when the prefill's estimated
memory (three times scripts/bench/methods.py's ``estimated_bytes`` of the causal forward: scores,
masked scores and weights of a quadratic path) exceeds --max_gb (default: half the RAM), when the
prefill is predicted to take more than --budget seconds (log-log extrapolation from the method's
two previous contexts, ``predicted_seconds``), or after a failure.

Suite ``gpt``: the model of configs/wikitext2_gpt_mini.py (randomly initialised, seed 0; its
learned positions end at block_size), each method swapped into every layer
(``GPT.set_attention``). At a context L <= block_size each repeat generates --steps greedy tokens
after a random prompt of L - --steps tokens (``GPT.generate``, its own ``stats``: decode seconds
over new tokens, the rate sample.py prints; the prefill is not in it); the first repeat is the
warm-up. Contexts: block_size / 16, block_size / 4, block_size and the --contexts below it
(--quick: the --contexts up to block_size). ``softmax (recompute)`` is nanoGPT's way
(``generate(recompute=True)``: the whole window at every step). State bytes: the model's
``DecodeCache`` after a prefill of L tokens, every layer. A model that cannot decode with a state
(``GPT.decode_unsupported``, e.g. BigBird below the last layer) recomputes: its ``mode`` says so.

Aims on this CPU (``aims``, computed from the rows; None where not measured):
- ``state_time_flat``: per "state" method, seconds per token at its largest context over that at
  1,024 (else the smallest context), at most ``FLAT_LIMIT``;
- ``state_bytes_constant``: per "state" method, the same state bytes at every context;
- ``tree_inner_products``: tree at E = 0.5 computes about L^0.5 inner products per token: the
  log-log slope of inner products per token against the context, smallest to largest, within
  ``SLOPE_TOLERANCE`` of E (the ratio to L^E per context beside it);
- ``tree_crossover``: the context above which tree's (E = 0.5) time per token stays below the KV
  cache's (scripts/bench/attention.py's ``break_even``: log-log interpolated; "below the range"
  when it is faster at every context), or "not reached in the range".

Writes decode.json (settings, methods, rows, aims), decode.csv (the rows) and decode.png (layer:
time per token and state bytes against the context, log-log; GPT mini: time per token) into --out
(default results/decode/<UTC date>_<cpu>/, --quick: ..._quick/), each atomically, then the
folder's manifest entry ``decode`` (``provenance.record``: the command, the commit at the start,
the machine). ``--quick``: contexts 16 and 64, 2 repeats of 2 steps (the tests).

Usage: nice -n 10 python -m scripts.bench.decode [--contexts=1024,4096,16384,65536] [--repeats=5]
           [--steps=16] [--out=DIR] [--methods=softmax,linear] [--quick]
"""
import datetime
import math
import os
import re
import statistics
import time

import torch

import attention
import data
import provenance
from scripts import plot_style
from scripts.bench.attention import break_even, memory_limit
from scripts.bench.common import loglog_axes, make_inputs, parse_list, write_csv
from scripts.bench.methods import Method, estimated_bytes, first_line, parse_method, predicted_seconds, split_methods

DEFAULT_CONTEXTS = "1024,4096,16384,65536"
QUICK_CONTEXTS = "16,64"
BASELINE = "softmax"  # softmax's KV cache on torch's SDPA: the reference of every ratio
VARIANTS = {"tree": ({"E": 0.5},)}  # measured beside the defaults (a variant equal to them is not repeated)
TREE_E = 0.5  # tree attention's E of the inner-product and crossover aims
FLAT_LIMIT = 1.2  # a state kind's time per token at the largest context within 1.2x of its time at 1k
FLAT_REFERENCE = 1024
SLOPE_TOLERANCE = 0.1  # "about L^E": fitted slope within E +- this
MEMORY_FACTOR = 3  # the prefill holds about three of estimated_bytes' largest tensors at once
GPT_CONFIG = os.path.join("configs", "wikitext2_gpt_mini.py")
RECOMPUTE_LABEL = "softmax (recompute)"
FIELDS = ["suite", "method", "spec", "decode", "mode", "context", "steps", "repeats", "seconds_per_token",
          "seconds_min", "seconds_max", "ratio_to_baseline", "prefill_seconds", "state_bytes",
          "inner_products_per_token", "terms_per_token", "note"]


# ----------------------------------------------------------------------------------------------
# methods and state


def decode_methods(texts=None):
    """The ``Method`` list (scripts/bench/methods.py) of the benchmark: ``texts`` (method syntax)
    when given, else every registered attention with a decode path (``attention.decode_kind`` not
    None), sorted by name, with its default parameters, followed by its ``VARIANTS`` that differ
    from its defaults. softmax (the baseline) comes first.

    Raises:
        ValueError: a malformed or unknown method, or one without a decode path (one line naming
            the decode-capable attentions).
    """
    if texts:
        methods = [parse_method(t) for arg in texts for t in split_methods(arg)]
        for m in methods:
            if m.kind != "registry" or not attention.decode_kind(m.name):
                able = ", ".join(n for n in attention.registered() if attention.decode_kind(n))
                raise ValueError(f"method '{m.label}' has no decode path (attention decode = None); "
                                 f"decode-capable: {able}")
    else:
        methods = []
        for name in attention.registered():
            if not attention.decode_kind(name):
                continue
            methods.append(Method(name, "registry", name, {}))
            defaults = methods[-1].full_params()
            for params in VARIANTS.get(name, ()):
                if any(defaults.get(k) != v for k, v in params.items()):
                    label = name + ":" + ",".join(f"{k}={v}" for k, v in params.items())
                    methods.append(Method(label, "registry", name, params))
    unique = list({m.label: m for m in methods}.values())
    return sorted(unique, key=lambda m: m.label != BASELINE)


def state_bytes(state):
    """Bytes of the tensors held by a decode state (``Attention.prefill``'s, or a model's
    ``DecodeCache``): every tensor found in the object, its dicts, lists, tuples and attributes,
    at any depth, each storage counted once and whole (a preallocated KV cache with its spare
    room). ``attention.state_nbytes``, the registry's walker, which the decode tests also use."""
    return attention.state_nbytes(state)


def tree_method(methods):
    """The method of the tree aims: tree attention at E = ``TREE_E`` (None when absent)."""
    for m in methods:
        if m.name == "tree" and float(m.full_params().get("E", 0)) == TREE_E:
            return m
    return None


# ----------------------------------------------------------------------------------------------
# suite "layer"


def empty_row(suite, method, kind, context, steps):
    """A row of ``FIELDS`` with nothing measured: ``method`` a ``Method`` or a label, ``kind`` its
    decode kind, ``context`` in tokens, ``steps`` per timed sample."""
    return dict(suite=suite, method=method.label if isinstance(method, Method) else method,
                spec=method.spec if isinstance(method, Method) else "", decode=kind, mode="", context=context,
                steps=steps, repeats=0, seconds_per_token=None, seconds_min=None, seconds_max=None,
                ratio_to_baseline=None, prefill_seconds=None, state_bytes=None, inner_products_per_token=None,
                terms_per_token=None, note="")


def time_steps(module, state, tokens, steps, repeats):
    """(per-token seconds of each timed sample, state): ``steps`` warm-up steps, then ``repeats``
    samples of ``steps`` steps, each timed as a whole; ``tokens`` = (q, k, v) of shape
    (1, H, steps * (repeats + 1), D), consumed in order."""
    q, k, v = tokens
    position = [0]

    def run(n):
        nonlocal state
        for _ in range(n):
            i = position[0]
            _, state = module.step(q[:, :, i:i + 1], k[:, :, i:i + 1], v[:, :, i:i + 1], state)
            position[0] += 1

    run(steps)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(steps)
        samples.append((time.perf_counter() - start) / steps)
    return samples, state


def layer_row(method, L, args, limit, points):
    """One row of the layer suite (module docstring): method at context L. ``points``: the
    method's (context, prefill seconds) so far, for the budget; appended to."""
    kind = attention.decode_kind(method.name)
    row = empty_row("layer", method, kind, L, args.steps)
    row["mode"] = "decode"
    need = MEMORY_FACTOR * estimated_bytes(method, L, args.D, args.heads, True, "forward")
    predicted = predicted_seconds(points, L)
    if need > limit:
        row["note"] = f"skipped: prefill estimated at {need / 2 ** 30:.1f} GB > {limit / 2 ** 30:.1f} GB (--max_gb)"
        return row
    if predicted is not None and predicted > args.budget:
        row["note"] = f"skipped: prefill predicted at {predicted:.0f} s > --budget {args.budget:g} s"
        return row
    context = {"layer_idx": 0, "block_size": L, "n_head": args.heads, "head_dim": args.D}
    torch.manual_seed(0)
    module = attention.build(method.name, context, **method.params).eval()
    q, k, v = make_inputs(L, args.D, args.heads, "cpu", False, seed=0)
    tokens = make_inputs(args.steps * (args.repeats + 1), args.D, args.heads, "cpu", False, seed=1)
    with torch.no_grad():
        start = time.perf_counter()
        _, state = module.prefill(q, k, v)
        row["prefill_seconds"] = time.perf_counter() - start
        points.append((L, row["prefill_seconds"]))
        del q, k, v
        module.reset_stats()
        samples, state = time_steps(module, state, tokens, args.steps, args.repeats)
    row["seconds_per_token"] = statistics.median(samples)
    row["seconds_min"], row["seconds_max"], row["repeats"] = min(samples), max(samples), len(samples)
    row["state_bytes"] = state_bytes(state)
    stats = module.stats()
    if stats.get("queries"):
        row["inner_products_per_token"] = stats["alignment_inner_products"] / stats["queries"]
        row["terms_per_token"] = stats.get("terms", 0) / stats["queries"]
    return row


def run_layer(methods, contexts, args):
    """The rows of the layer suite, every method over every context (printed as they come)."""
    limit = memory_limit(args)
    rows = []
    for method in methods:
        points, failed = [], None
        for L in contexts:
            if failed:
                row = empty_row("layer", method, attention.decode_kind(method.name), L, args.steps)
                row["note"] = failed
            else:
                try:
                    row = layer_row(method, L, args, limit, points)
                except Exception as exc:  # noqa: BLE001  (a method's failure is a row, not the end of the run)
                    row = empty_row("layer", method, attention.decode_kind(method.name), L, args.steps)
                    row["note"] = f"failed: {first_line(exc)}"
                    failed = f"skipped: failed at context {L}"
            rows.append(row)
            report(row)
    return rows


def report(row):
    """Print one row as it is done (time per token in ms, state bytes, counted inner products)."""
    t = row["seconds_per_token"]
    print(f"{row['suite']:5s} {row['method']:24s} L={row['context']:6d} "
          f"{'-' if t is None else f'{t * 1e3:.3f} ms/token'} state={row['state_bytes']} "
          f"ips/token={row['inner_products_per_token']} {row['mode']} {row['note']}", flush=True)


# ----------------------------------------------------------------------------------------------
# suite "gpt"


def gpt_mini():
    """The GPT of configs/wikitext2_gpt_mini.py (train.py's reading of the file, WikiText-2's
    vocabulary), randomly initialised with seed 0, in evaluation mode."""
    import configurator
    import training
    from tasks import lm

    cfg = configurator.parse(training.DEFAULTS, [os.path.join(provenance.ROOT, GPT_CONFIG)])
    torch.manual_seed(0)
    return lm.build_model(cfg, None).eval()


def gpt_contexts(block, contexts, quick):
    """The GPT suite's contexts (module docstring), each > 0 and <= ``block``."""
    below = {c for c in contexts if c <= block}
    return sorted(below if quick else below | {block // 16, block // 4, block})


def gpt_rows(model, method, label, recompute, contexts, args):
    """The GPT suite's rows of one method (already swapped in) over ``contexts``."""
    kind = attention.decode_kind(method.name)
    rows = []
    generator = torch.Generator().manual_seed(0)
    for L in contexts:
        row = empty_row("gpt", label, kind, L, args.steps)
        row["spec"] = method.spec
        if L <= args.steps:
            row["note"] = f"skipped: context {L} leaves no prompt before {args.steps} steps"
            rows.append(row)
            continue
        try:
            samples, modes, prefill = [], set(), []
            for _ in range(args.repeats + 1):
                prompt = torch.randint(0, model.config.vocab_size, (1, L - args.steps), generator=generator)
                stats = {}
                model.generate(prompt, args.steps, temperature=0, recompute=recompute, stats=stats)
                samples.append(stats["decode_seconds"] / stats["new_tokens"])
                prefill.append(stats["prefill_seconds"])
                modes.add(stats["mode"])
            samples, prefill = samples[1:], prefill[1:]  # the first repeat warms up
            row["seconds_per_token"] = statistics.median(samples)
            row["seconds_min"], row["seconds_max"], row["repeats"] = min(samples), max(samples), len(samples)
            row["prefill_seconds"] = statistics.median(prefill)
            row["mode"] = " / ".join(sorted(modes))
            if row["mode"] == "decode":
                prompt = torch.randint(0, model.config.vocab_size, (1, L), generator=generator)
                row["state_bytes"] = state_bytes(model.prefill(prompt)[1])
        except Exception as exc:  # noqa: BLE001
            row["note"] = f"failed: {first_line(exc)}"
        rows.append(row)
        report(row)
    return rows


def run_gpt(methods, contexts, args):
    """The rows of the GPT suite: every method swapped into the GPT mini, then softmax recomputing."""
    model = gpt_mini()
    Ls = gpt_contexts(model.config.block_size, contexts, args.quick)
    rows = []
    for method in methods:
        try:
            model.set_attention(method.name, method.params)
        except ValueError as exc:
            row = empty_row("gpt", method, attention.decode_kind(method.name), 0, args.steps)
            row["note"] = f"failed: {first_line(exc)}"
            rows.append(row)
            continue
        rows += gpt_rows(model, method, method.label, False, Ls, args)
    baseline = parse_method(BASELINE)
    model.set_attention(baseline.name, baseline.params)
    rows += gpt_rows(model, baseline, RECOMPUTE_LABEL, True, Ls, args)
    return rows


# ----------------------------------------------------------------------------------------------
# ratios and aims


def add_ratios(rows):
    """``ratio_to_baseline``: a row's seconds per token over softmax's (the KV cache) in the same
    suite and context."""
    base = {(r["suite"], r["context"]): r["seconds_per_token"] for r in rows
            if r["method"] == BASELINE and r["seconds_per_token"]}
    for r in rows:
        ref = base.get((r["suite"], r["context"]))
        if ref and r["seconds_per_token"]:
            r["ratio_to_baseline"] = r["seconds_per_token"] / ref


def measured(rows, label, key="seconds_per_token", suite="layer"):
    """{context: value} of one method's measured rows in ``suite``."""
    return {r["context"]: r[key] for r in rows if r["suite"] == suite and r["method"] == label and r[key] is not None}


def all_met(entries):
    """True / False over the entries' ``met`` (None entries left out); None when none was measured."""
    values = [e["met"] for e in entries if e["met"] is not None]
    return None if not values else all(values)


def aims(rows, methods):
    """The aims of the module docstring from the layer rows: a dict of four aims, each with
    ``met`` (True, False, or None when not measured) and its numbers."""
    state = [m for m in methods if attention.decode_kind(m.name) == "state"]
    flat, constant = [], []
    for m in state:
        times = measured(rows, m.label)
        if len(times) < 2:
            flat.append({"method": m.label, "ratio": None, "met": None})
        else:
            ref = FLAT_REFERENCE if FLAT_REFERENCE in times else min(times)
            ratio = times[max(times)] / times[ref]
            flat.append({"method": m.label, "reference_context": ref, "largest_context": max(times),
                         "ratio": ratio, "met": ratio <= FLAT_LIMIT})
        sizes = measured(rows, m.label, "state_bytes")
        constant.append({"method": m.label, "bytes": sorted(set(sizes.values())),
                         "met": None if len(sizes) < 2 else len(set(sizes.values())) == 1})
    out = {
        "state_time_flat": {"limit": FLAT_LIMIT, "met": all_met(flat), "methods": flat},
        "state_bytes_constant": {"met": all_met(constant), "methods": constant},
    }
    tree = tree_method(methods)
    ips = measured(rows, tree.label, "inner_products_per_token") if tree else {}
    entry = {"method": tree.label if tree else None, "E": TREE_E, "tolerance": SLOPE_TOLERANCE, "slope": None,
             "per_context": [{"context": L, "inner_products": n, "over_L_to_E": n / L ** TREE_E}
                             for L, n in sorted(ips.items())], "met": None}
    if tree is None:
        entry["note"] = "tree attention has no decode path yet: attention.decode_kind('tree') is None"
    elif len(ips) < 2:
        entry["note"] = "fewer than two contexts with counted inner products (module stats)"
    else:
        lo, hi = min(ips), max(ips)
        entry["slope"] = math.log(ips[hi] / ips[lo]) / math.log(hi / lo)
        entry["met"] = abs(entry["slope"] - TREE_E) <= SLOPE_TOLERANCE
    out["tree_inner_products"] = entry
    crossing = {"method": tree.label if tree else None, "baseline": BASELINE, "context": None, "words": None,
                "met": None}
    if tree is not None and measured(rows, tree.label):
        adapted = [dict(method=r["method"], mode="decode", causal=True, D=0, T=r["context"],
                        seconds=r["seconds_per_token"]) for r in rows if r["suite"] == "layer"]
        value = break_even(adapted, tree.label, BASELINE, "decode", True, 0)
        crossing["context"] = value if isinstance(value, int) else None
        crossing["words"] = ("not reached in the range" if value is None else
                             "below the range" if value == "below grid" else f"above about {value:,} tokens")
        crossing["met"] = value is not None
    out["tree_crossover"] = crossing
    return out


# ----------------------------------------------------------------------------------------------
# figure and output


def plot(rows, labels, path):
    """decode.png: layer time per token, layer state bytes, GPT mini time per token (log-log
    against the context), one style per method (scripts/plot_style.py), written atomically."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("layer", "seconds_per_token", "one layer: time per token (s)"),
              ("layer", "state_bytes", "one layer: state bytes"),
              ("gpt", "seconds_per_token", "GPT mini: time per token (s)"))
    all_labels = list(dict.fromkeys([*labels, RECOMPUTE_LABEL]))
    styles = plot_style.figure_styles(all_labels)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4))
    for ax, (suite, key, title) in zip(axes, panels):
        for label in all_labels:
            pts = sorted(measured(rows, label, key, suite).items())
            if pts:
                ax.plot(*zip(*pts), ms=4, lw=1.6 if label == BASELINE else 1.2, label=label, **styles[label])
        loglog_axes(ax, title, title.split(": ")[1])
        ax.set_xlabel("context L (tokens)")
    handles = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(list(handles.values()), list(handles), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    data.atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"))
    plt.close(fig)


def default_out(quick):
    """results/decode/<UTC date>_<cpu>[_quick]: the CPU's name without trademarks, as a slug."""
    from scripts.analysis.published.formatting import short_cpu

    cpu = re.sub(r"[^a-z0-9]+", "-", short_cpu(provenance.machine()["cpu"]).lower()).strip("-") or "cpu"
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    return os.path.join("results", "decode", f"{day}_{cpu}" + ("_quick" if quick else ""))


def write_outputs(out, payload, rows, labels, commit):
    """decode.json, decode.csv, decode.png into ``out`` (each atomically), then the manifest entry."""
    os.makedirs(out, exist_ok=True)
    data.write_json(os.path.join(out, "decode.json"), payload)
    data.atomic_write(os.path.join(out, "decode.csv"), lambda tmp: write_csv(tmp, rows, FIELDS))
    plot(rows, labels, os.path.join(out, "decode.png"))
    provenance.record(os.path.join(out, "decode"), commit=commit,
                      extra={"threads": payload["settings"]["threads"], "quick": payload["settings"]["quick"]})


def main(argv=None):
    """Parse ``argv`` (module docstring), run both suites, write the outputs; returns the payload
    (settings, methods, rows, aims). Bad input is one line, exit status 2."""
    ap = data.ArgumentParser(prog="python -m scripts.bench.decode", description=__doc__.split("\n")[0])
    ap.add_argument("--contexts", default=None, help=f"comma list of context lengths (default {DEFAULT_CONTEXTS})")
    ap.add_argument("--repeats", type=int, default=None, help="timed samples per point (default 5; --quick 2)")
    ap.add_argument("--steps", type=int, default=None, help="tokens per timed sample (default 16; --quick 2)")
    ap.add_argument("--heads", type=int, default=8, help="H of the layer suite (B = 1)")
    ap.add_argument("--D", type=int, default=64, help="head dim of the layer suite")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=float, default=600.0, help="seconds a prefill may be predicted to take")
    ap.add_argument("--max_gb", type=float, default=None, help="memory a prefill may be estimated to need "
                                                               "(default: half the RAM)")
    ap.add_argument("--methods", nargs="+", default=None, help="only these (default: every decode-capable attention)")
    ap.add_argument("--suites", default="layer,gpt", help="comma list of layer, gpt")
    ap.add_argument("--out", default=None, help="output folder (default results/decode/<UTC date>_<cpu>)")
    ap.add_argument("--quick", action="store_true", help=f"contexts {QUICK_CONTEXTS}, 2 repeats of 2 steps (tests)")
    args = ap.parse_args(argv)
    try:
        contexts = sorted(set(parse_list(args.contexts or (QUICK_CONTEXTS if args.quick else DEFAULT_CONTEXTS), int)))
    except ValueError:
        ap.error(f"--contexts must be a comma list of integers; got {args.contexts!r}")
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.steps = args.steps or (2 if args.quick else 16)
    suites = parse_list(args.suites, str)
    if not contexts or min(contexts) < 1:
        ap.error(f"--contexts must be positive integers; got {args.contexts!r}")
    if args.repeats < 1 or args.steps < 1 or args.heads < 1 or args.D < 1 or args.threads < 1:
        ap.error("--repeats, --steps, --heads, --D and --threads must be >= 1")
    if not set(suites) <= {"layer", "gpt"} or not suites:
        ap.error(f"--suites takes layer and/or gpt; got {args.suites!r}")
    try:
        methods = decode_methods(args.methods)
    except ValueError as e:
        ap.error(str(e))
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    commit = provenance.git_commit()
    out = args.out or default_out(args.quick)
    rows = []
    if "layer" in suites:
        rows += run_layer(methods, contexts, args)
    if "gpt" in suites:
        rows += run_gpt(methods, contexts, args)
    add_ratios(rows)
    labels = [m.label for m in methods]
    settings = dict(contexts=contexts, repeats=args.repeats, steps=args.steps, B=1, heads=args.heads, D=args.D,
                    dtype="float32", device="cpu", threads=args.threads, budget=args.budget, max_gb=args.max_gb,
                    suites=suites, quick=args.quick, baseline=BASELINE, gpt_config=GPT_CONFIG,
                    torch=torch.__version__, machine=provenance.machine(),
                    timing="per token: median over repeats of (wall time of `steps` calls) / steps, after `steps` "
                           "warm-up calls (layer) or one warm-up generate (gpt: decode seconds / new tokens)",
                    state_bytes="attention.state_nbytes: every tensor storage held by the state, counted once")
    method_info = [dict(m.as_dict(), spec=m.spec, decode=attention.decode_kind(m.name),
                        params_full={k: v for k, v in m.full_params().items() if not callable(v)}) for m in methods]
    payload = {"settings": settings, "methods": method_info, "aims": aims(rows, methods), "rows": rows}
    write_outputs(out, payload, rows, labels, commit)
    print(f"wrote {out}/decode.json, decode.csv, decode.png")
    for key, value in payload["aims"].items():
        print(f"aim {key}: met={value['met']}")
    return payload


if __name__ == "__main__":
    main()
