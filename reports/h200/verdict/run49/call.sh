#!/usr/bin/env bash
# Run 49: CUDA cold on the tree after kernels run 28 (every 16-bit forward on the row kernel, its lean form where
# rows are exactly the padded width): the default one-backend verdict (-n 8, every cache cleared, the CUDA build
# included) as a fresh machine's first run, so the conformance suites hold the new kernels to the whole contract on
# the GPU. From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run49/call.sh
set -u
R=${OUT:?OUT=folder}/run49
mkdir -p "$R"
begin=$(date +%s)
OUT=$R VERDICT_LIMIT=150 bash benchmarks/h200_verdict.sh bytecode cuda-cold > "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run49.tgz" -C "$OUT" run49 && rm -rf "$R"  # one file back (the device returns at most eight)
