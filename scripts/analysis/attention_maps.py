"""Attention maps of one head per layer of several trained GPTs on the same input, as in Figure 4
of the FAST paper (Gerami et al. 2024, section 3.1: softmax vs Fastmax transformers trained on
Tiny Shakespeare).

    python -m scripts.analysis.attention_maps out/shakespeare_char_gpt out/shakespeare_char_gpt_fastmax2 \\
        [--labels=softmax,fastmax2] [--length=128] [--head=0] [--split=val] [--offset=0] \\
        [--out=results/shakespeare_attention_maps] [--scale=linear|row|log]

Each out_dir's ``ckpt.pt`` becomes a model through ``model.load`` (eval mode, the model's own
attention), as eval_ppl.py loads it. Every model reads the same input: ``--length`` tokens of
``--split`` from token ``--offset`` on (character level: the first 128 characters of the val
split by default; WikiText-2 checkpoints: GPT-2 BPE tokens). All checkpoints must be trained on the
same data set (and, for shakespeare_char, with the prepared vocabulary).

Capture: a forward pre-hook on every block's registered attention module (``forward(q, k, v,
causal, attention_mask)`` on (B, H, T, D) tensors) stores q, k, v, and a forward hook its output.
The (T, T) weight matrix A of head ``--head`` of every layer is then:

- ``softmax`` / ``softmax_reference``: A_ij = exp(q_i.k_j / sqrt(D)) / sum_n exp(q_i.k_n / sqrt(D))
  over the allowed keys (``attention.softmax.allowed_keys``: causal, window, exclude_self);
- ``fastmax``: the implied weights A_ij = f(s_ij) / sum_n f(s_in), s = q_hat.k_hat / temperature,
  with the module's own normalization of q and k and its coefficients
  (``attention.fastmax.reference.fastmax_weights``, paper Eq. 5-12). Evaluation mode: no dropout.

Rows sum to one over the allowed keys, and disallowed entries (j > i) are zero. As a check of the
capture, A @ v is compared with the module's actual output for that head; the largest absolute
difference per (model, layer) is stored (``reconstruction_error``) and a warning is printed when it
exceeds 1e-3 times the output's scale.

Outputs: ``<out>.png`` (rows = models, columns = layers; colour = weight, see ``--scale``) and
``<out>.npz`` with ``weights`` (M, L, T, T) float64, ``tokens`` (T,) int64, ``labels`` (M,),
``attention`` (M,) names, ``layers`` (L,), ``head``, ``reconstruction_error`` (M, L), ``text``
(the decoded input, character level only; else "").
"""
import argparse
import os
import sys
import warnings

import numpy as np
import torch

import model as model_lib
import provenance
from scripts.analysis.capture import attention_weights, capture

SCALES = ("linear", "row", "log")


def load_checkpoint(out_dir, device="cpu"):
    """The model of ``out_dir/ckpt.pt`` (``model.load``, eval mode, on ``device``) and the training
    config stored in the checkpoint.

    Raises:
        FileNotFoundError: no checkpoint in ``out_dir``.
    """
    if not os.path.exists(os.path.join(out_dir, "ckpt.pt")):
        raise FileNotFoundError(f"no checkpoint at {os.path.join(out_dir, 'ckpt.pt')}")
    model, config, _ = model_lib.load(out_dir)
    return model.to(device), config


