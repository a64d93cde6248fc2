"""One command gives an attention its row beside every method: the scorecard.

    python -m scripts.scorecard SPEC [--tier quick|full] [--import FILE ...] [--plan] [--reuse_only]
    python -m scripts.scorecard fastmax:p=2 --tier full
    python -m scripts.scorecard my_attention --import my_attention.py        # a user's own (docs/scorecard.md)
    python -m scripts.scorecard --leaderboard                                # only rebuild the leaderboard

SPEC is the attention (the benchmark's method syntax: ``name:param=value,...``, the name of a file in
``configs/attention/``, or a config file's path). For every testbed that applies
(``scripts/scorecard/testbeds.py``: associative recall, the mini GPT on WikiText-2, LRA Text, an
inference-only method swapped into a trained softmax model, speed against SDPA) the command runs the
cells of the tier, one at a time, each as soon as the one before it ends, printing the plan and its
estimated time first (from the measured times of earlier cells), then a line per cell with the
time left.

Where results go (issue 57): ``--results`` (default ``out/leaderboard``, your own folder; ``out/``
is not tracked) holds ``cells.jsonl``, ``cards/``, the packed runs ``runs/`` and the leaderboard
``leaderboard.md`` / ``.csv``; the leaderboard written there merges the repository's committed
cards (``results/scorecard/cards``) with yours (yours replace a committed card of the same
attention and tier), and the committed results (``results/scorecard/cells.jsonl``, its packed runs)
are reused as measured cells, never written. The repository, its README and its tests are left
as they were. ``--results results/scorecard`` (the maintainers' full runs) writes the committed
leaderboard instead, and then re-renders the blocks of README.md and docs/*.md that the new card
made stale (``python -m scripts.analysis.publish``; a block stale before the command is left to
its owner and named), so that no command leaves the repository failing ``publish --check``.

Each cell's result is appended to ``<results>/cells.jsonl`` when it ends (a stopped
scorecard resumes where it stopped: a cell whose protocol has a result is not run again, a
training run it stopped continues from its last checkpoint, and a run archived under
``results/`` with the same protocol is used instead of a new one). Training runs go to
``<out_root>/<label>/<cell>_<protocol key>/`` and, as soon as each ends, are packed into
``<results>/runs/<label>/`` (no checkpoints), which the cells then name. The attention's card,
``<results>/cards/<label>_<tier>.json`` (every cell with its protocol key, testbed version,
budget, result and where it came from; why a testbed does not apply), and the leaderboard
(``scripts/scorecard/leaderboard.py``: recall as "solved in k of n seeds" with mean ± sd and the
per-seed values, "separable from softmax" only where the seeds' ranges do not overlap; speed as
the median ratio to SDPA of interleaved pairs with its interquartile range, "≈ 1" where that
range includes 1) are written at the end.

Tiers: ``quick`` (a first look, marked as such: recall 64/4 one seed at the config's rate, speed
at T = 1k, 4k) and ``full`` (the published protocol: recall at 256/16 and at 64/4, each with its
rate picked on seed 0's validation accuracy among three and reported on seeds 1-3, softmax also on
seeds 4 and 5; WikiText-2 one seed, softmax three; speed at T = 1k, 4k, 16k).
``--train_args`` adds train.py arguments to every run and ``--eval_args`` eval_ppl.py arguments to
the WikiText-2 evaluation (tests: tiny budgets; both are part of the protocol, so such runs never
stand in for real ones).

``--reuse_only`` fills a card from measured and archived cells only: a testbed stops at its first
cell that would need a new run, and the leaderboard marks what is missing "not run (budget)". It
gives every attention its row from the runs the sweeps archived, without training anything.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import configurator
import provenance
from data import write_json
from scripts.scorecard import testbeds as tb
from scripts.scorecard.leaderboard import PUBLISHED, write_leaderboard

# a cell's time before one of its testbed and tier has been measured here
DEFAULT_SECONDS = {"quick": {"recall": 120.0, "wikitext2": 300.0, "lra": 400.0, "swap": 600.0, "speed": 15.0},
                   "full": {"recall": 300.0, "wikitext2": 1800.0, "lra": 3000.0, "swap": 300.0, "speed": 30.0}}
USER_RESULTS = os.path.join("out", "leaderboard")  # --results' default: a user's own folder, not tracked
LOG_FILE = "scorecard.log"  # a cell's train.py / eval_ppl.py output, packed with its run
SWAP_BASE_LABEL = "_swap_base"  # runs/<it>/: the softmax models of the swap testbed, shared by every attention
VERSIONS = {"recall": tb.RECALL_VERSION, "wikitext2": tb.WIKITEXT2_VERSION, "lra": tb.LRA_VERSION}
ARCHIVES = {"recall": tb.RECALL_ARCHIVES, "wikitext2": tb.WIKITEXT2_ARCHIVES, "lra": tb.LRA_ARCHIVES}
TASK = {"recall": "recall", "wikitext2": "lm", "lra": "classify"}
CONFIGS = {"recall": tb.RECALL_CONFIG, "wikitext2": tb.WIKITEXT2_CONFIG, "lra": tb.LRA_CONFIG}


def shown(path, root=tb.ROOT):
    """``path`` relative to the work tree ``root`` when it is inside it, else absolute."""
    full = os.path.abspath(path)
    return os.path.relpath(full, root) if full.startswith(root + os.sep) else full


def work_tree_of(folder):
    """The git work tree (the nearest folder with a ``.git``) that holds ``folder``, else this
    repository's root: the results' sources are written relative to it, so that a card made by a
    checkout elsewhere (a clean worktree, say) writing into a repository's ``results/`` names its
    runs as that repository's paths (``results/...``), never as paths of one machine."""
    folder = os.path.abspath(folder)
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return tb.ROOT
        folder = parent


def label_file(label):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


def published_folder(results):
    """The committed results folder (``PUBLISHED``) of the work tree that holds ``results``."""
    return os.path.join(work_tree_of(results), PUBLISHED)


