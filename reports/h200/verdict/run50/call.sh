#!/usr/bin/env bash
# Run 50: CUDA cold, then Triton cold, on the tree after kernels run 30 (dw's final kernel with its tree in
# registers): the default one-backend verdict (-n 8, every cache cleared, the CUDA build included) as a fresh
# machine's first run and second, so the conformance suites hold the new backward to the whole contract on the GPU,
# and the time to verdict of each backend cold. From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run50/call.sh
set -u
R=${OUT:?OUT=folder}/run50
mkdir -p "$R"
begin=$(date +%s)
OUT=$R VERDICT_LIMIT=150 bash benchmarks/h200_verdict.sh bytecode cuda-cold triton-cold > "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run50.tgz" -C "$OUT" run50 && rm -rf "$R"  # one file back (the device returns at most eight)
