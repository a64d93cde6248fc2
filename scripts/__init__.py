"""Tools around the model, run as modules from the repository root (``python -m scripts.<folder>.<tool>``):

- ``bench/``: timings and memory (attention ops, tree attention, training throughput, the authors'
  code beside ours); ``bench/common.py`` holds what they share;
- ``sweeps/``: shell scripts that train or evaluate many configurations, and the evaluation runner;
- ``analysis/``: tables and figures made from runs and checkpoints (LRA table, tree-sweep table,
  loss curves, attention maps, probes and reference lines);
(``provenance.py`` at the top level writes the ``manifest.json`` of every folder under ``results/``.)

A tool imports library code (the repo's packages, ``bench/common.py``, ``analysis/capture.py``,
the top-level ``provenance.py``), never another tool.
"""