def base_folder(results):
    """The committed results a user's ``results`` folder builds on (``published_folder``), or
    None when ``results`` is that folder itself or there is none."""
    published = published_folder(results)
    if os.path.realpath(results) == os.path.realpath(published) or not os.path.isdir(published):
        return None
    return published


class Store:
    """``cells.jsonl``: one JSON object per finished cell, ``key`` its protocol key; appended as cells end.
    A row added here records ``tier`` (rows without one are the full tier's), which only the time
    estimates read: a quick cell can share its protocol, and so its result, with a full one.
    ``base``: another ``cells.jsonl`` read first and never written (a user's folder builds on the
    committed cells; its own rows replace theirs)."""

    def __init__(self, path, tier="full", base=None):
        self.path, self.tier, self.rows = path, tier, {}
        for source in ([base] if base else []) + [path]:
            if not os.path.exists(source):
                continue
            with open(source) as f:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            row = json.loads(line)
                        except json.JSONDecodeError as e:
                            raise configurator.ConfigError(f"{source}:{n}: not a JSON line ({e.msg}); fix or remove "
                                                           f"the line") from None
                        self.rows[row["key"]] = row

    def add(self, row):
        row = {**row, "tier": row.get("tier", self.tier)}
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        self.rows[row["key"]] = row

    def seconds(self, testbed, where=None):
        """Median wall time of this testbed's cells of this tier that ran here and whose protocol has
        every item of ``where`` (None before the first). A speed cell's memory row (``measure``
        "peak_memory", measured for one call per T) is not a cell of its own: its time is spread over
        the speed cells (their median plus the memory rows' total over the number of time rows)."""
        def matches(protocol):
            return all(same(protocol.get(k), v) for k, v in (where or {}).items())

        rows = [r for r in self.rows.values() if r["testbed"] == testbed and r.get("tier", "full") == self.tier
                and r.get("wall_s") and matches(r.get("protocol", {}))]
        cells = [r["wall_s"] for r in rows if "measure" not in r.get("protocol", {})]
        extra = sum(r["wall_s"] for r in rows if "measure" in r.get("protocol", {}))
        return statistics.median(cells) + extra / len(cells) if cells else None


def same(a, b):
    """Whether two protocol values are the same once written as JSON (tuples and lists alike)."""
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)


def archived_index(folders, testbed="recall", root=tb.ROOT):
    """Protocol key -> (run path relative to ``root``, Run) of every run of ``testbed``'s task under
    ``folders`` (relative to the work tree ``root``) whose
    final_metrics.json holds its configuration (``scripts.analysis.runs``); a wikitext2 run needs
    its eval_test.json too. Left out: runs made before a change of their attention's defaults
    (``Attention.made_before_defaults``) and runs whose data summary (final_metrics.json ``data``)
    is not the protocol's data (``testbeds.data_problem``)."""
    import training
    from scripts.analysis.runs import find_runs, run_date

    index = {}
    for folder in folders:
        full = os.path.join(root, folder)
        if not os.path.isdir(full):
            continue
        for run in find_runs([full]):
            metrics = run.final_metrics
            if not metrics or "config" not in metrics or metrics["config"].get("task") != TASK[testbed]:
                continue
            if testbed == "wikitext2" and not run.has("eval_test.json"):
                continue
            cfg = {**training.DEFAULTS, **metrics["config"]}  # a key added since takes its default
            try:
                key, _ = tb.protocol(tb.with_full_params(cfg), testbed, VERSIONS[testbed],
                                     evaluation_args(testbed, "full"))
            except ValueError:  # an attention no longer registered
                continue
            if tb.attention.attention_class(cfg["attention"]).made_before_defaults(run_date(run)):
                continue
            if "data" in metrics and tb.data_problem(testbed, metrics["data"]) is not None:
                continue  # trained on other data than the protocol's (runs before the summary: see FULL_DATA)
            if testbed == "wikitext2":
                evaluation = run.read_json("eval_test.json")
                if [f"--split={evaluation['split']}", f"--protocol={evaluation['protocol']}"] != list(tb.WIKITEXT2_EVAL):
                    continue
            index.setdefault(key, (shown(run.source, root), run))
    return index


def evaluation_args(testbed, tier, extra=()):
    """eval_ppl.py's arguments of a training cell of ``testbed`` in ``tier`` (``extra``: --eval_args),
    empty for a testbed evaluated by train.py itself."""
    return [*tb.wikitext2_eval(tier), *extra] if testbed == "wikitext2" else []


def cell_commands(out_dir, train_args):
    """(train.py commands, whether the cell had started) of a training cell whose run folder is
    ``out_dir`` (named by its protocol key, so whatever is there was made under the same protocol):
    a new run; a run that stopped (a checkpoint, no final_metrics.json) continued from its last
    checkpoint (``--init_from=resume``); none for a run that finished but whose result was never
    recorded (the scorecard stopped between the two)."""
    if os.path.exists(os.path.join(out_dir, "final_metrics.json")):
        return [], True
    resume = os.path.exists(os.path.join(out_dir, "ckpt.pt"))
    return [[sys.executable, "train.py", *train_args, f"--out_dir={out_dir}",
             *(["--init_from=resume"] if resume else [])]], resume


def sampler(method, mode, causal, T, inputs, grad_out):
    """() -> seconds per call of one timed sample of ``method`` on ``inputs`` (q, k, v), after one
    warm-up call here (never a sample: it may hold one-time costs); a sample is one call, or for a
    call shorter than ``MIN_SAMPLE_SECONDS`` the mean of a loop of calls lasting about that long
    (the attention benchmark's rule, ``scripts.bench.common.median_seconds``)."""
    from scripts.bench.common import MIN_SAMPLE_SECONDS, run_once, wall_timer
    from scripts.bench.methods import make_call

    call, _ = make_call(method, causal, T, tb.SPEED_D, tb.SPEED_HEADS, "cpu", mode)
    timer = wall_timer()

    def once():
        run_once(call, *inputs, mode, grad_out)

    calls = max(1, math.ceil(MIN_SAMPLE_SECONDS / max(timer(once), 1e-9)))

    def sample():
        def loop():
            for _ in range(calls):
                once()
        return timer(loop) / calls
    return sample


