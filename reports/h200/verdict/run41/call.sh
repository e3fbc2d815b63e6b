#!/usr/bin/env bash
# Run 41 (committed, not run yet): Triton cold and CUDA cold on the tree after kernels run 22 (the Triton backward's
# binaries compile in half the time at one-row tiles and in a third to a quarter at dims that are no multiple of 16
# bytes, against run 40's tree). From the installed wheel, site-packages' bytecode compiled first, on a fresh machine.
# From the tree's root:
#   OUT=<folder> bash reports/h200/verdict/run41/call.sh
set -u
R=${OUT:?OUT=folder}/run41
mkdir -p "$R"
begin=$(date +%s)
OUT=$R VERDICT_LIMIT=130 bash benchmarks/h200_verdict.sh bytecode triton-cold cuda-cold > "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
