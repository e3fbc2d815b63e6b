#!/usr/bin/env bash
# Run 52: contract 2.5.0 (the gradient bounds allow 256 fp32 roundings of the terms dx and dw sum) on the GPU: CUDA
# cold, then Triton cold, the default one-backend verdict (-n 8, every cache cleared), so that the suites hold both
# backends to the new bounds on an H200; then the gradient calibration on the GPU (torch's CUDA reductions are other
# orders than its CPU ones). From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run52/call.sh
set -u
R=${OUT:?OUT=folder}/run52
mkdir -p "$R"
begin=$(date +%s)
OUT=$R VERDICT_LIMIT=150 bash benchmarks/h200_verdict.sh bytecode cuda-cold triton-cold > "$R/runs.log" 2>&1
echo "verdict done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
mv rmsnorm_conformance /tmp/
timeout 300 python3 benchmarks/calibrate_gradients.py --device cuda --out "$R/calibration-gradients-cuda.md" \
  > "$R/calibration.log" 2>&1
echo "calibration exit $? after $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run52.tgz" -C "$OUT" run52 && rm -rf "$R"  # one file back (the device returns at most eight)
