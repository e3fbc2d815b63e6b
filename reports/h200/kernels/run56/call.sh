#!/usr/bin/env bash
# Kernels run 56: the CUDA backward compiled for one and two groups a thread only (four, reachable only under a
# tuning override, are no longer built): CUDA cold through the one-backend verdict, the library's cold build and the
# CUDA backend's GPU tests; Nsight Compute on the Triton backward at both target shapes (benchmarks/profile_kernels.py
# --triton-backward; last profiled in run 18, before the unrolled pipeline); then an experiment that is not in the
# tree: the forward's row kernel with eight groups a thread (eight-groups.patch, applied to the installed package's
# sources, built in a build folder of its own), forward and fused add at the four target shapes in bf16 and fp16
# under six launch configurations, each against a copy in the same process (benchmarks/forward_tuning.py; the
# default first and last, for the spread). From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run56/call.sh
set -u
R=${OUT:?OUT=folder}/run56
mkdir -p "$R"
begin=$(date +%s)
OUT=$R/verdict VERDICT_LIMIT=150 bash benchmarks/h200_verdict.sh bytecode cuda-cold > "$R/verdict.log" 2>&1
echo "verdict done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=260 STAGES="build test_cuda" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
echo "build and tests done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout 200 "$NCU" --set full --nvtx --nvtx-include "prof/" --clock-control none -f -o "$R/triton-bwd" \
    python3 benchmarks/profile_kernels.py --triton-backward > "$R/triton-bwd-ncu.log" 2>&1
  "$NCU" --import "$R/triton-bwd.ncu-rep" --page details > "$R/triton-bwd-profile.txt" 2>&1 \
    && rm -f "$R/triton-bwd.ncu-rep"
fi
echo "profile done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
SITE=$(cd /tmp && python3 -c 'import os, rmsnorm_conformance as p; print(os.path.dirname(p.__file__))')
patch -d "$SITE/backends/cuda_rmsnorm" -p1 < reports/h200/kernels/run56/eight-groups.patch >> "$R/call.log" 2>&1
RMSNORM_CUDA_BUILD_DIR=/tmp/rmsnorm-cuda-build-eight timeout 300 python3 benchmarks/forward_tuning.py --backend cuda \
  --tries "0,0;8,0;8,64;8,256;4,256;4,512;0,0" --shapes 65536x4096,2097152x128,16384x8192,4096x4096 \
  --dtypes bfloat16,float16 --out "$R/eight-groups.json" > "$R/eight-groups.log" 2>&1
echo "sweep exit $? after $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run56.tgz" -C "$OUT" run56 && rm -rf "$R"  # one file back (the device returns at most eight)
