"""Histograms of query-key alignments per layer and head of a GPT, as in Figure 3 of "High Attention
Scores and Where to Find Them" (section 4.2: query-key alignments are dominated by negative values).

    python -m scripts.analysis.alignments SOURCE [--split=val] [--sequences=4] [--length=256] \\
        [--offset=0] [--quantities=score,cosine] [--query_token=] [--bins=60] [--log_counts] \\
        [--out=results/alignments_<model>/alignments] [--num_threads=1]

SOURCE is what ``checkpoint.load`` takes: a run directory of ours (``ckpt.pt``), a checkpoint file, or a
Hugging Face GPT-2 (a local directory such as $GPT2_TINY_HF_DIR, or a hub name). The input is
``--sequences`` consecutive, non-overlapping windows of ``--length`` tokens of ``--split`` from token
``--offset`` on, read with the lm task's data loading (``tasks.lm.load_data``): the data set the
run was trained on (its config's ``dataset`` / ``dataset_config``), WikiText-2 (wikitext-2-v1, GPT-2
BPE) for a Hugging Face model. Each window is one forward pass; q and k of every layer come from
the forward pre-hook of ``scripts.analysis.capture.capture`` on the registered attention module (so
any attention works; for Fastmax or DenseAttention these are the module's inputs, before its own
normalisation).

The paper's alignment is the inner product <q, k> of a query and a key (section 2.1; section 2
writes it without GPT-2's 1/sqrt(D) "to ease the exposition"), histogrammed in Figure 3 for the
queries at a "." token, three heads of layer six of GPT-2 124M. Here, for every query i (or only
those whose token is ``--query_token``, e.g. ".", as in Figure 3) and every key j <= i it attends
to causally (itself included), per layer and head, the quantities are:

- ``score``: q_i . k_j / sqrt(D), the exponent of softmax attention (the paper's alignment with
  the scale it omits in the text; the histogram of <q, k> itself differs only by the factor sqrt(D)
  on the x-axis: quantity ``dot``);
- ``dot``: q_i . k_j;
- ``cosine``: q_i . k_j / (||q_i|| ||k_j||) (pairs with a zero vector are left out).

Bin edges are shared by the heads of one layer (its range over the data, or ``--range``), so the
heads of a layer compare directly. Outputs:
  <out>_<quantity>.png  grid of histograms (rows = layers, columns = heads), the share of negative
                        values in each panel;
  <out>.csv             histogram counts: quantity, layer, head, bin_lo, bin_hi, count;
  <out>_summary.csv     per quantity, layer, head: pairs, mean, std, min, quantiles 1/50/99 %, max,
                        frac_negative (share of pairs < 0) and negative_share (share of sum |x| from
                        the negative values: how much of an aggregate alignment sum_k <q, k> the
                        negative terms make up, section 4.2);
  manifest entry        provenance.record, with the model source, tokens and positions used.
"""
import argparse
import csv
import math
import os

import numpy as np
import torch

import checkpoint
import provenance
from scripts.analysis.capture import capture

QUANTITIES = ("score", "dot", "cosine")
SUMMARY_COLUMNS = ("quantity", "layer", "head", "pairs", "mean", "std", "min", "q01", "q50", "q99", "max",
                   "frac_negative", "negative_share")
COSINE_EPS = 1e-12  # smallest norm product a cosine is computed for


def load_model(source):
    """(model, data_config, meta): ``checkpoint.load(source)`` in eval mode, and the data it was trained on
    as {"dataset", "dataset_config"} (WikiText-2 wikitext-2-v1 for a Hugging Face model).

    Raises:
        ValueError: a model that is not a GPT (task other than "lm").
        FileNotFoundError / OSError: from ``checkpoint.load``.
    """
    model, run_config, meta = checkpoint.load(source)
    if meta.get("task", "lm") != "lm":
        raise ValueError(f"{source}: alignments need a GPT (task 'lm'); got task {meta.get('task')!r}")
    run_config = run_config or {}
    data_config = {"dataset": run_config.get("dataset", "wikitext2"),
                   "dataset_config": run_config.get("dataset_config", "wikitext-2-v1")}
    return model.eval(), data_config, meta


