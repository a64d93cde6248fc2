#!/usr/bin/env bash
# Fill wheels/ (git-ignored) with the packages a bare GPU machine may lack for the GPU check
# (docs/gpu.md): scripts/bench/gpu_check.sh unpacks the ones that do not import there
# (scripts/bench/gpu_wheels.py), and the device tool carries the folder when `carry` names it.
# Exact pins, downloaded with `pip download --no-deps` (no dependency resolution: the list is complete):
#   fla-core 0.6.0 (needs torch >= 2.7 and triton >= 3.3: fits torch 2.11 / triton 3.6) and its
#   imports einops and packaging; pytest and its dependencies (exceptiongroup and tomli for
#   Python 3.10); tqdm; numpy for the Pythons of NUMPY_PYTHONS (default "3.11 3.12", about 16 MB
#   each; manylinux x86_64). About 37 MB in all.
#   bash scripts/bench/fetch_gpu_wheels.sh [folder]        (default: wheels)
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-wheels}
python=${PYTHON:-python}
mkdir -p "$dest"
pure=(fla-core==0.6.0 einops==0.8.2 packaging==26.4 pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 pygments==2.21.0
      exceptiongroup==1.3.2 tomli==2.5.0 tqdm==4.70.1)
# pure-Python wheels (py3-none-any) whatever this machine's Python: tomli also has compiled ones
"$python" -m pip download --quiet --no-deps --only-binary=:all: --platform any --implementation py --abi none \
  --python-version 3.10 --dest "$dest" "${pure[@]}"
for version in ${NUMPY_PYTHONS:-3.11 3.12}; do
  "$python" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
    --python-version "$version" --implementation cp --dest "$dest" numpy==2.2.6
done
ls -1 "$dest"
du -sh "$dest"
