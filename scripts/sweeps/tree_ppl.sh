#!/usr/bin/env bash
# Sweep of tree / bud-expansion attention as in Figure 2 of "High Attention Scores and Where to
# Find Them": every sampler x E x normalization x protocol (true perplexity: blocks; the paper's
# measurement: casino) x test slice (offsets 0.2 and 0.4) x sampling seed, plus two baselines per
# slice: exact softmax attention, and exact attention limited to the last WINDOW tokens (how much
# the model uses context beyond them at all).
# One evaluation per JSON, all in one process (scripts/sweeps/eval_grid.py); runs whose JSON already
# exists are skipped (resumable). $OUT/grid.txt lists every run of the sweep.
#
# Environment:
#   CKPT       checkpoint directory for --out_dir (default out/wikitext2_gpt_mini), or
#   INIT_FROM  a Hugging Face GPT-2 name / local HF dir (e.g. gpt2); takes precedence over CKPT
#   OUT        output directory of the JSONs (default results/tree_sweep)
#   FRACTION   fraction of the test split per slice (default 0.2; rounded up to whole blocks)
#   OFFSETS    slice offsets (default "0.2 0.4")
#   SEEDS      sampling seeds: --attention.seed and eval_ppl's --seed (default "0 1 2")
#   SAMPLERS   default "uniform edh alignment positive_alignment rff favor_plus favor_plus_relu"
#   ES         default "0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.0"
#   NORMS      default "bud_mean paper"
#   PROTOCOLS  default "blocks casino"
#   WINDOW     context of the windowed baseline in tokens (default 32; 0 = no windowed baseline)
#   PYTHON     interpreter (default python)
#   EXTRA      extra arguments for eval_ppl.py (e.g. "--batch_size=1 --num_threads=1")
#   DRY_RUN=1  print the commands instead of running them
# Then: python -m scripts.analysis.tree_sweep_table --in_dir "$OUT"
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=${OUT:-results/tree_sweep}
FRACTION=${FRACTION:-0.2}
OFFSETS=${OFFSETS:-"0.2 0.4"}
SEEDS=${SEEDS:-"0 1 2"}
SAMPLERS=${SAMPLERS:-"uniform edh alignment positive_alignment rff favor_plus favor_plus_relu"}
ES=${ES:-"0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.0"}
NORMS=${NORMS:-"bud_mean paper"}
PROTOCOLS=${PROTOCOLS:-"blocks casino"}
WINDOW=${WINDOW:-32}
PYTHON=${PYTHON:-python}
EXTRA=${EXTRA:-}
mkdir -p "$OUT"

if [[ -n "${INIT_FROM:-}" ]]; then
  MODEL=(--init_from="$INIT_FROM")
else
  MODEL=(--out_dir="${CKPT:-out/wikitext2_gpt_mini}")
fi

run() {  # run <json> <eval_ppl args...>: queue one evaluation for the in-process grid runner
  local json=$1; shift
  # shellcheck disable=SC2206
  local cmd=("${MODEL[@]}" --split=test --fraction="$FRACTION" "$@" $EXTRA --out_json="$json")
  printf '%q ' "${cmd[@]}"; printf '\n'
}

{
# ordered so that an interrupted sweep has complete tables first: protocol, normalization, seed,
# sampler, E, slice
for protocol in $PROTOCOLS; do
  for offset in $OFFSETS; do
    # exact attention is deterministic under blocks; casino samples tokens, so it gets every seed
    baseline_seeds=$([[ $protocol == casino ]] && echo "$SEEDS" || echo "${SEEDS%% *}")
    for seed in $baseline_seeds; do
      run "$OUT/softmax_${protocol}_off${offset}_s${seed}.json" --protocol="$protocol" --offset="$offset" \
        --seed="$seed" --attention=softmax
      if [[ "$WINDOW" != "0" ]]; then
        run "$OUT/window${WINDOW}_${protocol}_off${offset}_s${seed}.json" --protocol="$protocol" \
          --offset="$offset" --seed="$seed" --attention=softmax --attention.window="$WINDOW"
      fi
    done
  done
  for norm in $NORMS; do
    for seed in $SEEDS; do
      for sampler in $SAMPLERS; do
        for E in $ES; do
          for offset in $OFFSETS; do
            run "$OUT/tree_${sampler}_E${E}_${norm}_${protocol}_off${offset}_s${seed}.json" \
              --protocol="$protocol" --offset="$offset" --seed="$seed" --attention=tree \
              --attention.sampler="$sampler" --attention.E="$E" --attention.normalization="$norm" \
              --attention.seed="$seed"
          done
        done
      done
    done
  done
done
} > "$OUT/grid.txt"
echo "$(wc -l < "$OUT/grid.txt") evaluations listed in $OUT/grid.txt"
if [[ "${DRY_RUN:-0}" == "1" ]]; then cat "$OUT/grid.txt"; exit 0; fi
"$PYTHON" -m scripts.sweeps.eval_grid < "$OUT/grid.txt"
echo "done; table: $PYTHON -m scripts.analysis.tree_sweep_table --in_dir $OUT"