def interleaved_cell(method, sdpa, mode, causal, T):
    """(per-pair ratios, the method's median seconds, SDPA's) of one speed cell: both calls on the
    same seeded (1, heads, T, D) inputs (``scripts.bench.common.make_inputs``; forward + backward:
    the backward of a seeded output gradient), a warm-up call of each (``sampler``), then
    ``tb.SPEED_PAIRS`` pairs, the method's sample then SDPA's (``tb.interleaved_ratios``)."""
    import torch

    from scripts.bench.common import make_inputs

    inputs = make_inputs(T, tb.SPEED_D, tb.SPEED_HEADS, "cpu", mode == "forward_backward")
    grad_out = torch.randn(1, tb.SPEED_HEADS, T, tb.SPEED_D, generator=torch.Generator().manual_seed(1))
    own = sampler(method, mode, causal, T, inputs, grad_out)
    base = sampler(sdpa, mode, causal, T, inputs, grad_out)
    own_times, base_times = [], []

    def own_sample():
        own_times.append(own())
        return own_times[-1]

    def base_sample():
        base_times.append(base())
        return base_times[-1]

    ratios = tb.interleaved_ratios(own_sample, base_sample, tb.SPEED_PAIRS)
    return ratios, statistics.median(own_times), statistics.median(base_times)


class NotRun(Exception):
    """A cell that would need a new run under ``--reuse_only``: its testbed stops there."""


