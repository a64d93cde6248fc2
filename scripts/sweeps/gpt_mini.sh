#!/usr/bin/env bash
# The mini GPT on WikiText-2 with every causal attention at the softmax baseline's budget (issue 26:
# the same iterations, batch and tokens), then the test perplexity of each run and the table
# (scripts/analysis/gpt_mini_table.py); the config and the evaluation are the scorecard's WikiText-2
# testbed's (scripts/scorecard/testbeds.py, through `python -m scripts.scorecard.testbeds`). A run's config layers are
#   configs/wikitext2_gpt_mini.py configs/attention/<attention>.py
# except "danet", the DANet mini of the DenseAttention paper's setting (configs/wikitext2_danet_gpt_mini.py:
# 5 one-head DANet blocks, local / shifted-local / global layers, its own schedule); "dense" is
# configs/attention/dense.py on the GPT mini (DANet blocks at the GPT mini's sizes and schedule).
#
#   scripts/sweeps/gpt_mini.sh                                  # every attention below, seed 1337
#   ATTENTIONS="softmax linear" SEEDS="1337 1 2" scripts/sweeps/gpt_mini.sh
#
# Environment (defaults in brackets):
#   ATTENTIONS  ["softmax fastmax1 fastmax2 dense danet linear performer longformer bigbird"]
#               the exactly causal methods: train.py refuses Linformer (no causal form), Reformer and
#               Informer (the keys a query scores depend on later tokens: LSH buckets and the
#               query selection see the whole sequence) and tree attention (inference only)
#   SEEDS       ["1337"]                   training seeds (1337 is the config's)
#   OUT_ROOT    [out/gpt_mini]             run dir OUT_ROOT/<attention>_s<seed>
#   THREADS     [2]                        torch threads of training and evaluation (--num_threads)
#   EVAL_ARGS   [the testbed's: --split=test --protocol=blocks]  eval_ppl.py arguments; its JSON goes to
#                                          OUT_ROOT/<attention>_s<seed>/eval_test.json
#   FORCE       [0]                        1 = rerun a run whose final_metrics.json exists (else skipped;
#                                          a missing evaluation is still made)
#   TABLE_OUT   [results/gpt_mini_baselines]  where gpt_mini_table.py writes summary.csv and the table
#   PYTHON      [python]                   interpreter
# Extra arguments go to every train.py run (e.g. --max_iters=20 for a quick pass; the table then
# says which runs differ from the others' budget). A failed run is reported and the sweep goes on;
# the exit status is 1 if any run failed.
set -u
cd "$(dirname "$0")/../.."
ATTENTIONS=${ATTENTIONS:-"softmax fastmax1 fastmax2 dense danet linear performer longformer bigbird"}
SEEDS=${SEEDS:-1337}
OUT_ROOT=${OUT_ROOT:-out/gpt_mini}
THREADS=${THREADS:-2}
PYTHON=${PYTHON:-python}
EVAL_ARGS=${EVAL_ARGS:-"$($PYTHON -m scripts.scorecard.testbeds wikitext2_eval)"}
FORCE=${FORCE:-0}
TABLE_OUT=${TABLE_OUT:-results/gpt_mini_baselines}

model_configs() {  # the config layers of an attention name
  if [ "$1" = danet ]; then echo "configs/wikitext2_danet_gpt_mini.py"
  else echo "$($PYTHON -m scripts.scorecard.testbeds wikitext2_config) configs/attention/$1.py"; fi
}

failed=()
for attn in $ATTENTIONS; do
  read -r -a configs <<< "$(model_configs "$attn")"
  missing=""
  for config in "${configs[@]}"; do [ -f "$config" ] || missing="$config"; done
  if [ -n "$missing" ]; then
    echo "== $attn: no $missing, skipped" >&2
    failed+=("$attn")
    continue
  fi
  for seed in $SEEDS; do
    name="${attn}_s${seed}"
    out="${OUT_ROOT}/${name}"
    if [ -f "$out/final_metrics.json" ] && [ "$FORCE" != 1 ]; then
      echo "== $name: trained, skipped (FORCE=1 retrains)"
    else
      mkdir -p "$out"
      echo "== $name: $(date '+%F %T') python train.py ${configs[*]} --seed=$seed --out_dir=$out --num_threads=$THREADS $*"
      # --overwrite=True: a run without final_metrics.json (stopped) or with FORCE=1 starts over
      if ! OMP_NUM_THREADS=$THREADS $PYTHON train.py "${configs[@]}" --seed="$seed" --out_dir="$out" \
          --num_threads="$THREADS" --overwrite=True "$@" > "$out/train.log" 2>&1; then
        echo "== $name: training FAILED (log: $out/train.log)" >&2
        failed+=("$name")
        continue
      fi
      rm -f "$out/eval_test.json"  # a new model: its old evaluation is stale
    fi
    if [ ! -f "$out/eval_test.json" ] || [ "$FORCE" = 1 ]; then
      # shellcheck disable=SC2086  # EVAL_ARGS is a list of arguments
      if OMP_NUM_THREADS=$THREADS $PYTHON eval_ppl.py --out_dir="$out" $EVAL_ARGS \
          --num_threads="$THREADS" --out_json="$out/eval_test.json" > "$out/eval.log" 2>&1; then
        echo "== $name: done $(date '+%F %T'), $(grep -o '"value": [0-9.]*' "$out/eval_test.json" | head -1)"
      else
        echo "== $name: evaluation FAILED (log: $out/eval.log)" >&2
        failed+=("eval_$name")
      fi
    fi
  done
done

$PYTHON -m scripts.analysis.gpt_mini_table "$OUT_ROOT" --out="$TABLE_OUT" || failed+=("gpt_mini_table")
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed or skipped: ${failed[*]}" >&2
  exit 1
fi
