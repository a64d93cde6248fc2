"""Attention maps of one head per layer of several trained GPTs on the same input, as in Figure 4
of the FAST paper ("FAST: Factorizable Attention for Speeding up Transformers", Gerami et al.
2024, section 3.1: softmax vs Fastmax transformers trained on Tiny Shakespeare), for every
registered attention.

    python -m scripts.analysis.attention_maps out/shakespeare_char_gpt out/shakespeare_char_gpt_fastmax2 \\
        [--labels=softmax,fastmax2] [--length=128] [--head=0] [--split=val] [--offset=0] \\
        [--out=results/shakespeare_attention_maps] [--scale=linear|row|log|signed|abs[,...]] [--weights=ckpt.pt]

    python -m scripts.analysis.attention_maps out/recall/softmax_T256_N16_d64_lr0.003_s0 ... \\
        --split=test --example=0 --weights=best.pt --scale=linear,log --out=results/recall/attention_maps_256_16

Each out_dir's checkpoint (``--weights``: ckpt.pt, or best.pt, ckpt.pt where a run has no
best.pt) becomes a model through ``checkpoint.load`` (eval mode, the model's own attention), as
eval_ppl.py loads it; ``--attention`` (once per out_dir, "-" = the model's own) swaps another in,
as eval_ppl.py's does: tree attention (inference only) gets its maps on a trained softmax model, e.g.
``out/gpt_mini/softmax_s1337`` three times with ``--attention=- --attention=tree:E=0.5
--attention=tree:E=0.3``. Every model reads the same input:

- language models (task lm): ``--length`` tokens of ``--split`` from token ``--offset`` on
  (character level: the first 128 characters of the val split by default; WikiText-2
  checkpoints: GPT-2 BPE tokens). All checkpoints must be trained on the same data set (and, for
  shakespeare_char, with the prepared vocabulary).
- multi-query associative recall (task recall, tasks/recall.py; "Zoology: Measuring and Improving
  Recall in Efficient Language Models", Arora et al. 2023): example ``--example`` of ``--split``
  of the run's data folder (the one named in its final_metrics.json, else the one of its options:
  ``scripts.analysis.recall_tree.test_split``), all of its T tokens (``--length`` shorter cuts
  it). All checkpoints must use the same folder. Each query position t, the position j of its
  key in the context and the value position j + 1 are marked on the maps (value: circle, key:
  cross), and the weights of every layer at the queries are summarised over the first
  ``--stat_examples`` examples of the split (below).

Capture: a forward pre-hook on every block's registered attention module (``forward(q, k, v,
causal, attention_mask)`` on (B, H, T, D) tensors) stores q, k, v, and a forward hook its output.
The (T, T) weight matrix A of head ``--head`` of every layer is then
``scripts.analysis.capture.attention_weights``: the closed forms of softmax / softmax_reference
(A_ij = exp(q_i.k_j / sqrt(D)) / sum_n exp(q_i.k_n / sqrt(D)) over the allowed keys) and fastmax
(A_ij = f(s_ij) / sum_n f(s_in), FAST paper Eq. 5-12), and for every other attention the matrix
read off the module itself by calling it with the identity's columns as values (every registered
attention is linear in v for fixed q, k and fixed random draws). Evaluation mode: no dropout.

Rows sum to one over the allowed keys except for DenseAttention (no normalizer: A_ij = q_i.k_j,
entries of any sign and size) and Linformer (A = softmax(q (E k)^T / sqrt(D)) F); disallowed
entries (causal: j > i) are zero. As a check of the capture, A @ v is compared with the module's
actual output for that head; the largest absolute difference per (model, layer) is stored
(``reconstruction_error``) and a warning is printed when it exceeds 1e-3 times the output's scale.

Recall summary (per model and layer, over the queries of the first ``--stat_examples`` examples):
``value_weight`` / ``key_weight``, the mean of A[t, j + 1] / A[t, j] (head ``--head``);
``value_share`` / ``key_share``, the same for |A_tj| / sum_n |A_tn| (equal to the weight for
rows of non-negative weights summing to one; comparable for DenseAttention); ``argmax_value`` /
``argmax_key``, the fraction of queries whose largest |A_tn| is at j + 1 / j; ``uniform_weight``,
the mean of 1 / (t + 1), what an evenly spread causal row puts on one key.

Outputs: ``<out>.png`` (rows = models, columns = layers; colour = weight, see ``--scale``; a
further ``<out>_<scale>.png`` per extra scale of a comma list; recall: ``<out>_queries.png``, the
query rows only, ``plot_query_rows``) and ``<out>.npz`` (``np.savez_compressed``) with ``weights``
(M, L, T, T) float32, ``tokens`` (T,) int64, ``labels`` (M,), ``attention`` (M,) names, ``layers``
(L,), ``head``, ``reconstruction_error`` (M, L), ``text`` (the decoded input, character level
only; else ""), ``query_positions``, ``key_positions``, ``value_positions`` (Q,) int64 (recall; else
empty), ``weights_file``, and for recall ``stat_<name>`` (M, L) for the summary above,
``stat_queries`` and ``stat_examples``.

The weights are computed, checked and drawn in float64 (``main`` returns them so) but stored as
float32: attention probabilities in [0, 1] (DenseAttention's and DANet's unnormalised weights may
have either sign), where float32 keeps 7 significant digits (relative error at most 6e-8), far
below what a figure shows, at half the bytes (issue 44: results/ under 20 MB). The recall summary
``stat_*`` and ``reconstruction_error`` stay float64.
"""
import argparse
import os
import sys
import warnings

