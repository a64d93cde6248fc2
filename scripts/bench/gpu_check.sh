#!/usr/bin/env bash
# The GPU check of issue 56 (docs/gpu.md): two unattended commands of under 5 minutes each on a GPU
# machine whose Python already has torch and triton (nothing is pip-installed; the repository runs
# from this checkout on PYTHONPATH):
#   bash scripts/bench/gpu_check.sh tests     the environment report, then the GPU tests (pytest -m gpu) in two
#                                             time-boxed runs (150 s, then the Triton kernels' 95 s), the
#                                             kernels compiled in parallel processes meanwhile
#   bash scripts/bench/gpu_check.sh bench     the benchmark (python -m scripts.bench.gpu bench: the kernels
#                                             compiled in parallel, G0 accuracy, the timings, the aims)
#   bash scripts/bench/gpu_check.sh dry_run   the benchmark at tiny sizes on a CPU (TRITON_INTERPRET=1, no FLA;
#                                             tests/scripts/test_gpu_check.py runs it)
# Further arguments go to pytest (tests) or to the benchmark (bench, dry_run).
# Packages the machine lacks come from wheels/ (scripts/bench/fetch_gpu_wheels.sh), unpacked into .gpu_site/
# (scripts/bench/gpu_wheels.py). Outputs: one flat folder, $GPU_CHECK_OUT, else $OUT/<date>_<gpu> when $OUT is
# set (the device tool brings $OUT back), else results/gpu/<date>_<gpu>. GPU_CHECK_COMMIT names the commit in
# the manifest when the checkout has no .git.
set -uo pipefail
cd "$(dirname "$0")/../.."
command=${1:-}
shift || true
python=${PYTHON:-$(command -v python || command -v python3)}
export HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONUNBUFFERED=1
case "$command" in
  tests|bench)  # the kernels compiled, not interpreted; missing packages from wheels/
    unset TRITON_INTERPRET
    export PYTHONPATH="$PWD:$PWD/.gpu_site${PYTHONPATH:+:$PYTHONPATH}"
    "$python" -m scripts.bench.gpu_wheels --wheels wheels --site .gpu_site || exit 1
    ;;
  dry_run)  # this machine's own packages, no FLA
    export TRITON_INTERPRET=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    ;;
  *) echo "error: usage: bash scripts/bench/gpu_check.sh tests|bench|dry_run [arguments]" >&2; exit 2 ;;
esac
if [ -n "${GPU_CHECK_OUT:-}" ]; then
  out=$GPU_CHECK_OUT
elif [ -n "${OUT:-}" ]; then
  out="$OUT/$("$python" -m scripts.bench.gpu folder --name_only)"
else
  out=$("$python" -m scripts.bench.gpu folder)
fi
mkdir -p "$out" || exit 1
case "$command" in
  tests)
    # Two pytest runs, each with its own time box, so that slow Triton compilation cannot starve the
    # rest: the attention and training tests (the training runs overlap with the attention tests),
    # then the Triton kernel tests. Meanwhile, in the background (at most 120 s), every kernel the
    # Triton tests launch is compiled into Triton's cache in parallel processes (scripts.bench.gpu
    # compile; its log is appended to tests.log before the Triton tests, whose fixtures then load
    # the kernels, or compile what is missing). Every test's outcome is written as it happens
    # (tests_progress.jsonl, GPU_TESTS_PROGRESS in tests/gpu/conftest.py); at the time box pytest
    # gets SIGINT, so it still prints its summary; faulthandler prints where a test that runs over
    # a minute is stuck.
    export GPU_TESTS_PROGRESS="$out/tests_progress.jsonl"
    rm -f "$GPU_TESTS_PROGRESS"
    gpu_tests() {  # gpu_tests <seconds> <test files...>
      local seconds=$1
      shift
      timeout -s INT -k 15 "$seconds" "$python" -m pytest -m gpu -v -rfE -p no:cacheprovider \
        -o faulthandler_timeout=60 "${pytest_args[@]}" "$@"
    }
    pytest_args=("$@")
    compile_log=$(mktemp)
    { "$python" -m scripts.bench.gpu env
      timeout -k 10 120 "$python" -m scripts.bench.gpu compile > "$compile_log" 2>&1 &
      compiling=$!
      gpu_tests 150 tests/gpu/test_attention_cuda.py tests/gpu/test_train_cuda.py
      first=$?
      wait "$compiling"
      echo "== python -m scripts.bench.gpu compile: status $?"
      cat "$compile_log"
      gpu_tests 95 tests/gpu/test_fastmax_triton_cuda.py
      second=$?
      exit $(( first > second ? first : second ))
    } 2>&1 | tee "$out/tests.log"
    status=${PIPESTATUS[0]}
    rm -f "$compile_log"
    "$python" -m scripts.bench.gpu record_tests --out "$out" > /dev/null
    ;;
  bench)
    timeout 280 "$python" -m scripts.bench.gpu bench --out "$out" "$@"
    status=$?
    ;;
  dry_run)
    "$python" -m scripts.bench.gpu bench --dry_run --out "$out" "$@"
    status=$?
    ;;
esac
echo "gpu_check $command: status $status; outputs in $out"
exit "$status"
