#!/usr/bin/env bash
# Kernels run 27: the CUDA row kernel's lean path (16-bit rows in and out, rows of exactly the plan's padded width,
# every 16-byte access aligned: plain 16-byte loads and stores at constant steps from one address, no test a group;
# outputs rounded a pair at a time), against the tree before it, in one process each, every configuration spot checked
# bit for bit against native and timed against a copy (benchmarks/kernel_sweep.py). Four builds, each in a folder of
# its own, each timing bf16 and fp16: the tree (fp16 on the staged kernel), the tree with the fp16 forward on the row
# kernel (uses_row_kernel patched in the installed package), the header before (run27/base/rmsnorm_device.h, which is
# `git show cbd8227:backends/cuda_rmsnorm/rmsnorm_device.h`; not committed) with fp16 on the row kernel (run 25's
# configuration), and the header before as it was. Then the CUDA backend's GPU tests on the tree with fp16 on the row
# kernel (every dtype's lean path and the general one, bitwise native). From the tree's root on a GPU machine, with
# run27/base/ in place:
#   OUT=<folder> bash reports/h200/kernels/run27/call.sh
set -u
R=${OUT:?OUT=folder}/run27
mkdir -p "$R"
begin=$(date +%s)
BASE=$(pwd)/reports/h200/kernels/run27/base/rmsnorm_device.h
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
PKG=$(cd "$(mktemp -d)" && python3 -c 'import os, rmsnorm_conformance.backends.cuda_rmsnorm as m; print(os.path.dirname(m.__file__))')
cp "$PKG/rmsnorm_device.h" /tmp/tree.h && cp "$PKG/rmsnorm_plan.h" /tmp/plan.h
export PYTHONUNBUFFERED=1
S=benchmarks/kernel_sweep.py
sweep() {  # build-folder label
  for d in bfloat16 float16; do
    RMSNORM_CUDA_BUILD_DIR=/tmp/b-$1 timeout 120 python3 $S --kinds forward --dtype $d --tries "$TRIES" \
      --out "$R/$2-$d.json" > "$R/$2-$d.log" 2>&1
    echo "$2 $d exit $? at $(( $(date +%s) - begin )) s" >> "$R/call.log"
  done
}
TRIES="0,0,0,0"
sweep tree lean
sed -i 's/return fused_add || d != DType::kFloat16;/return true;/' "$PKG/rmsnorm_plan.h"
TRIES="0,0,0,0;2,256,0,0;4,64,0,0"
sweep treerow lean-rowf16
RMSNORM_CUDA_BUILD_DIR=/tmp/b-treerow timeout 200 python3 -m pytest tests/test_cuda_backend.py -n 8 -q \
  -p no:cacheprovider --tb=short > "$R/test_cuda.log" 2>&1
echo "tests exit $? at $(( $(date +%s) - begin )) s" >> "$R/call.log"
cp "$BASE" "$PKG/rmsnorm_device.h"
sweep baserow before-rowf16
cp /tmp/plan.h "$PKG/rmsnorm_plan.h"
TRIES="0,0,0,0"
sweep base before
cp /tmp/tree.h "$PKG/rmsnorm_device.h"
echo "done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run27.tgz" -C "$OUT" run27 && rm -rf "$R"  # one file back (the device returns at most eight)
