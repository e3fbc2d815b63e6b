#!/usr/bin/env bash
# Run 43: run 42's A/B again on a fresh machine, B then A. Run 42's first run, B (the tree: no dw-only backward in
# the Triton warm-up) as the fresh machine's first call, ran past its 130 s limit and left no report; A (the
# dw-only backward put back into the installed package's PREPARED_CALLS) took 62.8 s and B's second run 56.4 s
# after it. Here B has 200 s, and the machine's processes are sampled every 15 s while it runs (ps.log). From the
# tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run43/call.sh
set -u
R=${OUT:?OUT=folder}/run43
mkdir -p "$R"
begin=$(date +%s)
(while sleep 15; do date -u +%T; ps -eo pid,ppid,etimes,pcpu,rss,args --sort=-pcpu | cut -c1-200 | head -30; done) \
  > "$R/ps.log" 2>&1 &
sampler=$!
OUT=$R VERDICT_LIMIT=200 VERDICT_TAG=-b1 bash benchmarks/h200_verdict.sh bytecode triton-cold > "$R/runs.log" 2>&1
kill $sampler
SRC=$(cd "$(mktemp -d)" && python3 -c 'import rmsnorm_conformance.backends.triton_rmsnorm as m; print(m.__file__)')
cp "$SRC" /tmp/triton_rmsnorm.py.b
sed -i 's/^PREPARED_CALLS: tuple\[str, ...\] = ("forward", "forward_fp32", "fused_add", "fused_add_fp32_residual", "backward")/PREPARED_CALLS: tuple[str, ...] = ("forward", "forward_fp32", "fused_add", "fused_add_fp32_residual", "backward", "backward_dw")/' "$SRC"
sed -i 's/^        elif call == "backward":$/        elif call in ("backward", "backward_dw"):/; s/^            x.requires_grad_()$/            x.requires_grad_(call == "backward")/' "$SRC"
grep -n '^PREPARED_CALLS\|elif call in ("backward"\|x.requires_grad_(call' "$SRC" >> "$R/runs.log"
OUT=$R VERDICT_LIMIT=130 VERDICT_TAG=-a bash benchmarks/h200_verdict.sh bytecode triton-cold >> "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
