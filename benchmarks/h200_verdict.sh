#!/usr/bin/env bash
# Time to verdict on one GPU (the target: one backend, one H200, -n 8, default sweep, <= 60 s from `pytest` to
# the verdict, cold start included), from the built wheel in an empty folder, as a kernel author runs it:
#   OUT=reports/h200/verdict bash benchmarks/h200_verdict.sh [stage ...]
# stages: triton cuda native (one backend each, default sweep, -n 8), cuda-cold (cuda after the extension's build
# cache is cleared: the first run on a machine), rl (README's RL command: native, Triton,
# CUDA and Liger-Kernel, two parity pairs, --modes=compile,cudagraph, -n 8; at most RL_LIMIT seconds), profile
# (PROFILE_SUITE's tests matching PROFILE_K, bf16, in one process under cProfile), modes (a kernel whose
# torch.compile path reduces in another order, under the default gate). Wheels in .whl/ (Liger-Kernel) are
# installed beside the package first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-reports/h200/verdict}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1
WORKERS=${VERDICT_WORKERS:-8}
# The package as a kernel author has it: installed from a wheel of this tree where it is not installed yet (a bare
# GPU machine); an existing install (pip install -e . in a clone) is left as it is. The runs start in empty folders,
# where this tree's rmsnorm_conformance/ folder cannot shadow the package.
if ! (cd "$(mktemp -d)" && python3 -c 'import rmsnorm_conformance.suites') 2>/dev/null; then
  python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . \
    && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl/*.whl
fi
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
T=benchmarks/harness_throughput.py
for stage in ${*:-triton cuda native profile modes}; do
  start=$(date +%s)
  case $stage in
    cuda-cold)
      rm -rf ~/.cache/torch_extensions
      timeout -s INT "${VERDICT_LIMIT:-300}" python3 $T --pyargs --backend=cuda --device=cuda \
        --workers="$WORKERS" --out "$OUT/cuda-cold${RMSNORM_CONFORMANCE_WARM_UP:+-warm-up-$RMSNORM_CONFORMANCE_WARM_UP}.md" ;;
    triton|cuda|native)
      timeout -s INT "${VERDICT_LIMIT:-300}" python3 $T --pyargs --backend=$stage --device=cuda \
        --workers="$WORKERS" --out "$OUT/$stage.md" ;;
    rl)
      # The run's own --deadline ends it with a report (INCOMPLETE, naming what did not run) before the timeout.
      timeout -s INT "${RL_LIMIT:-300}" python3 $T --pyargs --backend=native,triton,cuda,liger --device=cuda \
        --workers="$WORKERS" --out "$OUT/rl.md" -- --require-parity=triton:cuda \
        --require-parity=native@cpu:native@cuda --modes=compile,cudagraph --deadline=$(( ${RL_LIMIT:-300} - 40 )) ;;
    profile)
      timeout -s INT "${VERDICT_LIMIT:-300}" python3 $T --pyargs --backend=triton --device=cuda --breakdown \
        --suite="${PROFILE_SUITE:-test_variants}" --out "$OUT/profile.md" -- -k "${PROFILE_K:-fused_add}" \
        --dtype=bfloat16 ;;
    modes)
      # Expected: FAIL on axis_a.execution_mode, with no --modes given.
      (cd "$(mktemp -d)" && timeout -s INT "${VERDICT_LIMIT:-300}" python3 -m pytest --pyargs \
        rmsnorm_conformance.suites --backend=rmsnorm_conformance.zoo.defects:CompiledPathReduction --device=cuda \
        -n "$WORKERS" -q -p no:cacheprovider --report="$OUT/modes.md" --report="$OUT/modes.json" | tail -15) ;;
  esac
  echo "stage $stage: exit $?, $(( $(date +%s) - start )) s"
done