import numpy as np
import torch

import attention
import checkpoint
import provenance
from scripts.analysis.capture import attention_weights, capture

SCALES = ("linear", "row", "log", "signed", "abs")
RECALL_STATS = ("value_weight", "key_weight", "value_share", "key_share", "argmax_value", "argmax_key",
                "uniform_weight")


def load_checkpoint(out_dir, device="cpu", weights="ckpt.pt"):
    """The model of ``out_dir`` (``checkpoint.load``, eval mode, on ``device``) and the training config
    stored in the checkpoint.

    Args:
        weights: "ckpt.pt" (the last checkpoint) or "best.pt" (the weights train.py tested; the
            run's ckpt.pt when it has no best.pt).

    Raises:
        FileNotFoundError: no checkpoint in ``out_dir``.
        ValueError: ``weights`` is neither.
    """
    if weights not in ("ckpt.pt", "best.pt"):
        raise ValueError(f"weights must be ckpt.pt or best.pt; got {weights!r}")
    if not os.path.exists(os.path.join(out_dir, "ckpt.pt")):
        raise FileNotFoundError(f"no checkpoint at {os.path.join(out_dir, 'ckpt.pt')}")
    if not os.path.exists(os.path.join(out_dir, weights)):
        weights = "ckpt.pt"
    model, config, _ = checkpoint.load(out_dir, weights=weights)
    return model.to(device), config


def swap_attention(model, spec):
    """Swap attention ``spec`` ("name" or "name:key=value,...", the benchmark's syntax; "-" = keep
    the model's own) into every layer of ``model`` (``model.set_attention``), e.g. tree attention
    into a trained softmax GPT: the inference-only methods get their maps this way.

    Raises:
        ValueError: unknown attention or parameter (the message lists the registered ones), the
            benchmark's own names (sdpa, authors), or an attention that is not exactly causal in a
            causal model (its weights would see later tokens).
    """
    if spec == "-":
        return
    from scripts.bench.attention import parse_method  # the one parser of "name:key=value,..."

    method = parse_method(spec)
    if method.kind != "registry":
        raise ValueError(f"--attention {spec!r}: not a registered attention; registered: "
                         f"{', '.join(attention.registered())}")
    try:  # a causal model refuses an attention that is not exactly causal (attention.causal_refusal)
        model.set_attention(method.name, method.params)
    except ValueError as e:
        raise ValueError(f"--attention {spec!r}: {e}") from None


