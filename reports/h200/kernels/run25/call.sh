#!/usr/bin/env bash
# Kernels run 25: the CUDA fp16 forward on the row kernel. The fp16 forward runs the staged kernel (run 8: the row
# kernel ran it at 0.850 of a copy at 16384x8192 against staging's 0.907); since then the row kernel's indexing
# was made lean and the bf16 forward on it reached 0.993 / 0.998 / 0.961 / 0.955 (run 24) against the staged fp16
# forward's 0.941 / 0.962 / 0.907 / 0.889. The same sweep (benchmarks/kernel_sweep.py: each configuration spot
# checked bit for bit against native, each ratio against a copy in the same process) on the tree as it is and on
# the tree with uses_row_kernel() true for every dtype (patched in the installed package, a fresh build folder);
# then the bf16 forward's row-kernel configurations at the same shapes. From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run25/call.sh
set -u
R=${OUT:?OUT=folder}/run25
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
S=benchmarks/kernel_sweep.py
ROW="0,0,0,0;2,256,0,0;4,256,0,0;1,512,0,0;2,512,0,0;4,64,0,0"
export PYTHONUNBUFFERED=1
RMSNORM_CUDA_BUILD_DIR=/tmp/b-staged timeout 150 python3 $S --kinds forward --dtype float16 \
  --tries "0,0,0,0;0,256,0,0;0,0,3,0;0,0,0,8" --out "$R/staged-f16.json" > "$R/staged-f16.log" 2>&1
PLAN=$(cd "$(mktemp -d)" && python3 -c 'import os, rmsnorm_conformance.backends.cuda_rmsnorm as m; print(os.path.dirname(m.__file__))')/rmsnorm_plan.h
sed -i 's/return fused_add || d != DType::kFloat16;/return true;/' "$PLAN"
grep -n "constexpr bool uses_row_kernel" "$PLAN" >> "$R/row-f16.log"
RMSNORM_CUDA_BUILD_DIR=/tmp/b-row timeout 200 python3 $S --kinds forward --dtype float16 --tries "$ROW" \
  --out "$R/row-f16.json" >> "$R/row-f16.log" 2>&1
RMSNORM_CUDA_BUILD_DIR=/tmp/b-row timeout 150 python3 $S --kinds forward --dtype bfloat16 --tries "$ROW" \
  --out "$R/row-bf16.json" > "$R/row-bf16.log" 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv >> "$R/row-bf16.log"
