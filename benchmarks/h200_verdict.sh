#!/usr/bin/env bash
# Time to verdict on one GPU (the target: one backend, one H200, -n 8, default sweep, <= 60 s from `pytest` to
# the verdict, cold start included), from the built wheel in an empty folder, as a kernel author runs it:
#   OUT=reports/h200/verdict bash benchmarks/h200_verdict.sh [stage ...]
# stages:
#   triton, cuda, native      one backend each, default sweep, -n 8
#   cuda-cold, triton-cold    that backend after the extension's build cache, Inductor's and Triton's caches are
#                             cleared: a machine's first run
#   rl                        README's RL command: native, Triton, CUDA and Liger-Kernel, two parity pairs,
#                             --modes=compile,cudagraph, -n RL_WORKERS (16: one a core of the H200 machine; runs
#                             before 38 used 8); at most RL_LIMIT seconds
#   profile                   PROFILE_SUITE's tests matching PROFILE_K, bf16, in one process under cProfile
#   modes                     a kernel whose torch.compile path reduces in another order, under the default gate
#   rl-start                  cProfile of the RL command's controller with every test deselected: its own start
#                             and its workers' collection
#   compile-cost              one static torch.compile of CUDA's and Triton's forward a shape (compile_cost.py)
#   bytecode                  the stages after it run with site-packages' bytecode compiled once into a cache, as
#                             pip install leaves it
# VERDICT_TAG is added to each stage's file names (an A/B in one call). Wheels in .whl/ (Liger-Kernel) are installed
# beside the package first.
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
    cuda-cold|triton-cold)
      rm -rf ~/.cache/torch_extensions ~/.triton/cache "${TMPDIR:-/tmp}/torchinductor_$(id -un)"
      timeout -s INT "${VERDICT_LIMIT:-300}" python3 $T --pyargs --backend="${stage%-cold}" --device=cuda \
        --workers="$WORKERS" \
        --out "$OUT/$stage${RMSNORM_CONFORMANCE_WARM_UP:+-warm-up-$RMSNORM_CONFORMANCE_WARM_UP}${VERDICT_TAG:-}.md" ;;
    triton|cuda|native)
      timeout -s INT "${VERDICT_LIMIT:-300}" python3 $T --pyargs --backend=$stage --device=cuda \
        --workers="$WORKERS" --out "$OUT/$stage${VERDICT_TAG:-}.md" ;;
    rl-start)
      (cd "$(mktemp -d)" && timeout -s INT "${VERDICT_LIMIT:-300}" python3 -X importtime -m cProfile \
        -o "$OUT/rl-start${VERDICT_TAG:-}.prof" -m pytest --pyargs rmsnorm_conformance.suites \
        --backend=native,triton,cuda,liger --device=cuda -n "$WORKERS" -p no:cacheprovider -q \
        --require-parity=triton:cuda --require-parity=native@cpu:native@cuda --modes=compile,cudagraph \
        -k no_test_has_this_name 2> "$OUT/rl-start-importtime${VERDICT_TAG:-}.txt" | tail -3)
      python3 -c "import pstats, sys; s = pstats.Stats(sys.argv[1]); s.sort_stats('cumulative').print_stats(60)" \
        "$OUT/rl-start${VERDICT_TAG:-}.prof" > "$OUT/rl-start${VERDICT_TAG:-}.txt" ;;
    bytecode)
      # What pip install leaves beside every module and this machine's Python environment lacks (and, with
      # PYTHONDONTWRITEBYTECODE, never writes): the bytecode of site-packages, compiled once into a cache here,
      # so that the stages after this one start as on a machine where torch was installed with pip.
      export PYTHONPYCACHEPREFIX="${TMPDIR:-/tmp}/rmsnorm-pycache"
      unset PYTHONDONTWRITEBYTECODE
      python3 -m compileall -q -j 0 "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
        ${PYTHONPATH:+"${PYTHONPATH%%:*}"} > /dev/null
      VERDICT_TAG="${VERDICT_TAG:-}-bytecode" ;;
    compile-cost)
      for backend in cuda triton; do
        rm -rf ~/.triton/cache "${TMPDIR:-/tmp}/torchinductor_$(id -un)"
        (cd "$(mktemp -d)" && timeout -s INT "${VERDICT_LIMIT:-300}" python3 "$OLDPWD/benchmarks/compile_cost.py" \
          --backend=$backend --device=cuda --profile) > "$OUT/compile-cost-$backend${VERDICT_TAG:-}.txt" 2>&1
      done ;;
    rl)
      # The run's own --deadline ends it with a report (INCOMPLETE, naming what did not run) before the timeout.
      timeout -s INT "${RL_LIMIT:-300}" python3 $T --pyargs --backend=native,triton,cuda,liger --device=cuda \
        --workers="${RL_WORKERS:-16}" --out "$OUT/rl${VERDICT_TAG:-}.md" -- --require-parity=triton:cuda \
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
