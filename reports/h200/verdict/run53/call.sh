#!/usr/bin/env bash
# Run 53: README's RL command (native, Triton, CUDA and Liger-Kernel, two parity pairs, --modes=compile,cudagraph,
# -n 16) as a fresh machine's first run, every cache empty, under contract 2.5.0: the parity and modes gate for the
# project's three backends and the RL target (180 s; run 47: 176.7 s). Liger-Kernel's wheel carried (.whl/). From the
# tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run53/call.sh
set -u
R=${OUT:?OUT=folder}/run53
mkdir -p "$R"
begin=$(date +%s)
ls ~/.cache/torch_extensions ~/.triton/cache 2>&1 | head -3 > "$R/caches-before.txt"
OUT=$R RL_WORKERS=16 VERDICT_TAG=-n16-cold RL_LIMIT=240 bash benchmarks/h200_verdict.sh bytecode rl > "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run53.tgz" -C "$OUT" run53 && rm -rf "$R"  # one file back (the device returns at most eight)
