#!/usr/bin/env bash
# The kernels' GPU evidence on one GPU in one go, inside a fixed time: build the CUDA library while the Triton
# GPU tests run, the CUDA GPU tests, the forward/fused-add tuning sweeps of both backends, then the benchmarks
# (the CUDA backend's own and benchmarks/bench.py, whose parity phase compares native on the CPU and the GPU,
# Triton and CUDA bit for bit).
#   OUT=dir DEADLINE=seconds [STAGES="..."] [APPLY_PICKS=1] bash benchmarks/h200_kernels_run.sh
# STAGES: any of build test_triton test_cuda cuda_tuning triton_tuning cuda_bench bench (default all). The
# benchmarks measure the landed launch configurations unless APPLY_PICKS=1, which runs them under this run's
# sweep picks instead. The package must be installed from a wheel of this tree, with the source folder
# rmsnorm_conformance/ moved away (it would shadow the installed package, whose subpackages live in other
# folders here):
#   python3 -m pip wheel --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install --no-deps /tmp/whl/*.whl
#   mv rmsnorm_conformance /tmp/
# Writes OUT/{cuda-tuning,triton-tuning,cuda-bench,bench}.json, OUT/bench.md and OUT/logs.tar.gz. Every stage
# gets at most what is left before DEADLINE (default 420 s), so the logs are always packed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to an output directory}
DEADLINE=${DEADLINE:-420}
STAGES=" ${STAGES:-build test_triton test_cuda cuda_tuning triton_tuning cuda_bench bench} "
LOGS="$OUT/logs"
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
export RMSNORM_CUDA_BUILD_DIR=${RMSNORM_CUDA_BUILD_DIR:-/tmp/rmsnorm-cuda-build}
start=$(date +%s)

note() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$LOGS/stages.log"; }
# stage NAME CAP_SECONDS COMMAND...: run with at most CAP seconds, and never past DEADLINE - 15.
stage() {
  local name=$1 cap=$2 left
  shift 2
  [[ $STAGES == *" $name "* ]] || return 0
  left=$(( DEADLINE - 15 - ($(date +%s) - start) ))
  (( left < cap )) && cap=$left
  if (( cap < 10 )); then note "$name: skipped, no time left"; return 0; fi
  note "$name: start (at most $cap s)"
  timeout -s INT -k 5 "$cap" "$@" > "$LOGS/$name.log" 2>&1
  note "$name: exit $?"
}

{ nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  nvcc --version | tail -1; date -u; } > "$LOGS/environment.log" 2>&1

# The build is CPU work: it runs beside the Triton GPU tests, or beside the Triton sweep when those are left out.
stage build 200 python3 -c 'from rmsnorm_conformance.backends.cuda_rmsnorm import _build; print(_build.build())' &
build=$!
stage test_triton 170 python3 -m pytest tests/test_triton_backend.py -n 6 -q -p no:cacheprovider
stage triton_tuning 80 python3 benchmarks/forward_tuning.py --backend triton --out "$OUT/triton-tuning.json"
wait $build
stage test_cuda 150 python3 -m pytest tests/test_cuda_backend.py -n 8 -q -p no:cacheprovider
stage cuda_tuning 90 python3 benchmarks/forward_tuning.py --backend cuda --out "$OUT/cuda-tuning.json"

tuning=()
if [ "${APPLY_PICKS:-0}" = 1 ]; then
  if [ -s "$OUT/cuda-tuning.json" ]; then
    export RMSNORM_CUDA_FORWARD_CONFIG RMSNORM_CUDA_FUSED_ADD_CONFIG
    RMSNORM_CUDA_FORWARD_CONFIG=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['best']['forward'] or '')" "$OUT/cuda-tuning.json")
    RMSNORM_CUDA_FUSED_ADD_CONFIG=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['best']['fused_add'] or '')" "$OUT/cuda-tuning.json")
    note "cuda picks: forward ${RMSNORM_CUDA_FORWARD_CONFIG:-default}, fused add ${RMSNORM_CUDA_FUSED_ADD_CONFIG:-default}"
  fi
  [ -s "$OUT/triton-tuning.json" ] && tuning=(--triton-tuning "$OUT/triton-tuning.json")
fi
stage cuda_bench 60 python3 -m rmsnorm_conformance.backends.cuda_rmsnorm --bench --json "$OUT/cuda-bench.json"
stage bench 90 python3 benchmarks/bench.py "${tuning[@]}" --backends native,triton,cuda --dtypes bfloat16 \
  --no-compile --out "$OUT/bench.json"

note "done"
tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOGS"
