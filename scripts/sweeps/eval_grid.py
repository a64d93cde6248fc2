"""Run many eval_ppl.py evaluations in one process (torch is imported once), one per line of
standard input. Each line holds eval_ppl.py arguments and must include --out_json=PATH; lines
whose JSON already exists are skipped, so an interrupted sweep resumes where it stopped.

    printf '%s\n' "--out_dir=out/m --attention=tree --attention.E=0.5 --out_json=r/a.json" | \
        python -m scripts.sweeps.eval_grid

A failing run is reported on stderr (a configuration error as one "error: ..." line, anything
else with its traceback) and the grid goes on; the exit code is 1 if any run failed. Lines take
every eval_ppl.py key (``python eval_ppl.py --help``), e.g. --protocol=casino --per_position=True.
"""
import os
import shlex
import sys
import time
import traceback


import configurator
import eval_ppl
import provenance


def main(lines):
    """Run the eval_ppl.py argument lines in ``lines`` (blank lines and # comments skipped);
    returns the exit status (0 = every run succeeded or was skipped, 1 = some run failed).

    Raises:
        SystemExit: a line without --out_json=PATH (checked before anything runs).
    """
    jobs = [shlex.split(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    failed = 0
    t0 = time.time()
    for i, args in enumerate(jobs, 1):
        if not any(a.startswith("--out_json=") for a in args):
            sys.exit(f"error: line {i} has no --out_json=PATH: {' '.join(args)}")
    for i, args in enumerate(jobs, 1):
        out = [a.split("=", 1)[1] for a in args if a.startswith("--out_json=")]
        if os.path.exists(out[0]) and os.path.getsize(out[0]) > 0:
            print(f"[{i}/{len(jobs)}] skip (exists): {out[0]}", flush=True)
            continue
        print(f"[{i}/{len(jobs)}] {time.time() - t0:.0f}s  {' '.join(args)}", flush=True)
        try:
            eval_ppl.main(args)
        except configurator.ConfigError as e:  # one bad configuration must not stop a long sweep
            failed += 1
            print(f"error: {e}\nFAILED: {out[0]}", file=sys.stderr, flush=True)
        except Exception:
            failed += 1
            traceback.print_exc()
            print(f"FAILED: {out[0]}", file=sys.stderr, flush=True)
    print(f"{len(jobs)} runs, {failed} failed, {time.time() - t0:.0f}s")
    # one manifest entry per output folder: the evaluation lines came on standard input
    for folder in sorted({os.path.dirname(os.path.abspath(a.split("=", 1)[1]))
                          for args in jobs for a in args if a.startswith("--out_json=")}):
        provenance.record(os.path.join(folder, "eval_grid"), extra={"stdin_lines": len(jobs), "failed": failed})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.stdin.read().splitlines()))
