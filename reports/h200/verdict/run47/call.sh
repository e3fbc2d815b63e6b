#!/usr/bin/env bash
# Run 47: the tree of run 46 (Triton dw passes of one tile, the warm-up's first-call binaries first), on a fresh
# machine: (1) the README's RL command as the machine's first run, every cache empty (as run 39); (2) Triton cold
# and CUDA cold after it, each with every cache cleared. Liger-Kernel's wheel in .whl/ (carried). From the tree's
# root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run47/call.sh
set -u
R=${OUT:?OUT=folder}/run47
mkdir -p "$R"
begin=$(date +%s)
ls ~/.cache/torch_extensions ~/.triton/cache 2>&1 | head -3 > "$R/caches-before.txt"
OUT=$R RL_WORKERS=16 VERDICT_TAG=-n16-cold RL_LIMIT=240 bash benchmarks/h200_verdict.sh bytecode rl > "$R/runs.log" 2>&1
OUT=$R VERDICT_LIMIT=120 bash benchmarks/h200_verdict.sh bytecode triton-cold cuda-cold >> "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run47.tgz" -C "$OUT" run47 && rm -rf "$R"  # one file back (the device returns at most eight)
