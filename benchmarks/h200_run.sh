#!/usr/bin/env bash
# The GPU evidence in reports/h200/, in one go: conformance of the project's backends with each pytest-xdist
# worker on its own GPU, the third-party adapters, and the bandwidth benchmark against a device copy.
#   OUT=reports/h200 bash benchmarks/h200_run.sh [stage ...]      (stages: suites gate modes bench adapters zoo faults
#   bounds offsets; default suites bench adapters)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-reports/h200}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(pwd)
# The suites run from an empty folder through the installed package, as a kernel author runs them: in this
# tree the folder rmsnorm_conformance/ would shadow the installed package (whose parts live in other folders).
# Install it first: python3 -m pip wheel --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install
# --no-deps --force-reinstall /tmp/whl/*.whl
SCRATCH=$(mktemp -d)
export PYTHONUNBUFFERED=1
stages=${*:-suites bench adapters}
workers=$(( $(python3 -c 'import torch; print(torch.cuda.device_count())') * 2 ))

nvidia-smi -L
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'

for stage in $stages; do
  start=$(date +%s)
  cd "$SCRATCH"
  case $stage in
    suites)
      python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda --device=cuda \
        -n "$workers" -q -p no:cacheprovider --sweep=ci \
        --report="$OUT/conformance.md" --report="$OUT/conformance.json" ;;
    gate)
      # The RL question on one GPU: the project's kernels and Liger, pairwise bitwise parity (native against
      # itself across devices too), the pick-a-kernel section with the committed benchmark, pictures beside it.
      timeout -s INT "${GATE_LIMIT:-420}" python3 -m pytest --pyargs rmsnorm_conformance.suites \
        --backend=native,triton,cuda,liger --device=cuda -n "${GATE_WORKERS:-8}" -q -p no:cacheprovider --sweep=ci \
        --require-parity=triton:cuda --require-parity=native:triton --require-parity=native:cuda \
        --require-parity=native@cpu:native@cuda --bench-json="$ROOT/reports/gpu/bench.json" \
        --report="$OUT/gate.md" --report="$OUT/gate.json" ${GATE_ARGS:-} ;;
    modes)
      # Eager against torch.compile and CUDA-graph replay, bit for bit, for the project's GPU kernels.
      timeout -s INT "${MODES_LIMIT:-150}" python3 -m pytest --pyargs rmsnorm_conformance.suites \
        --backend=triton,cuda --device=cuda -n "${GATE_WORKERS:-8}" -q -p no:cacheprovider --sweep=ci \
        --modes=compile,cudagraph --rule=parity.bitwise --report="$OUT/modes.md" --report="$OUT/modes.json" ;;
    adapters)
      # SIGINT, not SIGTERM, on timeout: pytest then still writes the report, marked as interrupted.
      adapters=torch_rms_norm,torch_rms_norm_fp32,torch_compile,liger
      timeout -s INT 240 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend="$adapters" \
        --device=cuda -n "$workers" -q -p no:cacheprovider --sweep=ci \
        --report="$OUT/adapters.md" --report="$OUT/adapters.json" ;;
    bench)
      python3 "$ROOT/benchmarks/bench.py" --out "$OUT/bench.json" ;;
    zoo)
      cd "$ROOT" && python3 benchmarks/zoo_on_device.py --device cuda --jobs 8 --out "$OUT/zoo.md" ;;
    faults|bounds|offsets)
      # The planted faults of zoo/faults.py, from the installed package.
      F=rmsnorm_conformance.zoo.faults
      case $stage in
        faults)
          # One kernel's device fault fails that kernel alone: a Triton store that fires a device-side assert above
          # 300 rows, beside native and Triton, on four workers. Each fault ends its worker after the test's report is
          # out and a fresh worker runs the rest (hence the restarts allowed). Expected: triton_device_assert FAIL
          # with semantics.device_fault only; native and Triton PASS with no check failed.
          timeout -s INT "${FAULTS_LIMIT:-560}" python3 -m pytest --pyargs rmsnorm_conformance.suites \
            --backend=native,triton,$F:TritonDeviceAssert --device=cuda -n 4 --max-worker-restart=1000 \
            -q -p no:cacheprovider --sweep=ci --report="$OUT/faults.md" --report="$OUT/faults.json" ${FAULTS_ARGS:-} ;;
        bounds)
          # Guard zones on the GPU: a fused add that writes one row past its output view (semantics.bounds), and a
          # kernel that asks for a terabyte above 4096 rows (its own check fails; native beside it passes).
          timeout -s INT "${BOUNDS_LIMIT:-560}" python3 -m pytest --pyargs rmsnorm_conformance.suites \
            --backend=native,triton,$F:WritesRowPastOutput,$F:AsksForATerabyte --device=cuda \
            -n 4 -q -p no:cacheprovider --sweep=ci --rule=semantics.bounds,semantics.device_fault,axis_a.batch_size \
            -k "not past_int32" --report="$OUT/bounds.md" --report="$OUT/bounds.json" ;;
        offsets)
          # 32-bit offsets: the last rows of 524,304 x 4096 and of a strided view whose last rows start past 2^31
          # elements, bf16, in one process (about 64 GiB at the peak); native, Triton, and a kernel whose row
          # offset wraps at 2^31 (caught by axis_a.batch_size, axis_a.strided_rows and axis_b.output).
          timeout -s INT "${OFFSETS_LIMIT:-560}" python3 -m pytest --pyargs rmsnorm_conformance.suites \
            --backend=native,triton,$F:Int32OffsetWrap --device=cuda --dtype=bfloat16 -q \
            -p no:cacheprovider --sweep=ci -k past_int32 --report="$OUT/offsets.md" --report="$OUT/offsets.json" ;;
      esac ;;
  esac
  echo "stage $stage: exit $?, $(( $(date +%s) - start )) s"
done