def input_tokens(config, split="val", length=128, offset=0):
    """The shared input of language models: ``length`` tokens of ``split`` from token ``offset`` on.

    Args:
        config: a checkpoint's training config (its "dataset" and "dataset_config" decide the data).

    Returns:
        (tokens, text): tokens a (length,) int64 array; text the decoded characters for
        shakespeare_char, "" otherwise.

    Raises:
        ValueError: unknown data set, or the split has fewer than offset + length tokens.
        data.DataUnavailable: the data is not prepared.
    """
    dataset = config.get("dataset", "wikitext2")
    if dataset == "shakespeare_char":
        from data.shakespeare_char import prepare as shakespeare

        ids, vocab = shakespeare.open_split(split), shakespeare.load_meta()["vocab"]
    elif dataset == "wikitext2":
        from data.wikitext2 import prepare as wt2

        ids, vocab = wt2.open_split(split, config.get("dataset_config", "wikitext-2-v1")), None
    else:
        raise ValueError(f"attention_maps reads shakespeare_char or wikitext2 checkpoints; got dataset {dataset!r}")
    if offset < 0 or length < 1 or offset + length > len(ids):
        raise ValueError(f"split {split!r} has {len(ids):,} tokens; cannot take {length} from offset {offset}")
    tokens = np.asarray(ids[offset:offset + length], dtype=np.int64)
    text = "".join(vocab[int(t)] for t in tokens) if vocab is not None else ""
    return tokens, text


def recall_split(out_dir, config, split="test"):
    """(folder, inputs (n, T) int64, labels (n, T) int64) of ``split`` of a recall run's data: the
    folder its final_metrics.json names, else the one of its options
    (``scripts.analysis.recall_tree.test_split``; the other splits from the same folder).

    Raises:
        ValueError: an unknown split.
    """
    from data import recall as recall_data
    from scripts.analysis.recall_tree import test_split

    if split not in recall_data.SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(recall_data.SPLITS)}")
    folder, (inputs, labels) = test_split(out_dir, config)
    if split != "test":
        inputs, labels = recall_data.load(folder, split)
    return folder, np.asarray(inputs, dtype=np.int64), np.asarray(labels, dtype=np.int64)


def recall_queries(inputs, labels, num_pairs, length=None):
    """Query positions t, key positions j and value positions j + 1 of MQAR examples
    (``recall_tree.query_keys``), keeping the queries t < ``length``.

    Args:
        inputs, labels: (n, T) arrays of one split; num_pairs: N.

    Returns:
        int64 (Q, 4) rows (example, t, j, j + 1), in example order.

    Raises:
        ValueError: not MQAR data with num_pairs pairs.
    """
    from scripts.analysis.recall_tree import query_keys

    rows = query_keys(inputs, labels, num_pairs)
    if length is not None:
        rows = rows[rows[:, 1] < length]
    return np.concatenate([rows, rows[:, 2:3] + 1], axis=1)


def model_maps(model, tokens, head=0):
    """(L, T, T) float64 weights of head ``head`` of every layer for batch element 0, and the
    (L,) largest |A v - out| of that head per layer (the capture check).

    Raises:
        ValueError: ``head`` out of range, input longer than the model's block size, or an
            attention whose output is not A v (``capture.attention_weights``).
    """
    maps, errors = [], []
    for layer, (A, v, out) in enumerate(_layer_weights(model, np.asarray(tokens)[None], head)):
        reconstructed = A[0] @ v[0]
        actual = out[0]
        error = float((reconstructed - actual).abs().max())
        if error > 1e-3 * max(1.0, float(actual.abs().max())):
            warnings.warn(f"layer {layer}: A @ v differs from the module's output by {error:.3g}; the "
                          f"computed weights may not be what the module applies", RuntimeWarning)
        maps.append(A[0].cpu().numpy())
        errors.append(error)
    return np.stack(maps), np.array(errors)


