#!/usr/bin/env bash
# The kernels' GPU evidence on one GPU in one go, inside a fixed time: build the CUDA library, the backends' GPU
# tests (eager, torch.compile and CUDA-graph replay bitwise equal included), a sweep of the CUDA launch
# configurations, an Nsight Compute profile of one launch of each CUDA kernel at the target shapes, then
# benchmarks/bench.py (forward, fused add in and out of place, backward, latency, and the parity phase that
# compares native on the CPU and the GPU, Triton and CUDA bit for bit), each bandwidth against a copy in the
# same run.
#   OUT=dir DEADLINE=seconds [STAGES="..."] [BENCH_ARGS="..."] [SWEEP_ARGS="..."] bash benchmarks/h200_kernels_run.sh
# STAGES: any of build test_cuda test_triton sweep profile bench (default all). The build stage starts from an
# empty RMSNORM_CUDA_BUILD_DIR on a fresh machine: its logged time is the cold build. The profile and the benchmark
# run under the sweep's picks (RMSNORM_CUDA_*_CONFIG) unless APPLY_PICKS=0. Wheels in .whl/ (Liger-Kernel,
# say) are installed first, for bench.py's peers. The package must be installed from a wheel of this tree, with
# the source folder rmsnorm_conformance/ moved away (it would shadow the installed package, whose subpackages
# live in other folders here):
#   python3 -m pip wheel --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install --no-deps /tmp/whl/*.whl
#   mv rmsnorm_conformance /tmp/
# Writes OUT/{cuda-sweep,bench}.json, OUT/bench.md, OUT/profile.txt and OUT/logs.tar.gz. Every stage gets at
# most what is left before DEADLINE (default 420 s), so the logs are always packed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to an output directory}
DEADLINE=${DEADLINE:-420}
STAGES=" ${STAGES:-build test_cuda test_triton sweep profile bench} "
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
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    >> "$LOGS/environment.log" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

stage build 200 python3 -c 'from rmsnorm_conformance.backends.cuda_rmsnorm import _build; print(_build.build())'
stage test_cuda 150 python3 -m pytest tests/test_cuda_backend.py -n 8 -q -p no:cacheprovider --tb=short
stage test_triton 150 python3 -m pytest tests/test_triton_backend.py -n 8 -q -p no:cacheprovider --tb=short
# shellcheck disable=SC2086
stage sweep 200 python3 benchmarks/kernel_sweep.py --out "$OUT/cuda-sweep.json" ${SWEEP_ARGS:-}
# The sweep's picks for what follows (APPLY_PICKS=0: the code's defaults). No configuration changes a bit.
if [ "${APPLY_PICKS:-1}" = 1 ] && [ -s "$OUT/cuda-sweep.json" ]; then
  eval "$(python3 benchmarks/kernel_sweep.py --picks "$OUT/cuda-sweep.json")"
  note "cuda picks: forward ${RMSNORM_CUDA_FORWARD_CONFIG:-default}, fused add ${RMSNORM_CUDA_FUSED_ADD_CONFIG:-default}, backward ${RMSNORM_CUDA_BACKWARD_CONFIG:-default}"
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  stage profile 120 "$NCU" --set full --nvtx --nvtx-include "prof/" --clock-control none -f -o "$OUT/profile" \
    python3 benchmarks/profile_kernels.py
  [ -f "$OUT/profile.ncu-rep" ] && "$NCU" --import "$OUT/profile.ncu-rep" --page details > "$OUT/profile.txt" 2>&1 \
    && rm -f "$OUT/profile.ncu-rep"
fi
# shellcheck disable=SC2086
stage bench 400 python3 benchmarks/bench.py --backends native,triton,cuda,liger --dtypes bfloat16,float16 \
  --no-compile --out "$OUT/bench.json" ${BENCH_ARGS:-}

note "done"
tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOGS"
