#!/usr/bin/env bash
# Run 46: the tree of run 45 (dw passes of one tile of _DW_PASS rows on the GPU) whose Triton warm-up builds a
# first-call process's binaries (FIRST_CALLS at the first LEAD_DIMS dims) ahead of every other job: in run 45 the
# first-call tests took 9.4-11.4 s each, their fresh processes building what the warm-up had not reached yet.
# On a fresh machine, in order:
#   1. Triton cold, the machine's first run, its processes sampled every 15 s (ps.log);
#   2. Triton cold again, every cache cleared;
#   3. the Triton backend's and the warm-up's tests on the GPU, from the installed wheel (every entry point bitwise
#      native's, dw's passes included).
# From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run46/call.sh
set -u
R=${OUT:?OUT=folder}/run46
mkdir -p "$R"
begin=$(date +%s)
(while sleep 15; do date -u +%T; ps -eo pid,ppid,etimes,pcpu,rss,args --sort=-pcpu | cut -c1-200 | head -30; done) \
  > "$R/ps.log" 2>&1 &
sampler=$!
OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-1 bash benchmarks/h200_verdict.sh bytecode triton-cold > "$R/runs.log" 2>&1
kill $sampler
OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-2 bash benchmarks/h200_verdict.sh bytecode triton-cold >> "$R/runs.log" 2>&1
export PYTHONPYCACHEPREFIX="${TMPDIR:-/tmp}/rmsnorm-pycache" PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
mv rmsnorm_conformance /tmp/tree-package  # the tests import the installed wheel, not this folder
start=$(date +%s)
timeout -s INT 150 python3 -m pytest tests/test_triton_backend.py tests/test_warm_up.py -n 8 -q -p no:cacheprovider \
  --tb=short -rs --junitxml="$R/gpu-tests.junit.xml" > "$R/gpu-tests.log" 2>&1
echo "gpu tests: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"
mv /tmp/tree-package rmsnorm_conformance
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run46.tgz" -C "$OUT" run46 && rm -rf "$R"  # one file back (the device returns at most eight)
