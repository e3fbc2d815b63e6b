#!/usr/bin/env bash
# Run 22: where a cold Triton run's compile time goes (benchmarks/compile_log_plugin.py: every Triton binary built or
# loaded, and Dynamo's compile time, per worker and per test), and what an xdist worker's exit without the
# interpreter's teardown saves at the end of a run (harness/plugin/worker_exit.py; RMSNORM_CONFORMANCE_FAST_EXIT=0
# turns it off), Triton cold twice each way. From the wheel in an empty folder; from the tree's root
# on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run22-call.sh
set -u
R=${OUT:?OUT=folder}/run22
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
export PYTHONPYCACHEPREFIX=/tmp/rmsnorm-pycache PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null
cold() {  # name backend [extra pytest args]
  local name=$1 backend=$2; shift 2
  rm -rf ~/.cache/torch_extensions ~/.triton/cache "${TMPDIR:-/tmp}/torchinductor_$(id -un)"
  local start=$(date +%s.%N)
  timeout -s INT 150 python3 benchmarks/harness_throughput.py --pyargs --backend="$backend" --device=cuda --workers=8 \
    --out "$R/$name.md" -- "$@" > "$R/$name.log" 2>&1
  echo "$name: exit $?, $(python3 -c "import time; print(round(time.time() - $start, 1))") s" | tee -a "$R/runs.txt"
}
RMSNORM_COMPILE_LOG=$R/triton-cold-compile-log.jsonl cold triton-cold-compile-log triton -p compile_log_plugin
PYTHONPATH=benchmarks python3 benchmarks/compile_log_plugin.py "$R/triton-cold-compile-log.jsonl" > "$R/triton-cold-compile-log-summary.md"
gzip -f "$R/triton-cold-compile-log.jsonl"
RMSNORM_CONFORMANCE_FAST_EXIT=0 cold triton-cold-teardown-0 triton
cold triton-cold-fast-exit-0 triton
RMSNORM_CONFORMANCE_FAST_EXIT=0 cold triton-cold-teardown-1 triton
cold triton-cold-fast-exit-1 triton