class Scorecard:
    def __init__(self, spec, args):
        self.spec, self.args = spec, args
        base = base_folder(args.results)
        self.store = Store(os.path.join(args.results, "cells.jsonl"), args.tier,
                           base=os.path.join(base, "cells.jsonl") if base else None)
        self.card = {"label": spec.label, "spec": spec.text, "tier": args.tier, "attention": spec.name,
                     "attention_params": spec.params, "config": spec.config, "cells": [], "not_applicable": {}}
        self._archive, self._own, self._configs = {}, {}, {}
        self.t0, self.done, self.planned, self.remaining = time.time(), 0, 0, {}
        self.not_run = []  # under --reuse_only: "testbed: cell" that would have needed a run
        self.root = work_tree_of(args.results)  # sources are relative to it (``work_tree_of``)
        self.commit = provenance.git_commit()  # the code that makes the card, not code edited while it runs

    # -- bookkeeping ---------------------------------------------------------------------------
    def estimate(self, testbed, kind=()):
        """Seconds of one cell of ``testbed`` of the kind ``kind`` (protocol items as sorted pairs,
        ``kinds``): the median of this attention's measured cells of that kind (the same attention
        and resolved parameters, ``own``), else of every attention's, else ``DEFAULT_SECONDS``; a swap
        cell whose softmax model is not trained yet adds the time of training it."""
        where = dict(kind)
        seconds = (self.store.seconds(testbed, {**where, **self.own(testbed)}) or self.store.seconds(testbed, where)
                   or DEFAULT_SECONDS[self.args.tier][testbed])
        if testbed == "swap" and not os.path.exists(os.path.join(self.swap_base()[3], "ckpt.pt")):
            # its softmax model is still to train: the measured time of training one, else a
            # WikiText-2 cell's default (the full tier's model is the WikiText-2 testbed's config)
            trained = [r["base_train_s"] for r in self.store.rows.values()
                       if r.get("base_train_s") and r.get("tier", "full") == self.args.tier]
            seconds += statistics.median(trained) if trained else DEFAULT_SECONDS[self.args.tier]["wikitext2"]
        return seconds

    def own(self, testbed):
        """The protocol items that make a cell of ``testbed`` this attention's: its name and the
        parameters its cells run with (a training testbed's resolved config; speed's completed ones)."""
        if testbed not in self._own:
            own = {"attention": self.spec.name}
            if testbed == "speed":
                own["attention_params"] = tb.speed_protocol(self.spec, 0, False, "forward", 0)[1]["attention_params"]
            elif testbed in CONFIGS:
                cfg = self.testbed_config(testbed)
                own = {"attention": cfg["attention"], "attention_params": cfg["attention_params"]}
            self._own[testbed] = own
        return self._own[testbed]

    def testbed_config(self, testbed):
        """The resolved configuration of a training testbed's config with this attention's layers and
        ``--train_args`` (before a cell's own arguments)."""
        if testbed not in self._configs:
            self._configs[testbed] = tb.resolved_config(
                [CONFIGS[testbed], *self.spec.layers(testbed), *self.args.train_args], self.args.imports)
        return self._configs[testbed]

    def kinds(self, testbed):
        """[(kind, cells)]: the cells of ``testbed`` in this tier grouped by what decides their cost
        (recall: the cell's length, pairs and width; speed: T), a kind being sorted protocol items."""
        def recall_kind(cell):
            return tuple(sorted({"block_size": cell[0], "recall_pairs": cell[1], "n_embd": cell[2]}.items()))

        if testbed == "recall":
            if self.args.tier == "quick":
                return [(recall_kind(tb.RECALL_SMALL), 1)]
            per_cell = len(tb.RECALL_RATES) + len(tb.RECALL_SEEDS) + len(self.check_seeds())
            return [(recall_kind(tb.RECALL_REFERENCE), per_cell), (recall_kind(tb.RECALL_SMALL), per_cell)]
        if testbed == "wikitext2":
            return [((), len(self.wikitext2_seeds()))]
        if testbed == "speed":
            causals, modes = tb.speed_calls(self.spec.cls)
            return [((("T", T),), len(causals) * len(modes)) for T in self.args.speed_T or tb.SPEED_T[self.args.tier]]
        return [((), 1)]

    def progress(self, what, row):
        """One line per finished cell: its result, where it came from, and the time left (the
        remaining cells of each kind times that kind's measured median, ``estimate``)."""
        self.done += 1
        protocol = row.get("protocol", {})
        for testbed, kind in self.remaining:
            if testbed == row["testbed"] and all(same(protocol.get(k), v) for k, v in kind):
                self.remaining[testbed, kind] = max(self.remaining[testbed, kind] - 1, 0)
                break
        left = sum(n * self.estimate(t, kind) for (t, kind), n in self.remaining.items())
        print(f"[{self.done}/{self.planned}] {what}: {row.get('summary', '')} ({row.get('source')}; "
              f"elapsed {(time.time() - self.t0) / 60:.1f} min, at most about {left / 60:.0f} min left)", flush=True)

    def archive(self, testbed):
        if testbed not in self._archive:
            self._archive[testbed] = archived_index(ARCHIVES[testbed], testbed, self.root)
        return self._archive[testbed]

    def new_run(self, testbed, name):
        """Called before a cell runs anything: under ``--reuse_only`` raises NotRun instead."""
        if getattr(self.args, "reuse_only", False):
            raise NotRun(f"{testbed}: {name}")

    # -- training cells --------------------------------------------------------------------------
    def train_cell(self, testbed, role, name, argv, card_fields):
        """The result row of one training cell (recall, wikitext2): the store's (unless the run it
        names is gone), an archived run's with the same protocol, or a new run (train.py, then for
        wikitext2 eval_ppl.py) in ``<out_root>/<label>/<name>_<key>``, packed as soon as it ends
        (``packed``); added to the card with ``card_fields``."""
        from scripts.analysis.runs import run_cpu

        argv = [*argv, *self.args.train_args]
        cfg = tb.resolved_config(argv, self.args.imports)
        eval_argv = evaluation_args(testbed, self.args.tier, self.args.eval_args)
        key, fields = tb.protocol(cfg, testbed, VERSIONS[testbed], eval_argv)
        row = self.store.rows.get(key)
        if row is not None and not os.path.exists(os.path.join(self.root, row["source"])):
            print(f"[!] {testbed} {name}: its result names {row['source']}, which is gone; the cell runs again",
                  flush=True)
            row = None
        if row is None and key in self.archive(testbed):
            path, run = self.archive(testbed)[key]
            evaluation = run.read_json("eval_test.json") if testbed == "wikitext2" else None
            self.store.add(self.result_row(testbed, key, fields, run.final_metrics, evaluation, source=path, wall_s=None))
            row = self.store.rows[key]  # the stored row (with its tier): not added again below
        if row is None:
            problem = tb.prepared_data_problem(testbed, cfg)
            if problem is not None and self.args.tier == "full":
                raise tb.DataNotFull(problem)
            if problem is not None:
                print(f"[!] {problem}: this quick-tier cell is a smoke test, not a first look", flush=True)
            self.new_run(testbed, name)
            out_dir = os.path.join(self.args.out_root, label_file(self.spec.label), f"{name}_{key[:8]}")
            os.makedirs(out_dir, exist_ok=True)
            imports = [f"--import={p}" for p in self.args.imports]
            commands, started = cell_commands(out_dir, [*imports, *argv, f"--num_threads={self.args.threads}"])
            if testbed == "wikitext2":
                commands.append([sys.executable, "eval_ppl.py", *imports, f"--out_dir={out_dir}", *eval_argv,
                                 f"--num_threads={self.args.threads}", f"--out_json={out_dir}/eval_test.json"])
            start = time.time()
            self.run_logged(commands, out_dir, f"{testbed} cell {name}", mode="a" if started else "w")
            with open(os.path.join(out_dir, "final_metrics.json")) as f:
                metrics = json.load(f)
            evaluation = None
            if testbed == "wikitext2":
                with open(os.path.join(out_dir, "eval_test.json")) as f:
                    evaluation = json.load(f)
            row = self.result_row(testbed, key, fields, metrics, evaluation, source=shown(out_dir, self.root),
                                  wall_s=None if started else time.time() - start)  # a part: no estimate
        packed = self.packed(row)
        if packed is not row or self.store.rows.get(key) is not row:  # a new run, or a row naming a run folder
            self.store.add(packed)
        row = packed
        shown_fields = {"recall": ("test_accuracy", "val_accuracy"), "lra": ("test_accuracy", "steps_per_s"),
                        "wikitext2": ("test_ppl", "tokens_per_s", "train_time_s")}[testbed]
        self.card["cells"].append({"role": role, "name": name, "key": key, "version": VERSIONS[testbed], **card_fields,
                                   **{k: row[k] for k in shown_fields}, "source": row["source"],
                                   **({"budget": row["budget"]} if row.get("budget") else {}),  # rows before it: none
                                   "cpu": run_cpu(os.path.join(self.root, row["source"]))})  # None: no run
        self.progress(f"{testbed} {name}", row)
        return row

    @staticmethod
    def result_row(testbed, key, fields, metrics, evaluation, source, wall_s):
        row = {"key": key, "testbed": testbed, "protocol": fields, "source": source, "wall_s": wall_s,
               "budget": tb.run_budget(testbed, metrics, evaluation)}
        if testbed == "recall":
            row.update(test_accuracy=metrics["test_accuracy"], val_accuracy=metrics["best_metric"]["value"],
                       summary=f"test accuracy {metrics['test_accuracy']:.4f}")
        elif testbed == "lra":
            row.update(test_accuracy=metrics["test_accuracy"], steps_per_s=metrics["steps_per_s"],
                       summary=f"test accuracy {metrics['test_accuracy']:.4f}")
        else:
            cfg = metrics["config"]
            tokens = cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
            row.update(test_ppl=evaluation["value"], train_time_s=metrics["train_time_s"],
                       tokens_per_s=(metrics["steps_per_s"] or 0) * tokens,
                       summary=f"test perplexity {evaluation['value']:.2f}")
        return row

    def recall_run(self, role, cell, lr, seed):
        argv = [tb.RECALL_CONFIG, *self.spec.layers("recall"), *tb.recall_cell_args(cell, lr, seed)]
        return self.train_cell("recall", role, tb.recall_cell_name(cell, lr, seed), argv,
                               {"learning_rate": lr, "seed": seed, "cell": list(cell)})

    def lra(self):
        n = tb.LRA_ITERS[self.args.tier]
        argv = [tb.LRA_CONFIG, *self.spec.layers("lra"), f"--max_iters={n}", f"--lr_decay_iters={n}"]
        if self.args.lra_dir:
            argv.append(f"--lra_dir={self.args.lra_dir}")  # not part of the protocol (NOT_PROTOCOL)
        self.train_cell("lra", "lra", f"lra_text_{n}", argv, {"steps": n})

    def wikitext2_seeds(self):
        """The WikiText-2 cell's seeds: the config's (None), and for the softmax baseline in the full
        tier ``WIKITEXT2_BASELINE_SEEDS`` too (the column's reference with its spread)."""
        extra = tb.WIKITEXT2_BASELINE_SEEDS if self.args.tier == "full" and tb.is_baseline(self.spec) else ()
        return (None, *extra)

    def wikitext2(self):
        argv = [tb.WIKITEXT2_CONFIG, *self.spec.layers("wikitext2")]
        if self.args.tier == "quick":
            n = tb.WIKITEXT2_QUICK_ITERS
            argv += [f"--max_iters={n}", f"--lr_decay_iters={n}", f"--eval_interval={n}"]
        name = f"wikitext2_gpt_mini_{self.args.tier}"
        for seed in self.wikitext2_seeds():  # the config's seed first: its run is the cell's speed
            if seed is None:
                self.train_cell("wikitext2", "wikitext2", name, argv, {"seed": self.testbed_config("wikitext2")["seed"]})
            else:
                self.train_cell("wikitext2", "wikitext2", f"{name}_s{seed}", [*argv, f"--seed={seed}"], {"seed": seed})

    def check_seeds(self):
        """The recall check seeds this attention runs: ``RECALL_CHECK_SEEDS`` for the softmax baseline."""
        return tb.RECALL_CHECK_SEEDS if tb.is_baseline(self.spec) else ()

    def recall(self):
        """Quick tier: 64/4, seed 0, the config's rate. Full tier (protocol 2), at 256/16 and at 64/4
        separately: every rate of ``RECALL_RATES`` on the selection seed, the rate that stopped
        earliest at ``stop_at``, else the best validation accuracy (``tb.pick_rate``), then the reported seeds at it (and the baseline's
        check seeds); the picks go to the card's ``recall_rates``, by role."""
        if self.args.tier == "quick":
            self.recall_run("recall_small", tb.RECALL_SMALL, self.testbed_config("recall")["learning_rate"], 0)
            return
        self.card["recall_rates"] = {}
        for role, cell in (("recall_reference", tb.RECALL_REFERENCE), ("recall_small", tb.RECALL_SMALL)):
            selection = [self.recall_run(f"{role}_selection", cell, lr, tb.RECALL_SELECTION_SEED)
                         for lr in tb.RECALL_RATES]
            lr = tb.pick_rate([row["val_accuracy"] for row in selection],
                              stopped_at=[tb.stopped_step(row) for row in selection])
            self.card["recall_rates"][role] = lr
            for seed in tb.RECALL_SEEDS:
                self.recall_run(role, cell, lr, seed)
            for seed in self.check_seeds():
                self.recall_run(f"{role}_check", cell, lr, seed)

    # -- swap ------------------------------------------------------------------------------------
    @staticmethod
    def run_logged(commands, out_dir, what, mode="a"):
        """Run ``commands`` (argument lists) one after the other from the repository root, their
        output into ``out_dir/scorecard.log`` (``mode``: "w" starts it anew, "a" appends).

        Raises:
            RuntimeError: a command exits with a non-zero status (names ``what`` and the log).
        """
        with open(os.path.join(out_dir, LOG_FILE), mode) as log:
            for command in commands:
                status = subprocess.run(command, cwd=tb.ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
                if status != 0:
                    raise RuntimeError(f"{what} failed (status {status}); its log: {os.path.join(out_dir, LOG_FILE)}")

    def swap_base(self):
        """(train.py arguments, protocol key, protocol fields, folder) of the softmax model that the
        swap testbed trains once per protocol (``<out_root>/_swap_base/<key>``)."""
        argv = [*tb.SWAP_BASE[self.args.tier], "--attention=softmax", *self.args.train_args]
        base_key, base_fields = tb.protocol(tb.resolved_config(argv, self.args.imports), "swap", tb.SWAP_VERSION,
                                            tb.WIKITEXT2_EVAL)
        return argv, base_key, base_fields, os.path.join(self.args.out_root, SWAP_BASE_LABEL, base_key)

    def swap(self):
        """Test perplexity of the attention swapped into a softmax model trained once per protocol
        (``swap_base``; its softmax perplexity is the baseline)."""
        argv, base_key, base_fields, base = self.swap_base()
        base_train_s = None
        if not os.path.exists(os.path.join(base, "ckpt.pt")):
            self.new_run("swap", "the softmax model")
            os.makedirs(base, exist_ok=True)
            start = time.time()
            self.run_logged([[sys.executable, "train.py", *argv, f"--out_dir={base}",
                              f"--num_threads={self.args.threads}"]], base, "the softmax model of the swap testbed")
            base_train_s = time.time() - start
        start = time.time()
        results = {}
        for label, attention_args in (("softmax", ["--attention=softmax"]), ("swapped", tb.eval_attention_args(self.spec))):
            key = tb.digest({"base": base_key, "attention": attention_args, "evaluation": self.args.eval_args,
                             "testbed": "swap", "testbed_version": tb.SWAP_VERSION})
            row = self.store.rows.get(key)
            if row is None:
                self.new_run("swap", f"the evaluation of {label}")
                out_json = os.path.join(base, f"eval_{key}.json")
                imports = [f"--import={p}" for p in self.args.imports]
                self.run_logged([[sys.executable, "eval_ppl.py", *imports, f"--out_dir={base}", *tb.WIKITEXT2_EVAL,
                                  *self.args.eval_args, *attention_args, f"--num_threads={self.args.threads}",
                                  f"--out_json={out_json}"]], base, f"the swap evaluation of {attention_args}")
                with open(out_json) as f:
                    value = json.load(f)["value"]
                row = {"key": key, "testbed": "swap", "protocol": {"base": base_fields, "attention": attention_args,
                                                                   "evaluation": self.args.eval_args},
                       "source": shown(base, self.root), "wall_s": time.time() - start, "test_ppl": value,
                       "summary": f"test perplexity {value:.2f} ({label})"}
                if base_train_s is not None:  # training the softmax model: not part of a cell's time
                    row["base_train_s"], base_train_s = base_train_s, None
                self.store.add(row)
                start = time.time()
            results[label] = row
        packed = {}  # source -> packed source: both rows name the one run folder, packed once
        for label, row in results.items():  # the softmax model's run and every evaluation of it, packed
            if row["source"] not in packed:
                packed[row["source"]] = self.packed(row, label=SWAP_BASE_LABEL)["source"]
            if packed[row["source"]] != row["source"]:
                results[label] = {**row, "source": packed[row["source"]]}
                self.store.add(results[label])
        ratio = results["swapped"]["test_ppl"] / results["softmax"]["test_ppl"]
        self.card["cells"].append({"role": "swap", "name": f"swap_{self.args.tier}", "key": results["swapped"]["key"],
                                   "test_ppl": results["swapped"]["test_ppl"],
                                   "softmax_test_ppl": results["softmax"]["test_ppl"], "ratio": ratio,
                                   "softmax_key": results["softmax"]["key"], "source": results["swapped"]["source"]})
        self.progress("swap into the trained softmax model", {**results["swapped"], "summary": (
            f"test perplexity {results['swapped']['test_ppl']:.2f}, softmax's {results['softmax']['test_ppl']:.2f}")})

    # -- speed -----------------------------------------------------------------------------------
    def speed(self):
        import torch

        from scripts.bench.methods import first_line, parse_method

        torch.set_num_threads(self.args.threads)
        torch.set_flush_denormal(True)
        cls, sdpa = self.spec.cls, parse_method("sdpa")
        causals, modes = tb.speed_calls(cls)
        shown_call = tb.leaderboard_call(causals, modes)
        for T in self.args.speed_T or tb.SPEED_T[self.args.tier]:
            for causal in causals:
                for mode in modes:
                    key, fields = tb.speed_protocol(self.spec, T, causal, mode, self.args.threads)
                    row = self.store.rows.get(key)
                    if row is None:
                        self.new_run("speed", f"T={T} causal={causal} {mode}")
                        start = time.time()
                        try:
                            ratios, own_s, sdpa_s = interleaved_cell(self.spec.method, sdpa, mode, causal, T)
                            median, q1, q3 = tb.ratio_summary(ratios)
                            note = ""
                        except (RuntimeError, MemoryError) as e:
                            ratios, own_s, sdpa_s, median, q1, q3 = [], None, None, None, None, None
                            note = first_line(e)
                        row = {"key": key, "testbed": "speed", "protocol": fields, "source": "measured",
                               "wall_s": time.time() - start, "seconds": own_s, "sdpa_seconds": sdpa_s,
                               "ratio": median, "ratio_q1": q1, "ratio_q3": q3, "ratios": ratios, "note": note,
                               "summary": (f"{median:.2f}x SDPA's time (interquartile range {q1:.2f}-{q3:.2f}, "
                                           f"{len(ratios)} pairs)" if median is not None else note)}
                        self.store.add(row)
                    cell = {"role": "speed", "name": f"speed_T{T}_{'causal' if causal else 'full'}_{mode}",
                            "key": key, "version": tb.SPEED_VERSION, "T": T, "causal": causal, "mode": mode,
                            "ratio": row["ratio"], "ratio_q1": row.get("ratio_q1"), "ratio_q3": row.get("ratio_q3"),
                            "pairs": len(row.get("ratios") or []), "source": row["source"]}
                    shown = row
                    if (causal, mode) == shown_call:  # the leaderboard's call: its memory too
                        memory = self.memory_row(T, causal, mode, sdpa)
                        cell.update(memory_key=memory["key"], memory_ratio=memory["ratio"], peak_mb=memory["peak_mb"])
                        shown = {**row, "summary": f"{row['summary']}; peak memory {memory['summary']}"}
                    self.card["cells"].append(cell)
                    self.progress(f"speed T={T} causal={causal} {mode}", shown)

    def memory_row(self, T, causal, mode, sdpa):
        """The store's row of the memory cell of one speed cell, measured when it has none: the
        peak memory (MB) one call adds on top of its inputs, the attention's and SDPA's, each in a
        fresh process (``scripts.bench.methods.peak_memory``); not timed, so it may run beside
        other work."""
        from scripts.bench.methods import peak_memory

        key, fields = tb.speed_protocol(self.spec, T, causal, mode, self.args.threads, measure="peak_memory")
        row = self.store.rows.get(key)
        if row is None:
            start = time.time()
            args = (mode, causal, T, tb.SPEED_D, tb.SPEED_HEADS, "cpu", self.args.threads)
            sdpa_mb, sdpa_note = peak_memory(sdpa, *args)
            own_mb, own_note = peak_memory(self.spec.method, *args, imports=self.args.imports)
            ratio = own_mb / sdpa_mb if own_mb is not None and sdpa_mb else None
            note = "; ".join(n for n in (own_note, sdpa_note and f"SDPA: {sdpa_note}") if n)
            row = {"key": key, "testbed": "speed", "protocol": fields, "source": "measured",
                   "wall_s": time.time() - start, "peak_mb": own_mb, "sdpa_peak_mb": sdpa_mb, "ratio": ratio,
                   "note": note, "summary": (f"{own_mb:.0f} MB, {ratio:.2f}x SDPA's" if ratio is not None
                                             else note or "not measured")}
            self.store.add(row)
        return row

    def packed(self, row, label=None):
        """``row`` with its source packed: a train.py run folder (in ``out_root``) becomes
        ``<results>/runs/<label>/<name>.tar.xz`` (``runs.archive_run``: manifest, metrics, logs and
        the folder's eval_*.json and LOG_FILE, no checkpoints; ``label``: this attention's by default) as soon as
        its cell ends, so that a result in the store never names a folder that a lost ``out_root``
        takes with it. Other rows are returned as they are."""
        from scripts.analysis.runs import RUN_SUFFIX, archive_run

        folder = os.path.join(self.root, row["source"])  # an absolute source stays as it is
        if not os.path.isfile(os.path.join(folder, "manifest.json")):
            return row
        dest = os.path.join(self.args.results, "runs", label_file(label or self.spec.label))
        evaluations = [f for f in os.listdir(folder) if f.startswith("eval_") and f.endswith(".json")]
        name, _ = archive_run(folder, dest, extra=[*evaluations, LOG_FILE])
        return {**row, "source": shown(os.path.join(dest, name + RUN_SUFFIX), self.root)}

    # -- the whole card --------------------------------------------------------------------------
    def plan(self):
        """(testbed, [(kind, cells)], estimated seconds) of the testbeds that apply; records the others."""
        plan = []
        for testbed in tb.TESTBEDS:
            reason = tb.applies(testbed, self.spec)
            if reason:
                self.card["not_applicable"][testbed] = reason
                continue
            if self.args.testbeds and testbed not in self.args.testbeds:
                continue
            kinds = self.kinds(testbed)
            plan.append((testbed, kinds, sum(n * self.estimate(testbed, kind) for kind, n in kinds)))
        return plan

    def run(self):
        plan = self.plan()
        self.remaining = {(testbed, kind): n for testbed, kinds, _ in plan for kind, n in kinds}
        self.planned = sum(self.remaining.values())
        total = sum(s for _, _, s in plan)
        print(f"scorecard of {self.spec.label} ({self.args.tier} tier): "
              + ", ".join(f"{t} {sum(n for _, n in kinds)} cells" for t, kinds, _ in plan)
              + "".join(f"; {t}: does not apply ({why})" for t, why in self.card["not_applicable"].items())
              + f"; at most about {total / 60:.0f} min (cells already measured or archived are not run)", flush=True)
        if self.args.plan:
            return None
        for testbed, _, _ in plan:
            try:
                getattr(self, testbed)()
            except NotRun as e:  # --reuse_only: the testbed's cells up to here are kept
                self.not_run.append(str(e))
                print(f"[-] {e}: needs a new run, not run (--reuse_only); the rest of {testbed} is left too", flush=True)
        path = os.path.join(self.args.results, "cards", f"{label_file(self.spec.label)}_{self.args.tier}.json")
        if os.path.exists(path):  # a call with --testbeds keeps the other testbeds' cells of earlier calls
            with open(path) as f:
                old = json.load(f)
            ran = {testbed for testbed, _, _ in plan} | set(self.card["not_applicable"])
            self.card["cells"] = [c for c in old["cells"] if c["role"].split("_")[0] not in ran] + self.card["cells"]
            for key in ("recall_rate", "recall_rates"):  # protocol 1's one pick; protocol 2's per cell
                if "recall" not in ran and key in old:
                    self.card[key] = old[key]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json(path, self.card)
        provenance.record(path[:-len(".json")], commit=self.commit,
                          extra={"cells": len(self.card["cells"]),  # the card's, this call's and earlier calls'
                                 "testbeds": [t for t in tb.TESTBEDS if any(c["role"].split("_")[0] == t
                                                                            for c in self.card["cells"])],
                                 "ran": self.args.testbeds or list(tb.TESTBEDS)})
        return path


def leaderboard(results):
    """Write the leaderboard of ``results`` and its manifest entry; returns the .md path. A user's
    folder (``base_folder``) merges the committed cards and cells with its own."""
    base = base_folder(results)
    rows = Store(os.path.join(results, "cells.jsonl"), base=os.path.join(base, "cells.jsonl") if base else None).rows
    path = write_leaderboard(results, rows, base=base, root=work_tree_of(results))
    cards = [n for folder in (base, results) if folder and os.path.isdir(os.path.join(folder, "cards"))
             for n in os.listdir(os.path.join(folder, "cards")) if n != "manifest.json"]
    provenance.record(path[:-len(".md")], extra={"cards": sorted(set(cards)), **({"merged": shown(base)} if base else {})})
    return path


def refresh_documents(root, before):
    """Re-render the blocks of README.md and docs/*.md of the work tree ``root`` that differ from
    what their renderers return now (``scripts.analysis.publish``), except those in ``before``
    ((document, block spec) pairs already stale before this command: someone else's work, left as
    they are). A refreshed block whose renderer writes files (``published.writes_files``: the
    leaderboard's figure) is rendered again with ``write=True``, so that its files are written too.
    Returns (refreshed, left): (document, spec) pairs."""
    from data import write_text
    from scripts.analysis import publish, published

    refreshed, left = [], []
    for doc in publish.documents(root):
        if not os.path.exists(doc):
            continue
        rel = os.path.relpath(doc, root)

        def refresh(match):
            spec = match.group("spec")
            body = published.render(spec, root)
            body = body if body.endswith("\n") else body + "\n"
            if body == match.group("body"):
                return match.group(0)
            if (rel, spec) in before:
                left.append((rel, spec))
                return match.group(0)
            refreshed.append((rel, spec))
            if published.writes_files(published.renderers()[spec.split()[0]]):
                body = published.render(spec, root, write=True)
                body = body if body.endswith("\n") else body + "\n"
            return match.group(1) + body + match.group(4)

        with open(doc) as f:
            text = f.read()
        new = publish.BLOCK.sub(refresh, text)
        if new != text:
            write_text(doc, new)
    return refreshed, left


class Publisher:
    """For ``--results`` naming the committed folder (``published_folder``): the blocks stale before
    the command (``start``), then after it the blocks the new card made stale re-rendered
    (``finish``), so that the command leaves ``publish --check`` as it found it."""

    def __init__(self, results):
        self.root = work_tree_of(results)
        self.active = os.path.realpath(results) == os.path.realpath(published_folder(results))
        self.before = None

    def start(self):
        if not self.active:
            return
        from scripts.analysis import publish, published
        try:
            self.before = set(publish.stale(self.root))
        except (FileNotFoundError, published.RenderError) as e:  # publish's own errors: nothing re-rendered
            print(f"[!] the README and docs cannot be rendered ({e}); they are not re-rendered after this command")
            self.active = False

    def finish(self):
        if not self.active:
            return
        refreshed, left = refresh_documents(self.root, self.before)
        for doc, spec in refreshed:
            print(f"re-rendered {doc}: {spec}")
        for doc, spec in left:
            print(f"[!] {doc}: the block '{spec}' was stale before this command; left for "
                  f"python -m scripts.analysis.publish")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m scripts.scorecard", description=__doc__.split("\n")[0],
                                 epilog="Results: --results (default out/leaderboard, your own folder) gets the cards, "
                                        "cells and a leaderboard that merges the committed cards of results/scorecard "
                                        "with yours; nothing tracked changes. --results results/scorecard (the "
                                        "maintainers' runs) writes the committed leaderboard and re-renders the README "
                                        "and docs blocks it makes stale. docs/scorecard.md says more.")
    ap.add_argument("spec", nargs="?", help="the attention: name[:param=value,...], a configs/attention name or a file")
    ap.add_argument("--tier", choices=tb.TIERS, default="quick",
                    help="quick (default): a first look, marked as such (recall 64/4 one seed, speed at T = 1k, "
                         "4k); full: the published protocol (recall 256/16 and 64/4 on seeds 1-3, WikiText-2, "
                         "LRA Text's 8,000 steps, speed at T = 1k, 4k, 16k)")
    ap.add_argument("--import", dest="imports", action="append", default=[], metavar="FILE",
                    help="a Python file that registers the attention (attention.register); repeatable")
    ap.add_argument("--testbeds", default="", help=f"comma list: only these of {','.join(tb.TESTBEDS)} (default: all); "
                    "the card keeps the cells of earlier calls")
    ap.add_argument("--plan", action="store_true", help="print the plan and its estimated time, run nothing")
    ap.add_argument("--reuse_only", action="store_true",
                    help="fill the card from measured and archived cells only; a testbed stops at its first cell "
                         "that would need a new run (listed; the leaderboard marks what is missing)")
    ap.add_argument("--leaderboard", action="store_true", help="only rebuild the leaderboard from the cards")
    ap.add_argument("--threads", type=int, default=2,
                    help="CPU threads of every training run, evaluation and speed measurement (train.py's "
                         "--num_threads; part of the speed cells' protocol) (default: 2)")
    ap.add_argument("--out_root", default="out/scorecard", help="where training runs go")
    ap.add_argument("--results", default=USER_RESULTS,
                    help=f"cells.jsonl, cards/, runs/, leaderboard.csv/.md (default {USER_RESULTS}: your folder, its "
                         f"leaderboard merging the committed cards with yours; {PUBLISHED}: the committed one, then "
                         "the README and docs re-rendered)")
    ap.add_argument("--train_args", default="", help="more train.py arguments for every run (e.g. tiny budgets)")
    ap.add_argument("--lra_dir", default="", help="train.py's --lra_dir for the LRA Text cells only (where their "
                                                   "data are prepared; default: train.py's)")
    ap.add_argument("--eval_args", default="", help="more eval_ppl.py arguments for the WikiText-2 evaluation (tests)")
    ap.add_argument("--speed_T", default="", help="comma list of T for the speed cells instead of the tier's")
    args = ap.parse_args(argv)
    args.train_args, args.eval_args = args.train_args.split(), args.eval_args.split()
    args.testbeds = [t for t in args.testbeds.split(",") if t.strip()]
    unknown = sorted(set(args.testbeds) - set(tb.TESTBEDS))
    if unknown:
        ap.error(f"unknown testbed(s) {', '.join(unknown)}; known: {', '.join(tb.TESTBEDS)}")
    args.speed_T = [int(t) for t in args.speed_T.split(",") if t.strip()]
    # the folders and imports from the caller's folder; the testbeds' configs (and train.py, eval_ppl.py)
    # from the repository root, whatever folder the command runs from
    args.results, args.out_root = os.path.abspath(args.results), os.path.abspath(args.out_root)
    args.lra_dir = os.path.abspath(args.lra_dir) if args.lra_dir else ""
    try:
        _, args.imports = configurator.import_files([f"--import={p}" for p in args.imports])
        os.chdir(tb.ROOT)
        publisher = Publisher(args.results)
        if args.leaderboard:
            publisher.start()
            print(f"wrote {leaderboard(args.results)}")
            publisher.finish()
            return None
        if not args.spec:
            ap.error("give the attention (SPEC) or --leaderboard")
        try:
            spec = tb.Spec(args.spec)
        except ValueError as e:
            raise configurator.ConfigError(str(e)) from None
        if not args.plan:
            publisher.start()
        card = Scorecard(spec, args).run()
        if card:
            board = leaderboard(args.results)
            base = base_folder(args.results)
            print(f"wrote {card} and {board}" + (f" (your leaderboard: the committed cards of {shown(base)} merged with "
                                                 f"yours; nothing tracked changed)" if base else ""))
            publisher.finish()
        return card
    except (configurator.ConfigError, tb.DataNotFull) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
