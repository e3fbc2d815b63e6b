#!/usr/bin/env bash
# Kernels run 29: the lean row kernel against the general one on the same tree, both at 40 registers (runs 27 and 28
# had the bf16 forward at 65536x4096 at 0.977-0.983 on the lean kernel against 0.989-0.993 on the general one before
# it). Two builds: the tree, and the tree with has_lean_rows() false (patched in the installed package, a build folder
# of its own); the forward's default launch in bf16 and fp16 (benchmarks/kernel_sweep.py, spot checked bit for bit
# against native, each ratio against a copy in the same process), lean, general, lean again. From the tree's root on a
# GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run29/call.sh
set -u
R=${OUT:?OUT=folder}/run29
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
PKG=$(cd "$(mktemp -d)" && python3 -c 'import os, rmsnorm_conformance.backends.cuda_rmsnorm as m; print(os.path.dirname(m.__file__))')
cp "$PKG/rmsnorm_device.h" /tmp/tree.h
sed 's/return sizeof(T) == 2 && sizeof(O) == 2 && M != Mode::kFusedAdd && K >= 2;/return false;/' /tmp/tree.h > /tmp/general.h
grep -c "return false;" /tmp/general.h > "$R/patch.txt"
export PYTHONUNBUFFERED=1
sweep() {  # label header build-folder
  cp "$2" "$PKG/rmsnorm_device.h"
  for d in bfloat16 float16; do
    RMSNORM_CUDA_BUILD_DIR=/tmp/b-$3 timeout 90 python3 benchmarks/kernel_sweep.py --kinds forward --dtype $d \
      --tries "0,0,0,0" --out "$R/$1-$d.json" > "$R/$1-$d.log" 2>&1
    echo "$1 $d exit $? at $(( $(date +%s) - begin )) s" >> "$R/call.log"
  done
}
sweep lean-1 /tmp/tree.h lean
sweep general-1 /tmp/general.h general
sweep lean-2 /tmp/tree.h lean
cp /tmp/tree.h "$PKG/rmsnorm_device.h"
echo "done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run29.tgz" -C "$OUT" run29 && rm -rf "$R"  # one file back (the device returns at most eight)
