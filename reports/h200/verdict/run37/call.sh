#!/usr/bin/env bash
# Run 37: the tree after run 36 (a first call's fresh process takes the asking process's threads; the CUDA
# backward's lean indexing, whose loop compiles twice: the cold build's time). From the installed wheel, with
# site-packages' bytecode compiled first as pip leaves it: Triton cold, CUDA cold, then the README's RL command,
# each report with its host reference (a slow machine reads as one). From the tree's root on a fresh GPU machine,
# Liger-Kernel's wheel in .whl/ (carried):
#   OUT=<folder> bash reports/h200/verdict/run37/call.sh
set -u
R=${OUT:?OUT=folder}/run37
mkdir -p "$R"
begin=$(date +%s)
OUT=$R VERDICT_LIMIT=130 RL_LIMIT=260 RL_WORKERS=8 bash benchmarks/h200_verdict.sh bytecode triton-cold cuda-cold rl \
  > "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
