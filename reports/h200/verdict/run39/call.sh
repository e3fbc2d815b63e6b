#!/usr/bin/env bash
# Run 39: README's RL command with 16 workers on a fresh machine, as its first command: no extension build, no
# Triton or Inductor cache, Liger-Kernel's Triton binaries not compiled (run 38 measured the same command warm).
# From the installed wheel, site-packages' bytecode compiled first. From the tree's root, Liger-Kernel's wheel in
# .whl/ (carried):
#   OUT=<folder> bash reports/h200/verdict/run39/call.sh
set -u
R=${OUT:?OUT=folder}/run39
mkdir -p "$R"
begin=$(date +%s)
ls ~/.cache/torch_extensions ~/.triton/cache 2>&1 | head -3 > "$R/caches-before.txt"
OUT=$R RL_WORKERS=16 VERDICT_TAG=-n16-cold RL_LIMIT=260 bash benchmarks/h200_verdict.sh bytecode rl > "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
