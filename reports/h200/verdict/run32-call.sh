#!/usr/bin/env bash
# Run 32: the Triton backend's kernels compiled ahead by the controller's warm-up (its prepare, spread over the
# cores the 8 workers leave: harness/running/warm_up.py), an A/B in one call: A with RMSNORM_CONFORMANCE_WARM_UP=0
# (no warm-up, as before), B as shipped; Triton cold each time, A, B, A, B, the first pair with
# benchmarks/compile_log_plugin.py (what the workers still built). Then the backends' prepare tests on the GPU
# (a prepared binary is a cache hit in another process), then the README's RL command (after a Triton run: its
# cache warm, as in run 30) with what is left of the call. From the installed wheel in an empty folder; from the
# tree's root on a fresh GPU machine, Liger-Kernel's wheel in .whl/ (carried):
#   OUT=<folder> bash reports/h200/verdict/run32-call.sh
set -u
R=${OUT:?OUT=folder}/run32
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
export PYTHONPYCACHEPREFIX=/tmp/rmsnorm-pycache PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null
cold() {  # name warm-up(0|1) [extra pytest args]
  local name=$1 warm=$2; shift 2
  rm -rf ~/.cache/torch_extensions ~/.triton/cache "${TMPDIR:-/tmp}/torchinductor_$(id -un)"
  local start=$(date +%s.%N)
  RMSNORM_CONFORMANCE_WARM_UP=$warm timeout -s INT 130 python3 benchmarks/harness_throughput.py --pyargs \
    --backend=triton --device=cuda --workers=8 --out "$R/$name.md" -- "$@" > "$R/$name.log" 2>&1
  echo "$name: exit $?, $(python3 -c "import time; print(round(time.time() - $start, 1))") s" | tee -a "$R/runs.log"
}
RMSNORM_COMPILE_LOG=$R/triton-cold-A-1-compile-log.jsonl cold triton-cold-A-1 0 -p compile_log_plugin
RMSNORM_COMPILE_LOG=$R/triton-cold-B-1-compile-log.jsonl cold triton-cold-B-1 1 -p compile_log_plugin
for v in A B; do
  PYTHONPATH=benchmarks python3 benchmarks/compile_log_plugin.py "$R/triton-cold-$v-1-compile-log.jsonl" \
    > "$R/triton-cold-$v-1-compile-log-summary.md"
  rm -f "$R/triton-cold-$v-1-compile-log.jsonl"
done
cold triton-cold-A-2 0
cold triton-cold-B-2 1
start=$(date +%s)
timeout -s INT 120 python3 -m pytest tests/test_triton_backend.py tests/test_warm_up.py -k "prepare or warm" -q \
  -p no:cacheprovider --tb=short -rs > "$R/prepare-tests.log" 2>&1
echo "prepare tests: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"
left=$(( 580 - ($(date +%s) - begin) ))
if (( left >= 150 )); then
  OUT=$R RL_LIMIT=$left bash benchmarks/h200_verdict.sh rl 2>&1 | tail -2 >> "$R/runs.log"
else
  echo "rl: not run, $left s left" >> "$R/runs.log"
fi
