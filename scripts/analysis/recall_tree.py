"""Tree attention at inference on a softmax model trained on multi-query associative recall
(issue 25, section 2): test accuracy against E for each sampler, descent rule and seed of the
draws, and how often the tree attended exactly to the position each query must find.

    python -m scripts.analysis.recall_tree out/mqar_256_16_ref [--E=0.05,0.1,0.2,0.5,1] [--samplers=all]
        [--descents=all] [--seeds=0,1,2] [--num_examples=0] [--record_examples=100]
        [--out=results/recall/tree_mqar_256_16_ref]

Tree attention ("High Attention Scores and Where to Find Them", Algorithm 1) replaces softmax in
every layer (``model.set_attention``, as eval_ppl.py swaps attentions; parameters not given keep
the module's defaults: normalization bud_mean unless --normalization, P from the block size).
A recall query has one key that matters, so this measures directly whether the samplers find the
high attention scores. MQAR: Arora et al. 2023, "Zoology: Measuring and Improving Recall in
Efficient Language Models" (data/recall.py, tasks/recall.py).

Data: the test split the run was tested on (the folder in its final_metrics.json; else the one
of its options, ``tasks.recall.load_data``).

Accuracy: ``tasks.recall.split_metrics`` (every query of the first --num_examples test examples,
in the training run's batches) with tree attention in every layer (the fast implementation), and
once with the model's own softmax (``exact_softmax_accuracy``).

Which keys the tree found: the record of the LOOKUP layer (``TreeAttention.forward_recorded``,
the reference implementation with the same draws) at every query of the first --record_examples
examples, on the inputs that layer received in the tree model (captured with
``scripts.analysis.capture``). A key counts as found when it is a term of its own (a bud holding
one key): tree attention then attends to it exactly, with softmax's weight exp(score); any other
key only contributes through its bud's mean score. Which layer and which position: the lookup
reads the value token, so the position to find is the value position j+1, written
``matched_key_fraction`` (the "matching key" of that attention). Without a token shift a two-layer
model does it in its last layer (an induction circuit: layer 0 copies the key token at j into the
value position j+1, whose key the query then matches); with the token shift of
configs/recall/gpt_token_shift.py the value position holds its key from the start, and layer 0 does the
lookup (docs/recall.md, attention maps). ``--record_layer=auto`` (default) records the layer
whose exact softmax puts the most weight on j+1 at the queries; the manifest holds those weights
for every layer (mean weight and argmax rate on j+1, on j, on the other pairs' positions). The
key's own position j is ``key_position_fraction``; for the tree the two fractions are equal by
construction: j is even, so j and j+1 are sibling leaves (one parent node); a bud holds both
until that 2-leaf bud is split, which makes both exact.

Outputs (``--out`` = results/recall/tree_<run name> by default):
  <out>.csv  one row per (sampler, descent, E, seed): sampler, descent, E, seed, test_accuracy,
             matched_key_fraction, exact_softmax_accuracy, then key_position_fraction (equal
             to matched_key_fraction, see above; kept as a check),
             chance_fraction (mean over queries of exact keys / history: the matched fraction of a
             tree that picked its exact keys blindly), exact_keys_per_query (mean number of keys
             attended exactly in the recorded layer),
             history_per_query (mean number of keys a query may attend to), inner_product_fraction
             (query-key(-sum) inner products of the tree over exact attention's, all layers),
             normalization, queries, recorded_queries, seconds. Written row by row.
  <out>.png  test accuracy (top) and matched_key_fraction (bottom) against E, a line per sampler
             (mean over seeds, bars: standard deviation), a column per descent rule, exact
             softmax dashed, chance_fraction (mean over samplers) dotted.
  manifest.json entry <name>: command, commit, the model, settings, the attention diagnostics
             and the largest difference between the recorded (reference) and the fast path's
             recorded layer's outputs at the recorded queries (the record describes the evaluated
             model only if this is ~0; the model runs in float64 so that both make the same draws).

E = 1 is exact attention for every sampler, descent rule and seed (every bud is split down to
one key; tests/attention/test_tree.py and test_tree_selected_keys.py check it), so it is
evaluated once and its row repeated for the other (sampler, descent, seed), with seconds = 0.

Cost: the record runs the readable reference one query at a time (a few ms per query and a tree
insertion per position), which dominates: measure the time of one configuration (``seconds``)
before a full grid and lower --record_examples if needed.
"""
import argparse
import csv
import os
import statistics
import sys
import time

import numpy as np
import torch

