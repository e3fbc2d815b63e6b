#!/usr/bin/env bash
# Run 28: where a worker's time goes under -n 8. Run 27 found a host-device round trip no slower with eight
# processes on the GPU than with one (17.8 against 20.1 us), yet Triton's bf16 threshold plans took 2 to 11 times as
# long a test under -n 8 as alone. Each process of these runs records, per test, its wall time beside the CPU time of
# its own thread and of the process, and a cProfile of its session (benchmarks/worker_profile_plugin.py). In one call:
# Triton cold (the caches' warm-up; its wall time is this machine's cold figure), then, caches warm, the whole Triton
# run under -n 8, and the bf16 threshold plans under -n 8 and alone. From the wheel in an empty folder. From the
# tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run28-call.sh
set -u
R=${OUT:?OUT=folder}/run28
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
OUT=$R VERDICT_LIMIT=150 bash benchmarks/h200_verdict.sh bytecode triton-cold 2>&1 | tail -2 >> "$R/runs.log"
export PYTHONPYCACHEPREFIX="${TMPDIR:-/tmp}/rmsnorm-pycache" && unset PYTHONDONTWRITEBYTECODE
export PYTHONPATH=$PWD/benchmarks
W=$(mktemp -d) && cd "$W" || exit 1
profiled() {  # name, pytest arguments...
  local name=$1; shift
  TIMEFORMAT="$name: wall %R s, user %U s, sys %S s"
  { time RMSNORM_WORKER_PROFILE=$R/$name timeout 200 python3 -m pytest -p worker_profile_plugin --pyargs \
      rmsnorm_conformance.suites --backend=triton --device=cuda -p no:cacheprovider -q "$@" > "$R/$name.log" 2>&1; } \
    2>> "$R/runs.log"
  python3 "$PYTHONPATH/worker_profile_plugin.py" "$R/$name" > "$R/$name-summary.md" 2>&1
  rm -f "$R/$name"/*.prof
}
profiled all-n8 -n 8
thresholds=(--dtype=bfloat16 -k _at_thresholds --max-elements=268435456)
profiled thresholds-n8 -n 8 "${thresholds[@]}"
profiled thresholds-n0 "${thresholds[@]}"
