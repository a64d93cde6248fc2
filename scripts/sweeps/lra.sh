#!/usr/bin/env bash
# Long Range Arena grid on this machine: every task x attention, one run after the other, then the
# table (scripts/analysis/lra_table.py). A run's config layers are
#   configs/lra/<task><SUFFIX>.py configs/attention/<attention>.py [configs/lra/<attention>/<task><SUFFIX>.py]
# (the last one, the override of that task and attention, where it exists: DenseAttention's
# depth, window and training per task, configs/lra/dense/); the attention's layers come from the
# scorecard's rule (scripts/scorecard/testbeds.py, `python -m scripts.scorecard.testbeds lra_layers`),
# so this sweep and `python -m scripts.scorecard` layer an attention the same way.
#
#   scripts/sweeps/lra.sh                                   # the default grid below
#   TASKS="listops text" ATTENTIONS="softmax dense" scripts/sweeps/lra.sh
#   SUFFIX="" OUT_ROOT=out/lra_gpu scripts/sweeps/lra.sh    # the papers' sizes (configs/lra/<task>.py, GPU)
#
# Environment (defaults in brackets):
#   TASKS       ["listops text image pathfinder"]  retrieval needs the LRA release's tsv_data/ under LRA_DIR
#   ATTENTIONS  ["softmax fastmax1 fastmax2 dense"]  names of configs/attention/<name>.py
#   SUFFIX      ["_cpu"]       size: configs/lra/<task><SUFFIX>.py ("" = the papers' settings)
#   OUT_ROOT    [out/lra]      run <task>_<attention><SUFFIX> writes to OUT_ROOT/<task>_<attention><SUFFIX>
#   THREADS     [2]            torch threads per run (--num_threads)
#   FORCE       [0]            1 = rerun a cell whose final_metrics.json exists (otherwise it is skipped)
#   TABLE_OUT   [results/lra]  where lra_table.py writes lra_table.md and the CSVs
#   TABLE_RUNS  [""]           more run dirs for the table besides OUT_ROOT (e.g. runs archived in
#                              TABLE_OUT, so a sweep of new attentions keeps the earlier rows)
#   LRA_DIR                    data root (data.lra.default_lra_dir: data/lra/files when unset)
#   PYTHON      [python]       interpreter
# Extra arguments are passed to every train.py run (e.g. --max_iters=100 for a quick pass).
# A failed run is reported and the sweep goes on; the exit status is 1 if any run failed.
set -u
cd "$(dirname "$0")/../.."
TASKS=${TASKS:-"listops text image pathfinder"}
ATTENTIONS=${ATTENTIONS:-"softmax fastmax1 fastmax2 dense"}
SUFFIX=${SUFFIX-_cpu}
OUT_ROOT=${OUT_ROOT:-out/lra}
THREADS=${THREADS:-2}
FORCE=${FORCE:-0}
TABLE_OUT=${TABLE_OUT:-results/lra}
TABLE_RUNS=${TABLE_RUNS:-}
PYTHON=${PYTHON:-python}

failed=()
for task in $TASKS; do
  for attn in $ATTENTIONS; do
    name="${task}_${attn}${SUFFIX}"
    task_config="configs/lra/${task}${SUFFIX}.py"
    out="${OUT_ROOT}/${name}"
    for config in "$task_config" "configs/attention/${attn}.py"; do
      [ -f "$config" ] || { echo "== $name: no $config, skipped" >&2; failed+=("$name"); continue 2; }
    done
    layers=$($PYTHON -m scripts.scorecard.testbeds lra_layers "$task_config" "$attn") || { failed+=("$name"); continue; }
    mapfile -t layers <<< "$layers"
    configs=("$task_config" "${layers[@]}")
    if [ -f "$out/final_metrics.json" ] && [ "$FORCE" != 1 ]; then
      echo "== $name: $out/final_metrics.json exists, skipped (FORCE=1 reruns)"
      continue
    fi
    echo "== $name: $(date '+%F %T') python train.py ${configs[*]} --out_dir=$out --num_threads=$THREADS $*"
    mkdir -p "$out"
    # --overwrite=True: a cell without final_metrics.json (stopped) or with FORCE=1 starts over
    if OMP_NUM_THREADS=$THREADS $PYTHON train.py "${configs[@]}" --out_dir="$out" --num_threads="$THREADS" --overwrite=True "$@" \
        > >(tee "$out/train.log") 2>&1; then
      echo "== $name: done $(date '+%F %T')"
    else
      echo "== $name: FAILED (log: $out/train.log)" >&2
      failed+=("$name")
    fi
  done
done

# shellcheck disable=SC2086  # TABLE_RUNS is a list of paths
$PYTHON -m scripts.analysis.lra_table "$OUT_ROOT" $TABLE_RUNS --out="$TABLE_OUT" || failed+=("lra_table")
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed or skipped: ${failed[*]}" >&2
  exit 1
fi
