"""Archive training runs into ``results/``, one packed file per run without its checkpoints, and print
the run links for ``docs/results.md``.

    python -m scripts.analysis.archive_runs results/gpt_mini_baselines out/gpt_mini/*_s1337

``out/`` is not in the repository; what a claim in ``docs/`` rests on is each run's provenance and
logs. For every run directory given, the files of ``RUN_FILES`` it has (train.py's manifest, final
metrics and logs, the sweep scripts' evaluation JSON and log) are packed, byte for byte, into
``DEST/<run name>.tar.xz`` (``scripts/analysis/runs.py``: a tar.xz of ``<run name>/<file>``, the same
bytes for the same files; an existing one is replaced); checkpoints (``*.pt``) and prepared data never
are. Every table tool reads the packed run as it reads the folder (``runs.open_run``). Then one
markdown bullet per run is printed, in the form docs/results.md lists runs:

    - `linear_s1337`: [linear_s1337.tar.xz](../results/gpt_mini_baselines/linear_s1337.tar.xz) (manifest.json, final_metrics.json, log.jsonl, train.log, eval_test.json, eval.log)

Raises SystemExit (status 2) when a run directory does not exist or has no manifest.json (a run
without provenance is not archived: train.py writes the manifest at the end of a run, or a
``train_stopped_at_<iter>`` entry when it stops early), or when ``DEST/<run name>/`` is a run folder
(an archive of the old form: pack it with ``python -m scripts.analysis.runs pack``, or remove it).
"""
import argparse
import os
import sys

from scripts.analysis.runs import RUN_SUFFIX, RunNotFound, archive_run


def archive(dest, run_dirs):
    """Pack each run directory into ``dest/<name>.tar.xz`` (``runs.archive_run``); return [(name, [file, ...])].

    Raises:
        SystemExit (status 2, one error line): a run without manifest.json, or ``dest/<name>/`` a run folder.
    """
    try:
        return [archive_run(run_dir, dest) for run_dir in run_dirs]
    except (RunNotFound, FileExistsError) as e:
        raise SystemExit(f"error: {e.args[0] if e.args else e}") from None


def link_lines(dest, archived, docs_dir="docs"):
    """The markdown bullets of docs/results.md for the archived runs (links relative to ``docs_dir``):
    the packed file of each run and the files it holds."""
    rel = os.path.relpath(dest, docs_dir).replace(os.sep, "/")
    return [f"  - `{name}`: [{name}{RUN_SUFFIX}]({rel}/{name}{RUN_SUFFIX}) ({', '.join(files)})"
            for name, files in archived]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dest", help="results folder, e.g. results/gpt_mini_baselines")
    parser.add_argument("runs", nargs="+", help="run directories (train.py out_dir)")
    args = parser.parse_args(argv)
    missing = [r for r in args.runs if not os.path.isdir(r)]
    if missing:
        parser.error(f"not a directory: {', '.join(missing)}")
    for line in link_lines(args.dest, archive(args.dest, args.runs)):
        print(line)


if __name__ == "__main__":
    sys.exit(main())