def input_tokens(config, split="val", length=128, offset=0):
    """The shared input: ``length`` tokens of ``split`` from token ``offset`` on.

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


def model_maps(model, tokens, head=0):
    """(L, T, T) float64 weights of head ``head`` of every layer for batch element 0, and the
    (L,) largest |A v - out| of that head per layer (the capture check).

    Raises:
        ValueError: ``head`` out of range, input longer than the model's block size, or an
            unsupported attention.
    """
    n_head, block_size = model.config.n_head, model.config.block_size
    if not 0 <= head < n_head:
        raise ValueError(f"--head={head} out of range: the model has {n_head} heads")
    if len(tokens) > block_size and model.config.pos_emb == "learned":
        raise ValueError(f"input of {len(tokens)} tokens is longer than the model's block_size {block_size}")
    device = next(model.parameters()).device
    idx = torch.as_tensor(tokens, dtype=torch.long, device=device)[None]
    maps, errors = [], []
    for record in capture(model, idx):
        A = attention_weights(record["mechanism"], record["q"], record["k"], record["causal"],
                              record["attention_mask"])[0, head]
        reconstructed = A @ record["v"][0, head].double()
        actual = record["out"][0, head].double()
        error = float((reconstructed - actual).abs().max())
        if error > 1e-3 * max(1.0, float(actual.abs().max())):
            warnings.warn(f"layer {len(maps)}: A @ v differs from the module's output by {error:.3g}; the "
                          f"computed weights may not be what the module applies", RuntimeWarning)
        maps.append(A.cpu().numpy())
        errors.append(error)
    return np.stack(maps), np.array(errors)


def plot(weights, labels, path, head=0, scale="linear", title=None):
    """Write a grid of attention maps: rows = models, columns = layers.

    Args:
        weights: (M, L, T, T) array.
        scale: "linear" (colour 0 .. the 99th percentile of the panel's allowed entries, so the
            few near-1 weights of the first rows do not wash the rest out), "row" (each row divided
            by its largest weight) or "log" (log10 of the weight, floored at 1e-4).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; allowed: {', '.join(SCALES)}")
    M, L, T, _ = weights.shape
    fig, axes = plt.subplots(M, L, figsize=(2.6 * L + 0.6, 2.6 * M + 0.6), squeeze=False)
    causal = np.tril(np.ones((T, T), dtype=bool))
    for m in range(M):
        for layer in range(L):
            A = weights[m, layer]
            ax = axes[m, layer]
            if scale == "row":
                shown = A / np.maximum(np.abs(A).max(axis=1, keepdims=True), 1e-12)
                vmin, vmax, cmap = 0.0, 1.0, "viridis"
            elif scale == "log":
                shown = np.log10(np.maximum(A, 1e-4))
                vmin, vmax, cmap = -4.0, 0.0, "viridis"
            else:
                allowed = A[causal] if A.shape == causal.shape else A.ravel()
                shown, vmin, vmax, cmap = A, 0.0, max(float(np.percentile(allowed, 99)), 1e-12), "viridis"
            ax.imshow(np.where(causal, shown, np.nan), vmin=vmin, vmax=vmax, cmap=cmap, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if m == 0:
                ax.set_title(f"layer {layer}, head {head}", fontsize=9)
            if layer == 0:
                ax.set_ylabel(labels[m], fontsize=10)
    fig.suptitle(title or f"attention weights (rows = queries, columns = keys; {T} tokens; scale {scale})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dirs", nargs="+", help="checkpoint directories (each with ckpt.pt)")
    ap.add_argument("--labels", default="", help="comma-separated row labels (default: the directory names)")
    ap.add_argument("--length", type=int, default=128, help="input tokens (characters for shakespeare_char)")
    ap.add_argument("--head", type=int, default=0, help="head shown in every layer")
    ap.add_argument("--split", default="val", help="split the input is read from (train | val | test)")
    ap.add_argument("--offset", type=int, default=0, help="first token of the input in the split")
    ap.add_argument("--out", default="results/shakespeare_char/attention_maps", help="output path without extension")
    ap.add_argument("--scale", default="linear", choices=SCALES, help="colour scale of the PNG")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--num_threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = ap.parse_args(argv)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    labels = args.labels.split(",") if args.labels else [os.path.basename(os.path.normpath(d)) for d in args.out_dirs]
    if len(labels) != len(args.out_dirs):
        ap.error(f"--labels has {len(labels)} names for {len(args.out_dirs)} out_dirs")
    try:
        loaded = [load_checkpoint(d, args.device) for d in args.out_dirs]
        datasets = {(c.get("dataset", "wikitext2"), c.get("dataset_config", "")) for _, c in loaded}
        if len(datasets) > 1:
            raise ValueError(f"the checkpoints were trained on different data ({sorted(datasets)}); "
                             f"their maps would not share an input")
        layers = {model.config.n_layer for model, _ in loaded}
        if len(layers) > 1:
            raise ValueError(f"the models have different numbers of layers ({sorted(layers)}); one grid needs one")
        tokens, text = input_tokens(loaded[0][1], args.split, args.length, args.offset)
        vocab = {model.config.vocab_size for model, _ in loaded}
        if int(tokens.max()) >= min(vocab):
            raise ValueError(f"token id {int(tokens.max())} is outside a model's vocabulary of {min(vocab)}")
        results = [model_maps(model, tokens, args.head) for model, _ in loaded]
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    weights = np.stack([w for w, _ in results])
    errors = np.stack([e for _, e in results])
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    names = [model.config.attention for model, _ in loaded]
    np.savez(f"{args.out}.npz", weights=weights, tokens=tokens, labels=np.array(labels),
             attention=np.array(names), layers=np.arange(weights.shape[1]), head=args.head,
             reconstruction_error=errors, text=np.array(text))
    plot(weights, labels, f"{args.out}.png", args.head, args.scale)
    provenance.record(args.out)
    print(f"wrote {args.out}.png and {args.out}.npz: {len(labels)} models x {weights.shape[1]} layers, "
          f"{len(tokens)} tokens, head {args.head}; largest |A v - out| {errors.max():.2e}")
    return weights, errors


if __name__ == "__main__":
    main()
