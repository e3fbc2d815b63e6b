#!/usr/bin/env bash
# Run 45: the tree whose Triton dw passes take one tile of _DW_PASS rows each on the GPU (one dw binary a dim class
# and dtype, not one a power of two of partial rows: run 44 found 61 built in a cold run's workers, none prepared).
# On a fresh machine, in order:
#   1. Triton cold, the machine's first run (as run 43), its processes sampled every 15 s (ps.log);
#   2. Triton cold again, every cache cleared, with the compile log (what the workers built, by kernel);
#   3. the Triton backend's and the warm-up's tests on the GPU (every entry point bitwise native's, dw included).
# From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run45/call.sh
set -u
R=${OUT:?OUT=folder}/run45
mkdir -p "$R"
begin=$(date +%s)
(while sleep 15; do date -u +%T; ps -eo pid,ppid,etimes,pcpu,rss,args --sort=-pcpu | cut -c1-200 | head -30; done) \
  > "$R/ps.log" 2>&1 &
sampler=$!
OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-1 bash benchmarks/h200_verdict.sh bytecode triton-cold > "$R/runs.log" 2>&1
kill $sampler
export PYTHONPYCACHEPREFIX="${TMPDIR:-/tmp}/rmsnorm-pycache" PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
rm -rf ~/.cache/torch_extensions ~/.triton/cache "${TMPDIR:-/tmp}/torchinductor_$(id -un)"
start=$(date +%s)
RMSNORM_COMPILE_LOG=$R/triton-cold-2-compile-log.jsonl timeout -s INT 150 python3 benchmarks/harness_throughput.py \
  --pyargs --backend=triton --device=cuda --workers=8 --out "$R/triton-cold-2.md" -- -p compile_log_plugin \
  > "$R/triton-cold-2.log" 2>&1
echo "triton-cold-2: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"
PYTHONPATH=benchmarks python3 benchmarks/compile_log_plugin.py "$R/triton-cold-2-compile-log.jsonl" \
  > "$R/triton-cold-2-compile-log-summary.md" 2>&1
rm -f "$R/triton-cold-2-compile-log.jsonl"
start=$(date +%s)
timeout -s INT 120 python3 -m pytest tests/test_triton_backend.py tests/test_warm_up.py -n 8 -q -p no:cacheprovider \
  --tb=short -rs --junitxml="$R/gpu-tests.junit.xml" > "$R/gpu-tests.log" 2>&1
echo "gpu tests: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run45.tgz" -C "$OUT" run45 && rm -rf "$R"  # one file back (the device returns at most eight)