def read_windows(data_config, split, sequences, length, offset):
    """(sequences, length) int64 array: consecutive windows of ``split`` from token ``offset`` on.

    Raises:
        ValueError: a split other than train / val, sizes < 1, or not enough tokens.
        data.DataUnavailable: the data is not prepared.
    """
    from tasks import lm

    if split not in lm.SPLITS:
        raise ValueError(f"split {split!r} not available; allowed: {', '.join(lm.SPLITS)}")
    if sequences < 1 or length < 1 or offset < 0:
        raise ValueError(f"need sequences >= 1, length >= 1, offset >= 0; got {sequences}, {length}, {offset}")
    ids = lm.load_data(dict(data_config))[split]
    end = offset + sequences * length
    if end > len(ids):
        raise ValueError(f"split {split!r} has {len(ids):,} tokens; {sequences} x {length} from offset {offset} "
                         f"needs {end:,}")
    return np.asarray(ids[offset:end], dtype=np.int64).reshape(sequences, length)


def token_strings(data_config):
    """A function token id -> its text (GPT-2 BPE via tiktoken, or the character vocabulary)."""
    if data_config["dataset"] == "shakespeare_char":
        from data.shakespeare_char import prepare as shakespeare

        vocab = shakespeare.load_meta()["vocab"]
        return lambda t: vocab[int(t)]
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    return lambda t: enc.decode([int(t)])


def query_mask(tokens, query_token, decode):
    """(S, T) bool: the queries kept (all, or those whose token, stripped of white space, equals
    ``query_token``)."""
    if not query_token:
        return np.ones(tokens.shape, dtype=bool)
    return np.vectorize(lambda t: decode(t).strip() == query_token)(tokens)


