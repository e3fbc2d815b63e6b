#!/usr/bin/env bash
# Kernels run 11: the Triton forward's warps a row at every target shape (bf16 and fp16), each against a device copy
# in the same process; the tree's own tuning is the first try. From the tree's root, on the GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run11/call.sh
set -u
R=${OUT:?OUT=folder}/run11
mkdir -p "$R"

python3 -c 'import rmsnorm_conformance.backends.triton_rmsnorm' 2>/dev/null || {
  python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && \
  python3 -m pip install -q --no-deps --force-reinstall /tmp/whl/*.whl; }
cd /tmp && timeout 420 python3 "$OLDPWD/benchmarks/forward_tuning.py" --backend triton --out "$R/triton-forward.json" \
  --shapes 65536x4096,2097152x128,16384x8192,4096x4096 --dtypes bfloat16,float16 \
  --tries 1024/1024/1/16,1024/512/1/16,1024/2048/1/16,1024/256/1/32,512/1024/1/16,2048/2048/1/16 \
  > "$R/triton-forward.log" 2>&1
echo "exit $?" >> "$R/triton-forward.log"
