#!/usr/bin/env bash
# Run 42: Triton cold with and without the dw-only backward in the Triton backend's warm-up (PREPARED_CALLS), on
# one machine. The suites differentiate x and the weight together, so the dw-only binaries that the warm-up built
# (120 jobs) were never launched, while the backward's binaries, since its unrolled pipeline, take about twice the
# CPU time to compile (verdict run 41: Triton cold 67.3 s against run 37's 54.6 s on a host as fast). B is the
# tree; A is the tree with "backward_dw" put back into the installed package's PREPARED_CALLS. B, A, B, each after
# clearing the caches (h200_verdict.sh's triton-cold; each with site-packages' bytecode as pip leaves it). From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run42/call.sh
set -u
R=${OUT:?OUT=folder}/run42
mkdir -p "$R"
begin=$(date +%s)
OUT=$R VERDICT_LIMIT=130 VERDICT_TAG=-b1 bash benchmarks/h200_verdict.sh bytecode triton-cold > "$R/runs.log" 2>&1
SRC=$(cd "$(mktemp -d)" && python3 -c 'import rmsnorm_conformance.backends.triton_rmsnorm as m; print(m.__file__)')
cp "$SRC" /tmp/triton_rmsnorm.py.b
sed -i 's/^PREPARED_CALLS: tuple\[str, ...\] = ("forward", "forward_fp32", "fused_add", "fused_add_fp32_residual", "backward")/PREPARED_CALLS: tuple[str, ...] = ("forward", "forward_fp32", "fused_add", "fused_add_fp32_residual", "backward", "backward_dw")/' "$SRC"
sed -i 's/^        elif call == "backward":$/        elif call in ("backward", "backward_dw"):/; s/^            x.requires_grad_()$/            x.requires_grad_(call == "backward")/' "$SRC"
grep -n '^PREPARED_CALLS\|elif call in ("backward"\|x.requires_grad_(call' "$SRC" >> "$R/runs.log"
OUT=$R VERDICT_LIMIT=130 VERDICT_TAG=-a bash benchmarks/h200_verdict.sh bytecode triton-cold >> "$R/runs.log" 2>&1
cp /tmp/triton_rmsnorm.py.b "$SRC"
OUT=$R VERDICT_LIMIT=130 VERDICT_TAG=-b2 bash benchmarks/h200_verdict.sh bytecode triton-cold >> "$R/runs.log" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
