"""Framework overhead of train.py: its tokens/s against a bare PyTorch loop (forward, backward,
clip, AdamW step) over the same model and batch shape, measured alternately in one process.

    python -m scripts.bench.train_overhead [configs/wikitext2_gpt_mini.py] [--iters=8] [--rounds=3]

Writes results/bench_train/bench_train_overhead.{csv,json,png}. train.py's throughput is read from its own
log (tokens/s between log points, first interval dropped as warm-up); the bare loop is timed
with time.perf_counter over the same number of iterations after one warm-up step.
"""
import csv
import os
import statistics
import time

import torch

import configurator
from data import write_json
import provenance
from scripts.bench.common import ROOT, train_py
import train
import tasks


def bare_loop(cfg, iters):
    """tokens/s of a plain loop over the task's functions: get_batch, forward + loss, backward,
    clip, AdamW step."""
    task = tasks.get(cfg["task"])
    torch.manual_seed(cfg["seed"])
    task.prepare_data(cfg)
    data = task.load_data(cfg)
    model = task.build_model(cfg, data)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["learning_rate"], weight_decay=cfg["weight_decay"])
    tokens = task.batch_tokens(cfg)
    elapsed = 0.0
    for it in range(iters + 1):
        t0 = time.perf_counter()
        batch = task.get_batch(data, "train", cfg, [cfg["seed"], it], "cpu")
        loss, _ = task.loss(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if it > 0:  # the first step is warm-up
            elapsed += time.perf_counter() - t0
    return iters * tokens / elapsed




def main(argv):
    torch.set_flush_denormal(True)
    files = [a for a in argv if not a.startswith("--")] or [os.path.join(ROOT, "configs", "wikitext2_gpt_mini.py")]
    opts = configurator.parse({"iters": 8, "rounds": 3}, [a for a in argv if a.startswith("--")],
                              help={"iters": "timed optimizer steps per round (after one warm-up step)",
                                    "rounds": "rounds, each timing train.py then the bare loop"})
    cfg = configurator.parse(train.DEFAULTS, files, help=train.HELP)
    rows = []
    for r in range(opts["rounds"]):
        rows.append({"round": r, "impl": "train.py", "tok_per_s": train_py(files, opts["iters"])})
        rows.append({"round": r, "impl": "bare_loop", "tok_per_s": bare_loop(cfg, opts["iters"])})
        print(rows[-2], rows[-1], flush=True)
    ratios = [a["tok_per_s"] / b["tok_per_s"] for a, b in zip(rows[::2], rows[1::2])]
    summary = {"config": files, "iters": opts["iters"], "rounds": opts["rounds"],
               "batch_size": cfg["batch_size"], "block_size": cfg["block_size"],
               "ratio_train_py_over_bare_per_round": ratios, "median_ratio": statistics.median(ratios),
               "overhead_percent": 100 * (1 - statistics.median(ratios)), "threads": torch.get_num_threads(),
               "rows": rows}
    os.makedirs(os.path.join(ROOT, "results"), exist_ok=True)
    base = os.path.join(ROOT, "results", "bench_train", "bench_train_overhead")
    with open(base + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["round", "impl", "tok_per_s"])
        writer.writeheader()
        writer.writerows(rows)
    write_json(base + ".json", summary, indent=2)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for impl in ("train.py", "bare_loop"):
        ax.plot([r["round"] for r in rows if r["impl"] == impl], [r["tok_per_s"] for r in rows if r["impl"] == impl],
                "o-", label=impl)
    ax.set_xlabel("round")
    ax.set_ylabel("tokens / s")
    ax.set_title(f"train.py overhead: {summary['overhead_percent']:.1f}% (median)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(base + ".png", dpi=120)
    provenance.record(base)
    print(f"median train.py / bare ratio {summary['median_ratio']:.3f} "
          f"(overhead {summary['overhead_percent']:.1f}%); wrote {base}.{{csv,json,png}}")


if __name__ == "__main__":
    configurator.run_cli(main)
