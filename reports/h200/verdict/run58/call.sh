#!/usr/bin/env bash
# Run 58: the controller starting its workers before it resolves the options (harness/plugin/controller.py), against
# resolving at configure (RMSNORM_CONFORMANCE_EARLY_WORKERS=0), one backend cold each (every cache cleared before each
# stage), in turns on one fresh machine: Triton cold (the machine's first run, the new way), CUDA cold, then both the
# old way, then both the new way again. From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run58/call.sh
set -u
R=${OUT:?OUT=folder}/run58
mkdir -p "$R"
begin=$(date +%s)
host() { python3 -c 'import time; t = time.perf_counter(); s = 0
for i in range(10**6): s += i
print(f"{(time.perf_counter() - t) * 1e3:.1f} ms for 10^6 Python additions")'; }
host > "$R/host.txt"
OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-early-1 bash benchmarks/h200_verdict.sh bytecode triton-cold cuda-cold > "$R/runs.log" 2>&1
host >> "$R/host.txt"
RMSNORM_CONFORMANCE_EARLY_WORKERS=0 OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-configure \
  bash benchmarks/h200_verdict.sh bytecode triton-cold cuda-cold >> "$R/runs.log" 2>&1
host >> "$R/host.txt"
OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-early-2 bash benchmarks/h200_verdict.sh bytecode triton-cold cuda-cold >> "$R/runs.log" 2>&1
host >> "$R/host.txt"
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run58.tgz" -C "$OUT" run58 && rm -rf "$R"  # one file back (the device returns at most eight)
