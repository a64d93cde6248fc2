#!/usr/bin/env bash
# The FAST paper's Figure 2 (section 2.4) on Tiny Shakespeare, small: the character-level GPT with
# Fastmax p = 2 (configs/shakespeare_char_gpt.py configs/attention/fastmax2.py) trained four times,
# identical except for the attention dropout: none, and dropout_variant standard, 1d, quadratic at one rate
# (default 0.1: the paper states no rate in its text and Figure 2 is an image). Same seed, so the
# same initialisation and batches in every run. Sequential runs, each into $OUT/<variant>; then
# scripts/analysis/loss_curves.py draws training and validation loss of the four runs in one PNG
# (+ CSV) at $RESULTS.{png,csv}.
#
#   scripts/sweeps/shakespeare_dropout.sh --num_threads=2          # about 4 x 7-8 minutes on 2 CPU cores
#
# Arguments are passed to every train.py call (e.g. --num_threads=2, --max_iters=...).
# A variant whose run finished (marker file $OUT/<variant>/done) is skipped; one with a checkpoint
# but no marker is resumed (--init_from=resume); a log without a checkpoint (a run stopped before
# its first evaluation) is removed and the run starts again.
#
# Environment:
#   RATE      attention dropout rate of the three dropout runs (default 0.1)
#   VARIANTS  default "none standard 1d quadratic" ("none" = attention dropout 0)
#   OUT       parent of the run directories (default out/shakespeare_dropout)
#   RESULTS   output path of the plot and CSV without extension (default results/shakespeare_dropout/shakespeare_dropout)
#   CONFIGS   config layers, space-separated (default configs/shakespeare_char_gpt.py configs/attention/fastmax2.py)
#   PYTHON    interpreter (default python)
#   DRY_RUN=1 print the commands instead of running them
set -euo pipefail
cd "$(dirname "$0")/../.."

RATE=${RATE:-0.1}
VARIANTS=${VARIANTS:-"none standard 1d quadratic"}
OUT=${OUT:-out/shakespeare_dropout}
RESULTS=${RESULTS:-results/shakespeare_dropout/shakespeare_dropout}
read -r -a CONFIGS <<< "${CONFIGS:-configs/shakespeare_char_gpt.py configs/attention/fastmax2.py}"
PYTHON=${PYTHON:-python}
DRY_RUN=${DRY_RUN:-0}

run() {
    echo "+ $*"
    if [ "$DRY_RUN" != 1 ]; then "$@"; fi
}

dirs=()
labels=()
for variant in $VARIANTS; do
    dir="$OUT/$variant"
    case "$variant" in
        none) params=(--attention.dropout=0.0); label="no dropout" ;;
        standard|1d|quadratic) params=(--attention.dropout="$RATE" --attention.dropout_variant="$variant")
                               label="$variant $RATE" ;;
        *) echo "error: unknown variant '$variant' (allowed: none standard 1d quadratic)" >&2; exit 2 ;;
    esac
    dirs+=("$dir")
    labels+=("$label")
    if [ -e "$dir/done" ]; then
        echo "$dir: finished earlier (remove $dir/done to run it again)"
        continue
    fi
    resume=()
    if [ -e "$dir/ckpt.pt" ]; then
        resume=(--init_from=resume)
        echo "$dir: resuming from its checkpoint"
    elif [ -e "$dir/log.jsonl" ]; then
        echo "$dir: removing the log of a run that stopped before its first checkpoint"
        run rm -f "$dir/log.jsonl"
    fi
    run "$PYTHON" train.py "${CONFIGS[@]}" --out_dir="$dir" "${params[@]}" "${resume[@]}" "$@"
    if [ "$DRY_RUN" != 1 ]; then date > "$dir/done"; fi
done

label_list=$(IFS=,; echo "${labels[*]}")
run "$PYTHON" -m scripts.analysis.loss_curves "${dirs[@]}" --labels="$label_list" --out="$RESULTS" \
    --title="Fastmax p = 2, Tiny Shakespeare (characters): attention dropout variants (paper Fig. 2)"
