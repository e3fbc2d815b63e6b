#!/usr/bin/env bash
# Run 38: README's RL command with 16 workers instead of 8 (the H200 machine has 16 cores; run 37 measured 206.5 s
# with 8, after Triton cold and CUDA cold had filled the caches). It ran on the machine run 37 had just used, still
# held: its caches and its installed wheels were in place (as for run 37's RL stage, which ran after Triton cold and
# CUDA cold; Liger-Kernel's Triton binaries, which that stage compiled, were warm here too). From the installed
# wheel, site-packages' bytecode compiled first. From the tree's root, Liger-Kernel's wheel in .whl/ (carried):
#   OUT=<folder> bash reports/h200/verdict/run38/call.sh
set -u
R=${OUT:?OUT=folder}/run38
mkdir -p "$R"
begin=$(date +%s)
OUT=$R RL_WORKERS=16 VERDICT_TAG=-n16 RL_LIMIT=240 bash benchmarks/h200_verdict.sh bytecode rl > "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
