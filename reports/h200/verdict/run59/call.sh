#!/usr/bin/env bash
# Run 59: the time-to-verdict targets on the tree whose pytest-xdist controller starts its workers before it resolves
# the options (run 58): Triton cold as a fresh machine's first run (runs 46, 48, 51, 57, 58: 51.9, 67.0, 53.9, 62.7,
# 62.2 s), CUDA cold as its second, then README's RL command with every cache cleared again (runs 47, 53, 57: 176.7,
# 166.5, 163.6 s). Liger-Kernel's wheel carried (.whl/). From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run59/call.sh
set -u
R=${OUT:?OUT=folder}/run59
mkdir -p "$R"
begin=$(date +%s)
host() { python3 -c 'import time; t = time.perf_counter(); s = 0
for i in range(10**6): s += i
print(f"{(time.perf_counter() - t) * 1e3:.1f} ms for 10^6 Python additions")'; }
host > "$R/host.txt"
OUT=$R VERDICT_LIMIT=150 bash benchmarks/h200_verdict.sh bytecode triton-cold cuda-cold > "$R/runs.log" 2>&1
echo "cold stages done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
host >> "$R/host.txt"
rm -rf ~/.cache/torch_extensions ~/.triton/cache "${TMPDIR:-/tmp}/torchinductor_$(id -un)"
OUT=$R RL_WORKERS=16 VERDICT_TAG=-n16-cold RL_LIMIT=240 bash benchmarks/h200_verdict.sh bytecode rl >> "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
host >> "$R/host.txt"
tar czf "$OUT/run59.tgz" -C "$OUT" run59 && rm -rf "$R"  # one file back (the device returns at most eight)