def _layer_weights(model, inputs, head):
    """Per layer: (A (n, T, T) float64, v (n, T, Dv) float64, out (n, T, Dv) float64) of head
    ``head`` for the (n, T) token ids ``inputs``."""
    n_head, block_size = model.config.n_head, model.config.block_size
    if not 0 <= head < n_head:
        raise ValueError(f"--head={head} out of range: the model has {n_head} heads")
    if inputs.shape[1] > block_size and model.config.pos_emb == "learned":
        raise ValueError(f"input of {inputs.shape[1]} tokens is longer than the model's block_size {block_size}")
    device = next(model.parameters()).device
    idx = torch.as_tensor(inputs, dtype=torch.long, device=device)
    result = []
    for record in capture(model, idx):
        A = attention_weights(record["mechanism"], record["q"], record["k"], record["causal"],
                              record["attention_mask"], value_dim=record["v"].shape[-1])[:, head]
        result.append((A, record["v"][:, head].double(), record["out"][:, head].double()))
    return result


def recall_statistics(model, inputs, queries, head=0, batch_size=25):
    """The weights of every layer at the recall queries (module docstring, "Recall summary").

    Args:
        inputs: (n, T) int64 token ids; queries: int64 (Q, 4) rows (example, t, j, j + 1) with
            example < n (``recall_queries``).
        batch_size: examples per forward pass.

    Returns:
        dict name -> (L,) float64 for the names in RECALL_STATS, and "queries" (int).
    """
    sums, count = None, 0
    for start in range(0, len(inputs), batch_size):
        stop = min(len(inputs), start + batch_size)
        rows = queries[(queries[:, 0] >= start) & (queries[:, 0] < stop)]
        if not len(rows):
            continue
        layers = _layer_weights(model, inputs[start:stop], head)
        if sums is None:
            sums = {name: np.zeros(len(layers)) for name in RECALL_STATS}
        b, t, j, value = (torch.as_tensor(rows[:, c] - (start if c == 0 else 0)) for c in range(4))
        for layer, (A, _, _) in enumerate(layers):
            row = A[b, t]  # (Q, T)
            magnitude = row.abs()
            share = magnitude / magnitude.sum(-1, keepdim=True).clamp_min(1e-300)
            top = magnitude.argmax(-1)
            sums["value_weight"][layer] += float(row[torch.arange(len(rows)), value].sum())
            sums["key_weight"][layer] += float(row[torch.arange(len(rows)), j].sum())
            sums["value_share"][layer] += float(share[torch.arange(len(rows)), value].sum())
            sums["key_share"][layer] += float(share[torch.arange(len(rows)), j].sum())
            sums["argmax_value"][layer] += float((top == value).sum())
            sums["argmax_key"][layer] += float((top == j).sum())
            sums["uniform_weight"][layer] += float((1.0 / (t + 1).double()).sum())  # causal: keys 0..t
        count += len(rows)
    if sums is None:
        raise ValueError("no recall query among the examples given")
    return {name: value / count for name, value in sums.items()} | {"queries": count}


def _shown(A, scale, causal):
    """(image, vmin, vmax, colormap, note) of one panel (see ``plot``)."""
    magnitude = np.abs(A)
    allowed = magnitude[causal] if causal is not None else magnitude.ravel()
    top = max(float(np.percentile(allowed, 99)), 1e-12)
    signed = bool((A < -1e-12 * max(float(magnitude.max()), 1e-300)).any())
    if scale == "row":
        return magnitude / np.maximum(magnitude.max(axis=1, keepdims=True), 1e-12), 0.0, 1.0, "viridis", ""
    if scale == "log":
        share = magnitude / np.maximum(magnitude.sum(axis=1, keepdims=True), 1e-300)
        return np.log10(np.maximum(share, 1e-4)), -4.0, 0.0, "viridis", " |A|/row sum" if signed else ""
    if scale == "abs":
        return magnitude, 0.0, top, "viridis", ""
    if scale == "signed" or signed:
        return A, -top, top, "RdBu_r", " (signed)"
    return A, 0.0, top, "viridis", ""


