#!/usr/bin/env bash
# Why a GPT without a token shift stays at the MQAR plateau (issue 42, item 1; docs/recall.md): one
# factor at a time, at 64/4 width 64, 1,000 steps, one seed, no token shift, from two ends:
#   zoology_*  the shape of Zoology's Figure 2 models (attention only, untied head, embeddings and
#              positions N(0, 1), PyTorch's Linear init, AdamW betas (0.9, 0.999), constant rate, no
#              clipping), with one ingredient put back to the GPT's value;
#   gpt_*      the recall GPT of the earlier sweeps (configs/recall/gpt_token_shift.py, its shift off),
#              with one ingredient of that shape added, then the three that the zoology_* rows single
#              out, together.
# Every row starts from configs/recall/mqar.py + configs/recall/gpt_token_shift.py + --token_shift=False
# (the reference config before 2026-11-27, which these rows were run with).
# Then the table: python -m scripts.analysis.recall_ablation_table OUT_ROOT --out=TABLE_OUT
#
#   scripts/sweeps/recall_ablation.sh                 # every row below
#   ROWS="zoology gpt" scripts/sweeps/recall_ablation.sh --max_iters=100
#
# Environment (defaults in brackets):
#   ROWS      [every row]                names of the rows to run (see row_args)
#   OUT_ROOT  [out/recall_ablation]      run dir OUT_ROOT/<row>
#   TABLE_OUT [results/recall/ablation_64_4]
#   THREADS   [2]   FORCE [0] (1 = rerun a row whose final_metrics.json exists)   PYTHON [python]
# Extra arguments go to every run. A failed run is reported and the sweep goes on (exit status 1).
set -u
cd "$(dirname "$0")/../.."
ZOOLOGY="--mlp=False --tie_lm_head=False --embedding_init_std=1.0 --pos_embedding_init_std=1.0 --linear_init=pytorch
 --beta2=0.999 --lr_schedule=constant --warmup_iters=0 --grad_clip=0.0"
INITS="--linear_init=pytorch --tie_lm_head=False --embedding_init_std=1.0"  # the three that matter (the table)
ALL_ROWS="zoology zoology_gpt2_linear_init zoology_embeddings_0.02 zoology_positions_0.02 zoology_tied_head
 zoology_mlp zoology_beta2_0.99 zoology_cosine_warmup zoology_clip_1 gpt gpt_pytorch_linear_init gpt_embeddings_1
 gpt_untied_head gpt_no_mlp gpt_unscaled_residual_init gpt_zoology_optimizer gpt_pytorch_linear_init_untied_head
 gpt_three_inits gpt_three_inits_constant_lr"
ROWS=${ROWS:-$ALL_ROWS}
OUT_ROOT=${OUT_ROOT:-out/recall_ablation}
TABLE_OUT=${TABLE_OUT:-results/recall/ablation_64_4}
THREADS=${THREADS:-2}
FORCE=${FORCE:-0}
PYTHON=${PYTHON:-python}

row_args() {  # the train.py arguments of a row, after the two configs and the cell
  case $1 in
    zoology) echo "$ZOOLOGY" ;;
    zoology_gpt2_linear_init) echo "$ZOOLOGY --linear_init=gpt2" ;;
    zoology_embeddings_0.02) echo "$ZOOLOGY --embedding_init_std=0.02" ;;
    zoology_positions_0.02) echo "$ZOOLOGY --pos_embedding_init_std=0.02" ;;
    zoology_tied_head) echo "$ZOOLOGY --tie_lm_head=True" ;;
    zoology_mlp) echo "$ZOOLOGY --mlp=True" ;;
    zoology_beta2_0.99) echo "$ZOOLOGY --beta2=0.99" ;;
    zoology_cosine_warmup) echo "$ZOOLOGY --lr_schedule=cosine --warmup_iters=50" ;;
    zoology_clip_1) echo "$ZOOLOGY --grad_clip=1.0" ;;
    gpt) echo "" ;;
    gpt_pytorch_linear_init) echo "--linear_init=pytorch" ;;
    gpt_embeddings_1) echo "--embedding_init_std=1.0 --pos_embedding_init_std=1.0" ;;
    gpt_untied_head) echo "--tie_lm_head=False" ;;
    gpt_no_mlp) echo "--mlp=False" ;;
    gpt_unscaled_residual_init) echo "--scale_residual_init=False" ;;
    gpt_zoology_optimizer) echo "--beta2=0.999 --lr_schedule=constant --warmup_iters=0 --grad_clip=0.0" ;;
    gpt_pytorch_linear_init_untied_head) echo "--linear_init=pytorch --tie_lm_head=False" ;;
    gpt_three_inits) echo "$INITS" ;;
    gpt_three_inits_constant_lr) echo "$INITS --lr_schedule=constant --warmup_iters=0" ;;
    *) return 1 ;;
  esac
}

failed=()
for row in $ROWS; do
  if ! args=$(row_args "$row"); then echo "== unknown row $row" >&2; failed+=("$row"); continue; fi
  out="$OUT_ROOT/$row"
  if [ -f "$out/final_metrics.json" ] && [ "$FORCE" != 1 ]; then echo "== $row: exists, skipped"; continue; fi
  mkdir -p "$out"
  echo "== $row: $(date '+%F %T')"
  # shellcheck disable=SC2086  # the row's arguments are words
  if OMP_NUM_THREADS=$THREADS $PYTHON train.py configs/recall/mqar.py configs/recall/gpt_token_shift.py --block_size=64 --recall_pairs=4 --n_embd=64 \
      --token_shift=False $args --out_dir="$out" --num_threads="$THREADS" --overwrite=True "$@" > "$out/train.log" 2>&1; then
    echo "== $row: $(grep -o '"test_accuracy": [0-9.]*' "$out/final_metrics.json")"
  else
    echo "== $row: FAILED (log: $out/train.log)" >&2
    failed+=("$row")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}" >&2; exit 1; }
