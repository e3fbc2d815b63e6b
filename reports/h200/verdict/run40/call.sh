#!/usr/bin/env bash
# Run 40: Triton cold after the Triton backward's loop became the pipelined one at every dim, four tiles an
# iteration (kernels run 21): its binaries are larger, and a cold run compiles them. From the installed wheel, with
# site-packages' bytecode compiled first, on a fresh machine. From the tree's root:
#   OUT=<folder> bash reports/h200/verdict/run40/call.sh
set -u
R=${OUT:?OUT=folder}/run40
mkdir -p "$R"
begin=$(date +%s)
OUT=$R VERDICT_LIMIT=130 bash benchmarks/h200_verdict.sh bytecode triton-cold > "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
