#!/usr/bin/env bash
# Run 43: Triton cold on a fresh machine, its first call, on the tree (the Triton warm-up without the dw-only
# backward). Run 42's first run, the same tree as the fresh machine's first call, ran past its 130 s limit and left
# no report; A (the dw-only backward put back) took 62.8 s and B's second run 56.4 s after it on that machine. Here
# B has 150 s (harness_throughput.py now writes its figures when a limit stops it), and the machine's processes are
# sampled every 15 s while it runs (ps.log). From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run43/call.sh
set -u
R=${OUT:?OUT=folder}/run43
mkdir -p "$R"
begin=$(date +%s)
(while sleep 15; do date -u +%T; ps -eo pid,ppid,etimes,pcpu,rss,args --sort=-pcpu | cut -c1-200 | head -30; done) \
  > "$R/ps.log" 2>&1 &
sampler=$!
OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-b1 bash benchmarks/h200_verdict.sh bytecode triton-cold > "$R/runs.log" 2>&1
kill $sampler
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
