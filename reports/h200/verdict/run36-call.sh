#!/usr/bin/env bash
# Run 36: the tree after run 35 (the first-call check's fresh processes forked from a torch server, on a GPU for
# the first time; the weight-mode test as fixed after run 35). From the installed wheel, in order, each while the
# call has time for it:
#   1. the Triton backend's, the warm-up's and the torch server's tests on the GPU (every entry point bitwise
#      native's, the weight modes' one binary, prepare's cache hit in another process, the server's children);
#   1b. the first-call tests under Triton on the GPU, forked (each child initialises CUDA itself, the server never
#      touched it) and with RMSNORM_FRESH_INTERPRETER=1 (the A/B);
#   2. Triton cold twice (every cache cleared; the warm-up prepares), the first with its compile log kept whole;
#   3. the README's RL command (Triton's cache warm from 2, as in runs 30, 32 and 34).
# From the tree's root on a fresh GPU machine, Liger-Kernel's wheel in .whl/ (carried):
#   OUT=<folder> bash reports/h200/verdict/run36-call.sh
set -u
R=${OUT:?OUT=folder}/run36
mkdir -p "$R"
begin=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - begin) )); }
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . > /dev/null 2>&1 \
  && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
export PYTHONPYCACHEPREFIX=/tmp/rmsnorm-pycache PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null
echo "installed: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
start=$(date +%s)
timeout -s INT 90 python3 -m pytest tests/test_triton_backend.py tests/test_warm_up.py tests/test_torch_server.py \
  -n 8 -q -p no:cacheprovider \
  --tb=short -rs --junitxml="$R/gpu-tests.junit.xml" > "$R/gpu-tests.log" 2>&1
echo "gpu tests: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"
for fresh in 0 1; do  # the first calls alone: forked from the torch server (0), a new interpreter each (1)
  start=$(date +%s.%N)
  RMSNORM_FRESH_INTERPRETER=$fresh timeout -s INT 60 python3 -m pytest --pyargs rmsnorm_conformance.suites \
    --backend=triton --device=cuda -k first_call -n 8 -q -p no:cacheprovider --durations=20 \
    > "$R/first-call-fresh-interpreter-$fresh.log" 2>&1
  echo "first calls, RMSNORM_FRESH_INTERPRETER=$fresh: exit $?, $(python3 -c "import time; print(round(time.time() - $start, 1))") s" >> "$R/runs.log"
done
cold() {  # name [extra pytest args]
  local name=$1; shift
  rm -rf ~/.cache/torch_extensions ~/.triton/cache "${TMPDIR:-/tmp}/torchinductor_$(id -un)"
  local start=$(date +%s.%N)
  timeout -s INT 130 python3 benchmarks/harness_throughput.py --pyargs \
    --backend=triton --device=cuda --workers=8 --out "$R/$name.md" -- "$@" > "$R/$name.log" 2>&1
  echo "$name: exit $?, $(python3 -c "import time; print(round(time.time() - $start, 1))") s" >> "$R/runs.log"
}
RMSNORM_COMPILE_LOG=$R/triton-cold-1-compile-log.jsonl cold triton-cold-1 -p compile_log_plugin
PYTHONPATH=benchmarks python3 benchmarks/compile_log_plugin.py "$R/triton-cold-1-compile-log.jsonl" \
  > "$R/triton-cold-1-compile-log-summary.md" 2>&1
gzip -f "$R/triton-cold-1-compile-log.jsonl"
cold triton-cold-2
RL=$(( $(left) - 10 )); (( RL > 260 )) && RL=260
if (( RL >= 150 )); then
  OUT=$R RL_LIMIT=$RL bash benchmarks/h200_verdict.sh rl 2>&1 | tail -2 >> "$R/runs.log"
else
  echo "rl: not run, $(left) s left" >> "$R/runs.log"
fi
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
