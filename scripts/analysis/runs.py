"""What the table tools share about finished training runs: finding their ``final_metrics.json``
files (written by train.py at the end of a run) and naming a run's attention.

A library of ``scripts/analysis`` (like ``capture.py``); the tools that read runs import it
(``lra_table``, ``recall_table``).
"""
import os


def find_runs(paths):
    """Every final_metrics.json file under ``paths`` (files or directories, searched recursively), sorted."""
    files = []
    for p in paths:
        if os.path.isfile(p):
            files.append(p)
        for root, _, names in os.walk(p):
            files += [os.path.join(root, n) for n in names if n == "final_metrics.json"]
    return sorted(set(files))


def attention_label(cfg):
    """Row label of a run's config: softmax, fastmax<p>, dense, or the attention name."""
    name = cfg.get("attention", "softmax")
    if name == "fastmax":
        return f"fastmax{cfg.get('attention_params', {}).get('p', 2)}"
    return name