import checkpoint
import provenance
from attention.tree.samplers import SAMPLERS
from attention.tree.schedule import DESCENTS
from scripts.analysis.capture import attention_weights, capture
from scripts.analysis.runs import RunNotFound, open_run
from scripts.analysis.published.tree import SAMPLER_LABEL
from data import recall as recall_data
from tasks import recall as recall_task

FIELDS = ("sampler", "descent", "E", "seed", "test_accuracy", "matched_key_fraction", "exact_softmax_accuracy",
          "key_position_fraction", "chance_fraction", "exact_keys_per_query", "history_per_query",
          "inner_product_fraction",
          "normalization", "queries", "recorded_queries", "seconds")
SOFTMAX = ("softmax", "softmax_reference")


def query_keys(inputs, labels, num_pairs):
    """Each query position and the context position of its key.

    Args:
        inputs (array): (n, T) token ids of MQAR examples (data/recall.py: the context
            k_1 v_1 ... k_N v_N at positions 0 .. 2N-1).
        labels (array): (n, T), -1 except at query positions.
        num_pairs (int): N.

    Returns:
        int64 array (M, 3) of (example, query position t, key position j), one row per query in
        example order; the value sits at j + 1.

    Raises:
        ValueError: a query whose token is not exactly one key of its context, or a label that
            is not the value after that key (not MQAR data with ``num_pairs`` pairs).
    """
    inputs, labels = np.asarray(inputs, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    rows = []
    for b, t in zip(*np.nonzero(labels != -1)):
        hits = np.nonzero(inputs[b, 0:2 * num_pairs:2] == inputs[b, t])[0]
        if len(hits) != 1 or labels[b, t] != inputs[b, 2 * hits[0] + 1]:
            raise ValueError(f"example {b}, query position {t}: token {inputs[b, t]} is {len(hits)} times a key of "
                             f"the context (expected once, with the label as the value after it); not MQAR data "
                             f"with {num_pairs} pairs")
        rows.append((b, t, 2 * hits[0]))
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def test_split(out_dir, cfg):
    """(folder, (inputs, labels)) of the test split a recall run was tested on: the data folder
    named in its final_metrics.json when it is still there (the exact examples, whatever the task's
    options have become since), else the folder of the run's options (``tasks.recall.load_data``,
    generated first if missing; options the run predates take the task's defaults)."""
    try:
        final = open_run(out_dir).final_metrics or {}  # scripts/analysis/runs.py: a run folder or its packed file
    except RunNotFound:
        final = {}
    folder = (final.get("data") or {}).get("folder")
    if folder and os.path.isdir(folder):
        return folder, recall_data.load(folder, "test")
    cfg = {**recall_task.DEFAULTS, **cfg}
    recall_task.prepare_data(cfg)  # nothing to do when the folder exists with the same manifest
    loaded = recall_task.load_data(cfg)
    return loaded["manifest"]["folder"], loaded["test"]


def _batches(n, batch_size):
    """(start, stop) of the batches ``tasks.recall.split_metrics`` forms over n examples: the same
    batch composition, so each example keeps its batch index in the tree's draws."""
    return [(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]


def _layer_inputs(model, inputs, start, stop, layer):
    """q, k, v (B, H, T, D), output and the module of attention layer ``layer`` (-1 = the last) for
    examples start..stop-1."""
    idx = torch.from_numpy(np.asarray(inputs[start:stop], dtype=np.int64))
    return capture(model, idx)[layer]


def exact_attention_diagnostics(model, inputs, keys, batch_size, n, layer=-1):
    """Where the model's own (softmax) attention layer ``layer`` looks at the queries of the first n examples.

    Returns:
        dict: mean attention weight (head mean) on the value position j+1, on the key position j,
        and on each other pair's value / key position (mean per position); and the fraction of
        (query, head) pairs whose largest weight is on j+1, on j, elsewhere.
    """
    sums = dict.fromkeys(("value_weight", "key_weight", "other_values_weight", "other_keys_weight",
                          "argmax_value", "argmax_key", "argmax_elsewhere"), 0.0)
    count = 0
    for start, stop in _batches(n, batch_size):
        rec = _layer_inputs(model, inputs, start, stop, layer)
        w = attention_weights(rec["mechanism"], rec["q"], rec["k"], rec["causal"])  # (B, H, T, T)
        for b, t, j in keys[(keys[:, 0] >= start) & (keys[:, 0] < stop)]:
            row = w[b - start, :, t]                      # (H, T)
            pairs = keys[keys[:, 0] == b, 2]
            others = pairs[pairs != j]
            sums["value_weight"] += float(row[:, j + 1].mean())
            sums["key_weight"] += float(row[:, j].mean())
            if len(others):
                others = torch.from_numpy(others)
                sums["other_values_weight"] += float(row[:, others + 1].mean())
                sums["other_keys_weight"] += float(row[:, others].mean())
            top = row.argmax(-1)
            sums["argmax_value"] += float((top == j + 1).double().mean())
            sums["argmax_key"] += float((top == j).double().mean())
            sums["argmax_elsewhere"] += float(((top != j) & (top != j + 1)).double().mean())
            count += 1
    return {name: value / max(count, 1) for name, value in sums.items()} | {"queries": count}


def record_layer(model, inputs, labels, keys, batch_size, n, layer=-1):
    """Attention layer ``layer``'s exact keys at every query of the first n examples (tree attention in the model).

    Returns:
        dict: "value_found" / "key_found" (bool (M,) per row of ``keys`` of those examples: the
        value position j+1 / the key position j was attended exactly), "exact_keys" (int (M,):
        keys attended exactly), "history" (int (M,): keys allowed), "max_output_diff" (largest
        |reference - fast| at the recorded queries).
    """
    value_found, key_found, exact_count, history, diff = [], [], [], [], 0.0
    for start, stop in _batches(n, batch_size):
        rec = _layer_inputs(model, inputs, start, stop, layer)
        mask = torch.from_numpy(np.asarray(labels[start:stop]) != -1)
        out, record = rec["mechanism"].forward_recorded(rec["q"], rec["k"], rec["v"], rec["causal"], positions=mask)
        diff = max(diff, float((out - rec["out"]).abs().transpose(1, 2)[mask].max()))
        exact = record["exact_keys"][:, 0]                # (B, T, T); the same for every head
        for b, t, j in keys[(keys[:, 0] >= start) & (keys[:, 0] < stop)]:
            value_found.append(bool(exact[b - start, t, j + 1]))
            key_found.append(bool(exact[b - start, t, j]))
            exact_count.append(int(exact[b - start, t].sum()))
            history.append(int((record["bud_start"][b - start, t] >= 0).sum()))
    return {"value_found": np.array(value_found), "key_found": np.array(key_found),
            "exact_keys": np.array(exact_count), "history": np.array(history), "max_output_diff": diff}


def _mean(values):
    """Mean of a numpy array as a float; NaN when empty (nothing recorded)."""
    return float(values.mean()) if len(values) else float("nan")


def _tree_cost(model):
    totals = {}
    for module in model.attention_modules():
        for name, value in module.stats().items():
            totals[name] = totals.get(name, 0) + value
    return totals["alignment_inner_products"] / max(totals["full_attention_inner_products"], 1)


def evaluate_grid(model, inputs, labels, keys, batch_size, Es, samplers, descents, seeds, normalization,
                  record_examples, on_row=None, layer=-1):
    """Every (descent, sampler, E, seed) of tree attention in ``model`` (modified in place: its
    attention is replaced), on the examples ``inputs`` / ``labels`` (n, T); ``keys`` = ``query_keys``
    of the first ``record_examples`` of them, whose exact keys are recorded in attention layer ``layer``. Returns the rows (dicts with FIELDS) and the largest
    reference / fast path output difference. ``on_row(row)`` is called after each row."""
    exact_accuracy = recall_task.split_metrics(model, inputs, labels, batch_size, "cpu")["accuracy"]
    rows, max_diff, at_E1 = [], 0.0, None
    for descent in descents:
        for sampler in samplers:
            for E in Es:
                for seed in seeds:
                    if E == 1.0 and at_E1 is not None:  # exact attention whatever the draws: computed once
                        row = {**at_E1, "sampler": sampler, "descent": descent, "seed": seed, "seconds": 0.0}
                        rows.append(row)
                        if on_row:
                            on_row(row)
                        continue
                    t0 = time.time()
                    model.set_attention("tree", {"E": E, "sampler": sampler, "descent": descent, "seed": seed,
                                                 "normalization": normalization})
                    m = recall_task.split_metrics(model, inputs, labels, batch_size, "cpu")
                    cost = _tree_cost(model)
                    found = record_layer(model, inputs, labels, keys, batch_size, record_examples, layer)
                    max_diff = max(max_diff, found["max_output_diff"])
                    row = {"sampler": sampler, "descent": descent, "E": E, "seed": seed,
                           "test_accuracy": m["accuracy"], "matched_key_fraction": _mean(found["value_found"]),
                           "exact_softmax_accuracy": exact_accuracy,
                           "key_position_fraction": _mean(found["key_found"]),
                           "chance_fraction": _mean(found["exact_keys"] / np.maximum(found["history"], 1)),
                           "exact_keys_per_query": _mean(found["exact_keys"]),
                           "history_per_query": _mean(found["history"]), "inner_product_fraction": cost,
                           "normalization": normalization, "queries": m["queries"], "recorded_queries": len(keys),
                           "seconds": round(time.time() - t0, 2)}
                    rows.append(row)
                    if E == 1.0:
                        at_E1 = row
                    if on_row:
                        on_row(row)
    return rows, max_diff


def plot(path, rows):
    """Accuracy and matched_key_fraction against E (see the module docstring)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    descents = list(dict.fromkeys(r["descent"] for r in rows))
    fig, axes = plt.subplots(2, len(descents), figsize=(5.5 * len(descents), 7), squeeze=False, sharey="row")
    for col, descent in enumerate(descents):
        for row_i, (field, label) in enumerate((("test_accuracy", "test accuracy"),
                                                ("matched_key_fraction", "queries whose value position\n"
                                                 "the lookup layer attended exactly"))):
            ax = axes[row_i][col]
            for i, sampler in enumerate(s for s in SAMPLERS if any(r["sampler"] == s for r in rows)):
                Es = sorted({r["E"] for r in rows if r["sampler"] == sampler and r["descent"] == descent})
                vals = [[r[field] for r in rows if r["sampler"] == sampler and r["descent"] == descent
                         and r["E"] == E] for E in Es]
                ax.errorbar(Es, [statistics.fmean(v) for v in vals],
                            yerr=[statistics.stdev(v) if len(v) > 1 else 0.0 for v in vals],
                            marker="o", capsize=2, color=f"C{i}", label=SAMPLER_LABEL.get(sampler, sampler))
            if field == "test_accuracy":
                ax.axhline(rows[0]["exact_softmax_accuracy"], color="k", ls="--", lw=1, label="exact softmax")
                ax.set_title(f"descent {descent}")
            else:
                Es = sorted({r["E"] for r in rows if r["descent"] == descent})
                ax.plot(Es, [statistics.fmean(r["chance_fraction"] for r in rows if r["descent"] == descent
                                              and r["E"] == E) for E in Es], "k:", lw=1,
                        label="chance (exact keys / history)")
            ax.set_xlabel("E  (ceil(l^E) terms for l keys)")
            ax.set_ylabel(label)
            ax.set_ylim(-0.02, 1.02)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _floats(text, name):
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"error: --{name} must be comma-separated numbers; got {text!r}") from None
    bad = [v for v in values if not 0.0 < v <= 1.0]
    if not values or bad:
        raise SystemExit(f"error: --{name} values must lie in (0, 1] (ceil(l^E) terms); got {text!r}")
    return values


def _names(text, allowed, name):
    values = list(allowed) if text == "all" else [x.strip() for x in text.split(",") if x.strip()]
    bad = [v for v in values if v not in allowed]
    if not values or bad:
        raise SystemExit(f"error: --{name} {bad or text!r} unknown; allowed: all or a comma list of {', '.join(allowed)}")
    return values


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", help="run directory of a softmax model trained with task=recall (train.py)")
    ap.add_argument("--E", default="0.05,0.1,0.2,0.5,1", help="comma list of E in (0, 1]")
    ap.add_argument("--samplers", default="all", help=f"all or a comma list of {', '.join(SAMPLERS)}")
    ap.add_argument("--descents", default="all", help=f"all or a comma list of {', '.join(DESCENTS)}")
    ap.add_argument("--seeds", default="0,1,2", help="comma list of seeds of the tree's draws")
    ap.add_argument("--normalization", default="bud_mean", choices=("bud_mean", "paper"))
    ap.add_argument("--num_examples", type=int, default=0, help="first test examples for accuracy (0 = all)")
    ap.add_argument("--record_examples", type=int, default=100,
                    help="first test examples whose queries are recorded (the slow part); at most num_examples")
    ap.add_argument("--weights", default="best.pt", help="best.pt (the weights train.py tested; ckpt.pt if "
                    "absent) or ckpt.pt")
    ap.add_argument("--batch_size", type=int, default=0, help="evaluation batch (0 = the run's batch_size)")
    ap.add_argument("--num_threads", type=int, default=1)
    ap.add_argument("--record_layer", default="auto", help="attention layer whose exact keys are recorded: an index, "
                    "or auto = the layer whose exact softmax puts the most weight on the value position j+1")
    ap.add_argument("--out", default="", help="output prefix (default results/recall/tree_<run name>)")
    args = ap.parse_args(argv)
    Es = _floats(args.E, "E")
    samplers = _names(args.samplers, SAMPLERS, "samplers")
    descents = _names(args.descents, DESCENTS, "descents")
    try:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"error: --seeds must be comma-separated integers; got {args.seeds!r}") from None
    if args.num_examples < 0 or args.record_examples < 0 or not seeds:
        raise SystemExit("error: --num_examples and --record_examples must be >= 0 and --seeds not empty")
    torch.set_num_threads(args.num_threads)
    commit = provenance.git_commit()

    weights = args.weights
    if weights == "best.pt" and not os.path.exists(os.path.join(args.out_dir, "best.pt")):
        weights = "ckpt.pt"
    model, cfg, meta = checkpoint.load(args.out_dir, weights=weights)
    if meta["task"] != "recall" or cfg is None:
        raise SystemExit(f"error: {args.out_dir} holds a {meta['task']!r} model; this measures models trained with "
                         f"task=recall (train.py configs/recall/mqar.py)")
    if model.config.attention not in SOFTMAX:
        raise SystemExit(f"error: {args.out_dir} was trained with attention {model.config.attention!r}; tree "
                         f"attention approximates softmax, so the model must be trained with one of {SOFTMAX}")
    model = model.double()  # the fast path then makes exactly the reference's draws (attention/tree/__init__.py)
    folder, (inputs, labels) = test_split(args.out_dir, cfg)
    n = len(inputs) if args.num_examples == 0 else min(args.num_examples, len(inputs))
    inputs, labels = inputs[:n], labels[:n]
    record_n = min(args.record_examples, n)
    batch_size = args.batch_size or cfg["batch_size"]
    out = args.out or os.path.join("results", "recall", "tree_" + os.path.basename(os.path.normpath(args.out_dir)))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    keys = query_keys(inputs[:record_n], labels[:record_n], cfg["recall_pairs"])
    n_layers = len(model.attention_modules())
    diagnostics = [exact_attention_diagnostics(model, inputs, keys, batch_size, record_n, layer)
                   for layer in range(n_layers)]
    for layer, d in enumerate(diagnostics):
        print(f"{args.out_dir} ({weights}, step {meta['iter_num']}): {n} test examples, {record_n} recorded; exact "
              f"softmax layer {layer} at the queries: weight on the value position j+1 {d['value_weight']:.3f}, "
              f"on the key position j {d['key_weight']:.3f}, argmax at j+1 {d['argmax_value']:.3f}, "
              f"at j {d['argmax_key']:.3f}", flush=True)
    if args.record_layer == "auto":
        layer = max(range(n_layers), key=lambda i: diagnostics[i]["value_weight"])
    else:
        try:
            layer = int(args.record_layer)
        except ValueError:
            raise SystemExit(f"error: --record_layer must be auto or a layer index; got {args.record_layer!r}") from None
        if not -n_layers <= layer < n_layers:
            raise SystemExit(f"error: --record_layer={layer}: the model has {n_layers} attention layers "
                             f"(indices 0..{n_layers - 1} or negative from the end)")
        layer %= n_layers
    print(f"recording layer {layer}", flush=True)
    with open(out + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()

        def on_row(row):
            writer.writerow(row)
            f.flush()
            print(" ".join(f"{k}={row[k]:.4g}" if isinstance(row[k], float) else f"{k}={row[k]}"
                           for k in FIELDS), flush=True)

        rows, max_diff = evaluate_grid(model, inputs, labels, keys, batch_size, Es, samplers,
                                       descents, seeds, args.normalization, record_n, on_row, layer)
    plot(out + ".png", rows)
    provenance.record(out, commit=commit, extra={
        "model": args.out_dir, "weights": weights, "iter_num": meta["iter_num"], "num_threads": args.num_threads,
        "data": folder, "test_examples": n, "record_examples": record_n, "batch_size": batch_size, "dtype": "float64",
        "layer_recorded": layer, "record_layer": args.record_layer,
        "exact_attention_per_layer": diagnostics, "max_output_diff_reference_vs_fast": max_diff})
    print(f"wrote {out}.csv {out}.png ({len(rows)} rows); largest |reference - fast| at recorded queries "
          f"{max_diff:.2e}")
    if max_diff > 1e-6:
        print("warning: the recorded (reference) outputs differ from the evaluated ones; the record may not "
              "describe the evaluated model", file=sys.stderr)


if __name__ == "__main__":
    main()