def plot(weights, labels, path, head=0, scale="linear", title=None, marks=None, panel=2.6):
    """Write a grid of attention maps: rows = models, columns = layers.

    Args:
        weights: (M, L, T, T) array.
        scale: "linear" (colour 0 .. the 99th percentile of the panel's allowed entries, so the
            few near-1 weights of the first rows do not wash the rest out; a panel with negative
            entries, e.g. DenseAttention, is drawn as "signed"), "row" (|A| of each row divided by
            the row's largest), "log" (log10 of each weight's share of its row, |A_ij| / sum_n
            |A_in|, floored at 1e-4: the weight itself for rows of non-negative weights summing to
            one), "signed" (a diverging colour map, -p .. p for the 99th percentile p of |A|) or
            "abs" (|A|, 0 .. p).
        marks: None, or (query_positions, key_positions, value_positions) (Q,) arrays: the cells
            (t, j) are marked with a cross and (t, j + 1) with a circle in every panel.
        panel: inches per panel.

    Raises:
        ValueError: an unknown scale.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(SCALES)}")
    M, L, T, _ = weights.shape
    fig, axes = plt.subplots(M, L, figsize=(panel * L + 0.6, panel * M + 0.8), squeeze=False, layout="constrained")
    upper = np.triu(np.ones((T, T), dtype=bool), 1)
    for m in range(M):
        for layer in range(L):
            A = weights[m, layer]
            ax = axes[m, layer]
            causal = ~upper if not A[upper].any() else None  # hide the upper triangle of causal maps only
            shown, vmin, vmax, cmap, note = _shown(A, scale, causal)
            if causal is not None:
                shown = np.where(causal, shown, np.nan)
            image = ax.imshow(shown, vmin=vmin, vmax=vmax, cmap=cmap, interpolation="nearest")
            if marks is not None:
                t, j, value = marks
                ax.scatter(j, t, marker="x", s=10, linewidths=0.6, color="red")
                ax.scatter(value, t, marker="o", s=14, facecolors="none", linewidths=0.6, edgecolors="red")
            ax.set_xticks([])
            ax.set_yticks([])
            if note:
                fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=6)
            ax.set_title((f"layer {layer}, head {head}" if m == 0 else "") + note, fontsize=8)
            if layer == 0:
                ax.set_ylabel(labels[m], fontsize=10)
    marked = "\nrecall queries t: x at key j, o at value j+1" if marks is not None else ""
    fig.suptitle(title or f"attention weights (rows = queries, columns = keys)\n{T} tokens, scale {scale}{marked}",
                 fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_query_rows(weights, labels, path, marks, head=0, floor=1e-3):
    """Write the rows of the recall queries only: a panel per (model, layer) with one row per query
    t (in position order) and the keys 0 .. max t as columns; colour = log10 of the weight's share
    of its row, |A_tj| / sum_n |A_tn|, floored at ``floor``; x at the query's key j, o at its
    value j + 1.

    Args:
        weights: (M, L, T, T) array; marks: (query_positions, key_positions, value_positions).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, j, value = (np.asarray(x) for x in marks)
    M, L = weights.shape[:2]
    width = int(t.max()) + 1
    fig, axes = plt.subplots(M, L, figsize=(5.2 * L + 0.6, 1.6 * M + 0.8), squeeze=False, layout="constrained")
    rows = np.arange(len(t))
    for m in range(M):
        for layer in range(L):
            A = np.abs(weights[m, layer][t, :width])
            share = A / np.maximum(np.abs(weights[m, layer][t]).sum(axis=1, keepdims=True), 1e-300)
            ax = axes[m, layer]
            image = ax.imshow(np.log10(np.maximum(share, floor)), vmin=np.log10(floor), vmax=0.0, cmap="viridis",
                              aspect="auto", interpolation="nearest")
            ax.scatter(j, rows, marker="x", s=12, linewidths=0.7, color="red")
            ax.scatter(value, rows, marker="o", s=16, facecolors="none", linewidths=0.7, edgecolors="red")
            ax.set_yticks(rows, [str(x) for x in t], fontsize=5)
            ax.tick_params(axis="x", labelsize=6)
            if m == 0:
                ax.set_title(f"layer {layer}, head {head}", fontsize=9)
            if layer == 0:
                ax.set_ylabel(f"{labels[m]}\nquery position t", fontsize=8)
            if layer == L - 1:
                fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01).ax.tick_params(labelsize=6)
    fig.suptitle(f"recall query rows: log10 |A_tj| / sum_n |A_tn| (floor {floor:g}); columns = key positions "
                 f"0..{width - 1}; x = key j, o = value j+1", fontsize=9)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _recall_input(loaded, out_dirs, args):
    """(tokens, queries (Q, 4) of the example, queries of the --stat_examples, inputs, folder) of recall runs."""
    splits = [recall_split(d, c, args.split) for d, (_, c) in zip(out_dirs, loaded)]
    folders = {os.path.realpath(folder) for folder, _, _ in splits}
    if len(folders) > 1:
        raise ValueError(f"the recall runs use different data folders ({sorted(folders)}); their maps would not "
                         f"share an input")
    folder, inputs, labels = splits[0]
    if not 0 <= args.example < len(inputs):
        raise ValueError(f"--example={args.example} out of range: split {args.split!r} has {len(inputs)} examples")
    T = inputs.shape[1]
    length = T if args.length is None else args.length
    if not 1 <= length <= T:
        raise ValueError(f"--length={length}: a recall example has {T} tokens (1 .. {T} allowed)")
    num_pairs = loaded[0][1]["recall_pairs"]
    tokens = inputs[args.example, :length]
    example = recall_queries(inputs[args.example:args.example + 1], labels[args.example:args.example + 1],
                             num_pairs, length)
    n = min(args.stat_examples, len(inputs))
    stats = recall_queries(inputs[:n], labels[:n], num_pairs)
    return tokens, example, stats, inputs[:n], folder


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dirs", nargs="+", help="checkpoint directories (each with ckpt.pt)")
    ap.add_argument("--labels", default="", help="comma-separated row labels (default: the directory names)")
    ap.add_argument("--length", type=int, default=None,
                    help="input tokens (characters for shakespeare_char; default 128; recall: the whole example)")
    ap.add_argument("--head", type=int, default=0, help="head shown in every layer")
    ap.add_argument("--split", default="val", help="split the input is read from (train | val | test)")
    ap.add_argument("--offset", type=int, default=0, help="first token of the input in the split (language models)")
    ap.add_argument("--example", type=int, default=0, help="recall: the example of the split shown")
    ap.add_argument("--stat_examples", type=int, default=100,
                    help="recall: the first examples of the split whose queries are summarised")
    ap.add_argument("--weights", default="ckpt.pt", choices=("ckpt.pt", "best.pt"),
                    help="checkpoint file of each run (best.pt: ckpt.pt where a run has none)")
    ap.add_argument("--out", default="results/shakespeare_char/attention_maps", help="output path without extension")
    ap.add_argument("--scale", default="linear",
                    help=f"colour scale(s) of the PNG, a comma list of {', '.join(SCALES)}: the first is <out>.png, "
                         f"each other <out>_<scale>.png")
    ap.add_argument("--panel", type=float, default=2.6, help="inches per map")
    ap.add_argument("--attention", action="append", default=None, metavar="SPEC",
                    help="an attention swapped into a model for the maps (model.set_attention, no retraining), "
                         "given once per out_dir in order: name or name:key=value,... ('-' keeps the model's "
                         "own); e.g. one checkpoint three times with -, tree:E=0.5 and tree:E=0.3")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--num_threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = ap.parse_args(argv)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    scales = [x for x in args.scale.split(",") if x]
    bad = [x for x in scales if x not in SCALES]
    if bad or not scales:
        ap.error(f"--scale: unknown {bad}; allowed: {', '.join(SCALES)}")
    labels = args.labels.split(",") if args.labels else [os.path.basename(os.path.normpath(d)) for d in args.out_dirs]
    if len(labels) != len(args.out_dirs):
        ap.error(f"--labels has {len(labels)} names for {len(args.out_dirs)} out_dirs")
    if args.attention is not None and len(args.attention) != len(args.out_dirs):
        ap.error(f"--attention is given {len(args.attention)} times for {len(args.out_dirs)} out_dirs; "
                 f"give it once per out_dir ('-' keeps a model's own)")
    recall, stats = False, None
    try:
        loaded = [load_checkpoint(d, args.device, args.weights) for d in args.out_dirs]
        for (model, _), spec in zip(loaded, args.attention or []):
            swap_attention(model, spec)
        tasks = {c.get("task", "lm") for _, c in loaded}
        if len(tasks) > 1:
            raise ValueError(f"the checkpoints were trained on different tasks ({sorted(tasks)}); one grid needs one")
        recall = tasks == {"recall"}
        layers = {model.config.n_layer for model, _ in loaded}
        if len(layers) > 1:
            raise ValueError(f"the models have different numbers of layers ({sorted(layers)}); one grid needs one")
        if recall:
            if args.offset:
                raise ValueError("--offset applies to language models; a recall input is --example of --split")
            tokens, example, stat_queries, stat_inputs, folder = _recall_input(loaded, args.out_dirs, args)
            text = ""
        else:
            datasets = {(c.get("dataset", "wikitext2"), c.get("dataset_config", "")) for _, c in loaded}
            if len(datasets) > 1:
                raise ValueError(f"the checkpoints were trained on different data ({sorted(datasets)}); "
                                 f"their maps would not share an input")
            length = 128 if args.length is None else args.length
            tokens, text = input_tokens(loaded[0][1], args.split, length, args.offset)
            example = np.zeros((0, 4), dtype=np.int64)
        vocab = {model.config.vocab_size for model, _ in loaded}
        if int(tokens.max()) >= min(vocab):
            raise ValueError(f"token id {int(tokens.max())} is outside a model's vocabulary of {min(vocab)}")
        results = [model_maps(model, tokens, args.head) for model, _ in loaded]
        if recall and args.stat_examples > 0:
            stats = [recall_statistics(model, stat_inputs, stat_queries, args.head) for model, _ in loaded]
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    weights = np.stack([w for w, _ in results])
    errors = np.stack([e for _, e in results])
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    names = [model.config.attention for model, _ in loaded]
    extra = {}
    if stats is not None:
        extra = {f"stat_{name}": np.stack([s[name] for s in stats]) for name in RECALL_STATS}
        extra.update(stat_queries=stats[0]["queries"], stat_examples=min(args.stat_examples, len(stat_inputs)),
                     data_folder=np.array(folder), example=args.example)
    np.savez_compressed(f"{args.out}.npz", weights=weights.astype(np.float32), tokens=tokens,
             labels=np.array(labels), attention=np.array(names), layers=np.arange(weights.shape[1]), head=args.head,
             reconstruction_error=errors, text=np.array(text), query_positions=example[:, 1],
             key_positions=example[:, 2], value_positions=example[:, 3], weights_file=np.array(args.weights),
             **extra)
    marks = (example[:, 1], example[:, 2], example[:, 3]) if recall else None
    for i, scale in enumerate(scales):
        plot(weights, labels, f"{args.out}.png" if i == 0 else f"{args.out}_{scale}.png", args.head, scale,
             marks=marks, panel=args.panel)
    if recall and len(example):
        plot_query_rows(weights, labels, f"{args.out}_queries.png", marks, args.head)
    provenance.record(args.out)
    print(f"wrote {args.out}.png and {args.out}.npz: {len(labels)} models x {weights.shape[1]} layers, "
          f"{len(tokens)} tokens, head {args.head}; largest |A v - out| {errors.max():.2e}")
    if stats is not None:
        print(f"recall summary over {stats[0]['queries']} queries (mean weight / share of |weight| / argmax rate at "
              f"the value position j+1, then at the key position j):")
        for label, s in zip(labels, stats):
            for layer in range(weights.shape[1]):
                print(f"  {label:>12} layer {layer}: value {s['value_weight'][layer]:.3f} / {s['value_share'][layer]:.3f}"
                      f" / {s['argmax_value'][layer]:.3f}; key {s['key_weight'][layer]:.3f} / "
                      f"{s['key_share'][layer]:.3f} / {s['argmax_key'][layer]:.3f}; uniform "
                      f"{s['uniform_weight'][layer]:.4f}")
    return weights, errors


if __name__ == "__main__":
    main()
