#!/usr/bin/env bash
# Multi-query associative recall sweep (issue 25; tasks/recall.py, docs/recall.md): every attention x
# cell, the learning rate picked per attention and cell from LRS on seed 0 (the best validation
# accuracy; test is never looked at), then SEEDS more runs at the picked rate; then the table
# (scripts/analysis/recall_table.py). A run's layers are
#   configs/recall/mqar.py configs/attention/<attention>.py
# with the cell's --block_size, --recall_pairs, --n_embd on the command line. The config, the rates,
# the seeds and an attention's layer come from the scorecard's recall testbed
# (scripts/scorecard/testbeds.py, through `python -m scripts.scorecard.testbeds`), so this sweep and
# `python -m scripts.scorecard` run the same protocol.
#
#   scripts/sweeps/recall.sh                                    # the default grid below
#   ATTENTIONS="softmax linear" CELLS="64:4:64" scripts/sweeps/recall.sh --max_iters=100
#
# Environment (defaults in brackets):
#   ATTENTIONS  ["softmax fastmax1 fastmax2 dense linear performer longformer bigbird"]
#               attention layers (methods that are exactly causal): configs/recall/attention/<name>.py
#               where it exists (sparse methods whose defaults would cover a whole MQAR sequence),
#               else configs/attention/<name>.py
#   CELLS       ["64:4:64 64:4:128 256:16:64 256:16:128"]  seq_len:num_pairs:width
#   LRS         [the testbed's: 0.001 0.003 0.01]  learning rates tried on seed 0
#   SEEDS       [the testbed's: 1 2 3]  seeds run at the picked rate (seed 0 is the picking run; "" = none)
#   OUT_ROOT    [out/recall]       run dir OUT_ROOT/<attention>_T<len>_N<pairs>_d<width>_lr<lr %g>_s<seed>
#   THREADS     [2]                torch threads per run (--num_threads)
#   FORCE       [0]                1 = rerun a run whose final_metrics.json exists (else skipped)
#   TABLE_OUT   [results/recall]   where recall_table.py writes summary.csv and the table
#   PYTHON      [python]           interpreter
# Extra arguments go to every train.py run (config files too: configs/recall/gpt_token_shift.py gives
# the setting with a token shift of the sweeps before 2026-11-27; use another OUT_ROOT for it, the run
# names do not say). A failed run is reported and the sweep goes on; the exit status is 1 if any run failed.
set -u
cd "$(dirname "$0")/../.."
ATTENTIONS=${ATTENTIONS:-"softmax fastmax1 fastmax2 dense linear performer longformer bigbird"}
CELLS=${CELLS:-"64:4:64 64:4:128 256:16:64 256:16:128"}
PYTHON=${PYTHON:-python}
testbed() { $PYTHON -m scripts.scorecard.testbeds "$@"; }
CONFIG=$(testbed recall_config) || exit 2
LRS=${LRS:-"$(testbed recall_rates)"}
SEEDS=${SEEDS-"$(testbed recall_seeds)"}
OUT_ROOT=${OUT_ROOT:-out/recall}
THREADS=${THREADS:-2}
FORCE=${FORCE:-0}
TABLE_OUT=${TABLE_OUT:-results/recall}

failed=()
run() {  # run <attention> <len> <pairs> <width> <lr> <seed> [extra args]
  local attn=$1 len=$2 pairs=$3 width=$4 lr=$5 seed=$6
  shift 6
  local name="${attn}_T${len}_N${pairs}_d${width}_lr$(printf '%g' "$lr")_s${seed}"
  local out="${OUT_ROOT}/${name}"
  if [ -f "$out/final_metrics.json" ] && [ "$FORCE" != 1 ]; then
    echo "== $name: exists, skipped (FORCE=1 reruns)"
    return
  fi
  mkdir -p "$out"
  echo "== $name: $(date '+%F %T')"
  if OMP_NUM_THREADS=$THREADS $PYTHON train.py "$CONFIG" "$(attention_config "$attn")" \
      --block_size="$len" --recall_pairs="$pairs" --n_embd="$width" --learning_rate="$lr" --seed="$seed" \
      --recall_sizes="$(testbed recall_sizes "$len")" \
      --out_dir="$out" --num_threads="$THREADS" --overwrite=True "$@" > "$out/train.log" 2>&1; then  # a stopped run starts over
    echo "== $name: done $(date '+%F %T'), $(grep -o '"test_accuracy": [0-9.]*' "$out/final_metrics.json")"
  else
    echo "== $name: FAILED (log: $out/train.log)" >&2
    failed+=("$name")
  fi
}

attention_config() {  # the attention layer of a name: the recall override if there is one (the testbed's rule)
  testbed layers recall "$1"
}

for attn in $ATTENTIONS; do
  if ! attention_config "$attn" > /dev/null; then
    echo "== ${attn}: not an attention config or registered name, skipped" >&2
    failed+=("$attn")
    continue
  fi
  for cell in $CELLS; do
    IFS=: read -r len pairs width <<< "$cell"
    for lr in $LRS; do run "$attn" "$len" "$pairs" "$width" "$lr" 0 "$@"; done
    best=$($PYTHON -m scripts.analysis.recall_table pick "$OUT_ROOT" --attention="$attn" --seq_len="$len" \
           --num_pairs="$pairs" --d_model="$width") || { failed+=("pick_${attn}_${cell}"); continue; }
    echo "== ${attn} ${cell}: learning rate ${best} (best val accuracy on seed 0)"
    for seed in $SEEDS; do run "$attn" "$len" "$pairs" "$width" "$best" "$seed" "$@"; done
  done
done

$PYTHON -m scripts.analysis.recall_table table "$OUT_ROOT" --out="$TABLE_OUT" || failed+=("recall_table")
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed or skipped: ${failed[*]}" >&2
  exit 1
fi
