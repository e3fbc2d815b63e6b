#!/usr/bin/env bash
# Kernels run 19: Nsight Compute on the CUDA launches whose targets are not met, on the tree of run 18 (the lean
# backward indexing included, which was never profiled): the backward in bf16 at 65536x4096 and 2097152x128, and
# the forward at 16384x8192 in fp16 beside bf16 (benchmarks/profile_kernels.py --unmet). From the tree's root on a
# fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run19/call.sh
set -u
R=${OUT:?OUT=folder}/run19
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=${DEADLINE:-80} STAGES="build" bash benchmarks/h200_kernels_run.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 90 "$NCU" --set full --nvtx --nvtx-include "prof/" --clock-control none -f -o /tmp/prof \
  python3 benchmarks/profile_kernels.py --unmet > "$R/ncu.log" 2>&1
echo "ncu exit $?" >> "$R/ncu.log"
[ -f /tmp/prof.ncu-rep ] && "$NCU" --import /tmp/prof.ncu-rep --page details > "$R/ncu-unmet.txt" 2>&1