def pair_values(q, k, quantity, queries, causal=True):
    """The quantity for every (query i in ``queries``, key j allowed) pair of one head.

    Args:
        q, k: (T, D) float tensors of one head.
        quantity: one of QUANTITIES.
        queries: (T,) bool, the queries kept.
        causal: keys j <= i only (else every key).

    Returns:
        1-D float64 numpy array, pairs ordered by query then key.

    Raises:
        ValueError: unknown quantity.
    """
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity {quantity!r} unknown; allowed: {', '.join(QUANTITIES)}")
    q, k = q.double(), k.double()
    T, D = q.shape
    dots = q @ k.T
    allowed = torch.ones(T, T, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    allowed &= torch.as_tensor(queries, dtype=torch.bool)[:, None]
    if quantity == "score":
        values = dots / math.sqrt(D)
    elif quantity == "dot":
        values = dots
    else:
        norms = q.norm(dim=-1)[:, None] * k.norm(dim=-1)[None, :]
        allowed &= norms > COSINE_EPS
        values = dots / norms.clamp_min(COSINE_EPS)
    return values[allowed].numpy()


def collect(model, windows, queries):
    """Run the model on every window and keep q, k of every layer: list over layers of
    (q, k, causal) with q, k (S, H, T, D) float32 on the CPU."""
    device = next(model.parameters()).device
    per_layer = None
    for s in range(windows.shape[0]):
        idx = torch.as_tensor(windows[s:s + 1], dtype=torch.long, device=device)
        records = capture(model, idx)
        if per_layer is None:
            per_layer = [([], [], bool(r.get("causal", True))) for r in records]
        for layer, r in enumerate(records):
            per_layer[layer][0].append(r["q"][0].float().cpu())
            per_layer[layer][1].append(r["k"][0].float().cpu())
    return [(torch.stack(qs), torch.stack(ks), causal) for qs, ks, causal in per_layer]


def summarize(values):
    """Summary statistics of one panel's values (dict of SUMMARY_COLUMNS without the keys)."""
    if values.size == 0:
        return {"pairs": 0, **{c: math.nan for c in SUMMARY_COLUMNS[4:]}}
    absolute = np.abs(values).sum()
    q01, q50, q99 = np.quantile(values, [0.01, 0.5, 0.99])
    return {"pairs": int(values.size), "mean": float(values.mean()), "std": float(values.std()),
            "min": float(values.min()), "q01": float(q01), "q50": float(q50), "q99": float(q99),
            "max": float(values.max()), "frac_negative": float((values < 0).mean()),
            "negative_share": float(np.abs(values[values < 0]).sum() / absolute) if absolute > 0 else math.nan}


def histograms(layers, queries, quantity, bins, value_range=None):
    """Counts per layer and head.

    Args:
        layers: ``collect``'s output.
        queries: (S, T) bool.
        quantity: one of QUANTITIES.
        bins: bins per panel.
        value_range: (lo, hi) for every layer, or None: each layer's range over its heads
            ([-1, 1] for the cosine).

    Returns:
        (edges, counts, summaries): edges list over layers of (bins + 1,) arrays; counts
        (L, H, bins) int64; summaries list over layers of lists over heads of ``summarize`` dicts.
    """
    edges, counts, summaries = [], [], []
    for q, k, causal in layers:
        S, H = q.shape[:2]
        per_head = [np.concatenate([pair_values(q[s, h], k[s, h], quantity, queries[s], causal) for s in range(S)])
                    for h in range(H)]
        if value_range is not None:
            lo, hi = value_range
        elif quantity == "cosine":
            lo, hi = -1.0, 1.0
        else:
            nonempty = [v for v in per_head if v.size]
            lo = min(float(v.min()) for v in nonempty) if nonempty else -1.0
            hi = max(float(v.max()) for v in nonempty) if nonempty else 1.0
            if hi <= lo:
                lo, hi = lo - 0.5, hi + 0.5
        e = np.linspace(lo, hi, bins + 1)
        edges.append(e)
        counts.append([np.histogram(np.clip(v, lo, hi), bins=e)[0] for v in per_head])
        summaries.append([summarize(v) for v in per_head])
    return edges, np.array(counts, dtype=np.int64), summaries


def plot(edges, counts, summaries, quantity, path, title, log_counts=False):
    """Grid of histograms: rows = layers, columns = heads; a dashed line at 0, and the share of
    negative values in each panel's corner."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    L, H, _ = counts.shape
    height = 1.5 * L + 1.0
    fig, axes = plt.subplots(L, H, figsize=(max(1.9 * H + 0.8, 7.5), height), squeeze=False)
    for layer in range(L):
        e = edges[layer]
        for head in range(H):
            ax = axes[layer, head]
            ax.stairs(counts[layer, head], e, fill=True, color="C0")
            ax.axvline(0.0, color="C3", lw=0.7, ls="--")
            if log_counts:
                ax.set_yscale("log")
            ax.tick_params(labelsize=6)
            ax.set_yticks([])
            neg = summaries[layer][head]["frac_negative"]
            ax.text(0.02, 0.95, f"neg {neg:.0%}" if neg == neg else "no pairs", transform=ax.transAxes,
                    fontsize=6, va="top")
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=8)
            if head == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.supxlabel({"score": "q.k / sqrt(D)", "dot": "q.k", "cosine": "cos(q, k)"}[quantity], fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.55 / height))  # room for the two-line title
    fig.savefig(path, dpi=100)
    plt.close(fig)


def default_out(source):
    """results/alignments_<model>/alignments: <model> is the last path component of SOURCE; for a
    checkpoint file, its directory's name (plus _<stem> unless the file is ckpt.pt)."""
    path = os.path.normpath(source)
    name = os.path.basename(path)
    if name.endswith(".pt"):
        stem = name[:-3]
        name = os.path.basename(os.path.dirname(os.path.abspath(path))) + ("" if stem == "ckpt" else f"_{stem}")
    return os.path.join("results", f"alignments_{name}", "alignments")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", help="run directory, checkpoint file or Hugging Face GPT-2 (checkpoint.load)")
    ap.add_argument("--split", default="val", help="train | val")
    ap.add_argument("--sequences", type=int, default=4, help="windows (one forward pass each)")
    ap.add_argument("--length", type=int, default=256, help="tokens per window (<= the model's block size)")
    ap.add_argument("--offset", type=int, default=0, help="first token of the first window")
    ap.add_argument("--quantities", default="score,cosine", help="comma-separated: " + ", ".join(QUANTITIES))
    ap.add_argument("--query_token", default="", help='keep only queries at this token (Figure 3: "."); '
                                                      "'' = every query")
    ap.add_argument("--bins", type=int, default=60)
    ap.add_argument("--range", default="", help="lo,hi of every histogram (default: each layer's range)")
    ap.add_argument("--log_counts", action="store_true", help="log-scale counts")
    ap.add_argument("--out", default="", help="output path without extension (default results/alignments_<model>/alignments)")
    ap.add_argument("--num_threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.num_threads)
    quantities = [x for x in args.quantities.split(",") if x]
    unknown = [x for x in quantities if x not in QUANTITIES]
    if unknown or not quantities:
        ap.error(f"--quantities: unknown {unknown}; allowed: {', '.join(QUANTITIES)}")
    if args.bins < 1:
        ap.error("--bins must be >= 1")
    value_range = None
    if args.range:
        try:
            value_range = tuple(float(x) for x in args.range.split(","))
        except ValueError:
            value_range = ()
        if len(value_range) != 2 or not value_range[0] < value_range[1]:
            ap.error(f"--range must be lo,hi with lo < hi; got {args.range!r}")
    out = args.out or default_out(args.source)
    commit = provenance.git_commit()
    model, data_config, meta = load_model(args.source)
    if args.length > model.config.block_size and getattr(model.config, "pos_emb", "learned") == "learned":
        ap.error(f"--length={args.length} exceeds the model's block_size {model.config.block_size}")
    windows = read_windows(data_config, args.split, args.sequences, args.length, args.offset)
    if int(windows.max()) >= model.config.vocab_size:
        ap.error(f"token id {int(windows.max())} is outside the model's vocabulary of {model.config.vocab_size}")
    queries = query_mask(windows, args.query_token, token_strings(data_config))
    if not queries.any():
        ap.error(f"no query at token {args.query_token!r} in the {windows.size} tokens read")
    layers = collect(model, windows, queries)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    hist_rows, summary_rows = [], []
    name = os.path.basename(os.path.normpath(args.source))
    D = layers[0][0].shape[-1]
    for quantity in quantities:
        edges, counts, summaries = histograms(layers, queries, quantity, args.bins, value_range)
        for layer in range(counts.shape[0]):
            for head in range(counts.shape[1]):
                e = edges[layer]
                hist_rows += [(quantity, layer, head, f"{e[b]:.6g}", f"{e[b + 1]:.6g}", int(counts[layer, head, b]))
                              for b in range(args.bins)]
                summary_rows.append({"quantity": quantity, "layer": layer, "head": head, **summaries[layer][head]})
        which = f'queries at "{args.query_token}"' if args.query_token else "every query"
        title = (f"{name}: {quantity} of query-key pairs (j <= i), {which}\n{args.sequences} x {args.length} "
                 f"{args.split} tokens, D = {D}; rows layers, columns heads (tree paper Figure 3)")
        plot(edges, counts, summaries, quantity, f"{out}_{quantity}.png", title, args.log_counts)
    with open(out + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("quantity", "layer", "head", "bin_lo", "bin_hi", "count"))
        w.writerows(hist_rows)
    with open(out + "_summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SUMMARY_COLUMNS)
        w.writeheader()
        for row in summary_rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    provenance.record(out, commit=commit, extra={
        "num_threads": args.num_threads, "model_source": meta.get("source"), "model_path": str(meta.get("path")),
        "model_iter_num": meta.get("iter_num"), "attention": model.config.attention, "data": data_config,
        "split": args.split, "tokens": [args.offset, args.offset + args.sequences * args.length],
        "queries": int(queries.sum()), "query_token": args.query_token})
    for row in summary_rows:
        print(f"{row['quantity']:6s} layer {row['layer']:2d} head {row['head']:2d}: {row['pairs']:8d} pairs, "
              f"mean {row['mean']:+.3f}, negative {row['frac_negative']:.1%} of pairs, "
              f"{row['negative_share']:.1%} of sum |x|")
    print(f"wrote {out}.csv, {out}_summary.csv, " + ", ".join(f"{out}_{q}.png" for q in quantities))


if __name__ == "__main__":
    main()
