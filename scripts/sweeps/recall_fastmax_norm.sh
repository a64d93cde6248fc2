#!/usr/bin/env bash
# Fastmax's score normalization on multi-query associative recall (issue 25, section 3;
# docs/recall.md "Fastmax normalization"): each option setting x p x seed in one MQAR cell, at one
# learning rate, through scripts/sweeps/recall.sh (one run = configs/recall/mqar.py +
# configs/attention/fastmax<p>.py + the setting's --attention.* overrides), then one table with a
# row per setting (scripts/analysis/recall_table.py --label_params).
#
#   scripts/sweeps/recall_fastmax_norm.sh
#   VARIANTS="max_norm_1" CELL="256:16:128" SEEDS="" scripts/sweeps/recall_fastmax_norm.sh   # find the cell
#
# Settings (D = head dim = width / HEADS; "FAST: Factorizable Attention for Speeding up
# Transformers", section 2.3 assumes 0 <= s <= 1; its Eq. 5-6 standardisation bounds |s| only by
# D / temperature):
#   paper_D       normalization=paper, temperature=D        (|s| <= 1, the paper's assumption)
#   paper_sqrtD   normalization=paper, temperature=sqrt(D)  (softmax's usual scale)
#   none_8sqrtD   normalization=none, temperature=8 sqrt(D) (the authors' einops default)
#   max_norm_<l>  normalization=max_norm, lim=<l>, temperature 1 (the default before the study: lim 1)
# Environment (defaults in brackets):
#   VARIANTS  ["paper_D paper_sqrtD none_8sqrtD max_norm_0.5 max_norm_1 max_norm_2"]
#   PS        ["1 2"]        fastmax degrees
#   CELL      [64:4:128]     seq_len:num_pairs:width
#   HEADS     [4]            heads (p = 2 has 1 + D + D^2 features per head: one head of width 128 is
#                            ~50x slower than 4 heads of 32 on this CPU)
#   LR        [1e-2]         learning rate (the one recall.sh picked for fastmax p = 1 in 64:4:128)
#   SEEDS     ["1 2"]        seeds after seed 0 ("" = seed 0 only)
#   OUT_ROOT  [out/recall_fastmax_norm]   runs in OUT_ROOT/<setting>/
#   TABLE_OUT [results/recall/fastmax_norm]
# Extra arguments go to every train.py run. The study of docs/recall.md passed
# --attention.implementation=reference (the explicit (T, T) weights, the same function; ~20x faster than the
# chunked path for p = 2 at T = 64 here), which "auto" has picked for p = 2 at T <= 8 D since 2026-11-27.
# It ran with the recall setting of that time (a token shift): today that is the extra argument
# configs/recall/gpt_token_shift.py (scripts/sweeps/recall_fastmax_norm.sh configs/recall/gpt_token_shift.py).
set -u
cd "$(dirname "$0")/../.."
VARIANTS=${VARIANTS:-"paper_D paper_sqrtD none_8sqrtD max_norm_0.5 max_norm_1 max_norm_2"}
PS=${PS:-"1 2"}
CELL=${CELL:-"64:4:128"}
HEADS=${HEADS:-4}
LR=${LR:-1e-2}
SEEDS=${SEEDS-"1 2"}
OUT_ROOT=${OUT_ROOT:-out/recall_fastmax_norm}
TABLE_OUT=${TABLE_OUT:-results/recall/fastmax_norm}
PYTHON=${PYTHON:-python}

IFS=: read -r _ _ width <<< "$CELL"
if [ $((width % HEADS)) != 0 ]; then echo "width $width is not a multiple of HEADS=$HEADS" >&2; exit 2; fi
D=$((width / HEADS))
setting_args() {  # the --attention.* overrides of a setting name
  case "$1" in
    paper_D) echo "--attention.normalization=paper --attention.temperature=$D.0" ;;
    paper_sqrtD) echo "--attention.normalization=paper --attention.temperature=$($PYTHON -c "print($D ** 0.5)")" ;;
    none_8sqrtD) echo "--attention.normalization=none --attention.temperature=$($PYTHON -c "print(8 * $D ** 0.5)")" ;;
    max_norm_*) echo "--attention.normalization=max_norm --attention.lim=${1#max_norm_}" ;;
    *) return 1 ;;
  esac
}

failed=()
for variant in $VARIANTS; do
  args=$(setting_args "$variant") || { echo "unknown setting '$variant'; allowed: paper_D paper_sqrtD" \
    "none_8sqrtD max_norm_<lim>" >&2; exit 2; }
  for p in $PS; do
    echo "== setting $variant ($args), p = $p"
    # shellcheck disable=SC2086  # args is a list of options
    runs="$OUT_ROOT/$variant"  # recall.sh's own table of the setting goes to runs/table
    ATTENTIONS="fastmax$p" CELLS="$CELL" LRS="$LR" SEEDS="$SEEDS" OUT_ROOT="$runs" TABLE_OUT="$runs/table" \
      PYTHON="$PYTHON" scripts/sweeps/recall.sh --n_head="$HEADS" $args "$@" \
      || failed+=("${variant}_p$p")
  done
done

$PYTHON -m scripts.analysis.recall_table table "$OUT_ROOT" --label_params=normalization,temperature,lim \
  --out="$TABLE_OUT" || failed+=("recall_table")
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
