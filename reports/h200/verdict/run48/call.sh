#!/usr/bin/env bash
# Run 48: Triton cold on the tree after run 47, whose non-finite planting is a few tensor operations on the device
# (run 47's Triton cold ended on one test_nonfinite_confined case of 26.3 s, after every other test had ended at
# 53 s). A fresh machine's first run, then a second with every cache cleared. From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run48/call.sh
set -u
R=${OUT:?OUT=folder}/run48
mkdir -p "$R"
begin=$(date +%s)
OUT=$R VERDICT_LIMIT=120 VERDICT_TAG=-1 bash benchmarks/h200_verdict.sh bytecode triton-cold > "$R/runs.log" 2>&1
OUT=$R VERDICT_LIMIT=120 VERDICT_TAG=-2 bash benchmarks/h200_verdict.sh bytecode triton-cold >> "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run48.tgz" -C "$OUT" run48 && rm -rf "$R"  # one file back (the device returns at most eight)
