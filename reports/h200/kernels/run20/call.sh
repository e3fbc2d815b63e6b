#!/usr/bin/env bash
# Kernels run 20: Nsight Compute on the CUDA launches whose targets are not met (benchmarks/profile_kernels.py
# --unmet: the backward in bf16 at both shapes, the lean indexing never profiled, and the fp16 forward at 16384x8192
# beside bf16); then the Triton backward's run-20 variants (benchmarks/triton_tuning.py --backward-variants: 2, 4 or
# 8 tiles an iteration of the pipelined loop at 4096), each against a copy in the same process and bit for bit
# against the default; then the Triton backend's GPU tests under the unroll-4 candidate (run17/retune.py). From the
# tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run20/call.sh
set -u
R=${OUT:?OUT=folder}/run20
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
start=$(date +%s)
OUT=$R/k DEADLINE=80 STAGES="build" bash benchmarks/h200_kernels_run.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 120 "$NCU" --set full --nvtx --nvtx-include "prof/" --clock-control none -f -o /tmp/prof \
  python3 benchmarks/profile_kernels.py --unmet > "$R/ncu.log" 2>&1
echo "ncu exit $? after $(( $(date +%s) - start )) s" >> "$R/ncu.log"
[ -f /tmp/prof.ncu-rep ] && "$NCU" --import /tmp/prof.ncu-rep --page details > "$R/ncu-unmet.txt" 2>&1
timeout 200 python3 benchmarks/triton_tuning.py --backward-variants --out "$R/variants.json" > "$R/variants.log" 2>&1
echo "sweep exit $? after $(( $(date +%s) - start )) s" >> "$R/variants.log"
RETUNE_BWD='{"prefetch": false, "staged_rows": 1, "unroll": 4}' PYTHONPATH=reports/h200/kernels/run17 \
  timeout 150 python3 -m pytest -p retune tests/test_triton_backend.py -n 8 -q -p no:cacheprovider --tb=short \
  > "$R/test_triton.log" 2>&1
echo "tests exit $? after $(( $(date +%s) - start )) s" >> "$R/test_triton.log"
