"""What the table tools share about finished training runs: finding their ``final_metrics.json``
files (written by train.py at the end of a run), naming a run's attention and the CPU it ran on.

A library of ``scripts/analysis`` (like ``capture.py``); the tools that read runs import it
(``lra_table``, ``recall_table``, ``gpt_mini_table``).
"""
import os

from data import read_manifest


def find_runs(paths):
    """Every final_metrics.json file under ``paths`` (files or directories, searched recursively), sorted."""
    files = []
    for p in paths:
        if os.path.isfile(p):
            files.append(p)
        for root, _, names in os.walk(p):
            files += [os.path.join(root, n) for n in names if n == "final_metrics.json"]
    return sorted(set(files))


def attention_label(cfg, params=()):
    """Row label of a run's config: softmax, fastmax<p>, dense, or the attention name, then
    ``name=value`` for each attention parameter in ``params`` that the config sets (a study of one
    method's options, e.g. ``fastmax1 normalization=paper temperature=128``; unset ones are left out:
    they are the module's defaults)."""
    name = cfg.get("attention", "softmax")
    attention_params = cfg.get("attention_params", {})
    label = f"fastmax{attention_params.get('p', 2)}" if name == "fastmax" else name
    extra = [f"{key}={attention_params[key]:g}" if isinstance(attention_params[key], float)
             else f"{key}={attention_params[key]}" for key in params if key in attention_params]
    return " ".join([label, *extra])


def run_cpu(run_dir):
    """The CPU model a run was trained on, from the train.py entries of ``run_dir/manifest.json``
    (``train``, ``train_resumed_at_<iter>``, ``train_stopped_at_<iter>``: one per training segment,
    written through provenance.py): the model name, or the distinct names joined by " + " when the
    segments ran on different CPUs; None when the run has no manifest or its entries name no CPU.
    Speeds (tokens/s, steps/s) of runs on different CPUs do not compare.

    Raises:
        data.DataFormatError: the manifest is not a JSON object."""
    manifest = read_manifest(run_dir) or {}
    cpus = [(manifest[key].get("machine") or {}).get("cpu") for key in sorted(manifest) if key.startswith("train")]
    return " + ".join(dict.fromkeys(cpu for cpu in cpus if cpu)) or None
