#!/usr/bin/env bash
# Kernels run 31: the lean row kernel's store order. Run 29 had the bf16 forward at 65536x4096 at 0.981-0.982 on the
# lean kernel against 0.992 on the general one, and run 30's benchmark both project kernels at 264.2 µs there against
# Liger-Kernel's 259.9 and the copy's 258.7. The lean kernel's compiled code keeps three of its four 16-byte stores to
# the end. Variants (variants.py, edits of the tree's header in the installed package, a build folder each): the tree,
# "interleave" (a compiler barrier after each group's stores), "w-first" (the weight's groups loaded first, then the
# same barrier), "general" (has_lean_rows() false, run 29's), the tree again; for each, the forward's default launch in
# bf16 and fp16 at the four shapes (benchmarks/kernel_sweep.py, spot checked bit for bit against native, each ratio
# against a copy in the same process) and the order of the bf16 lean kernel's loads, stores and barrier in its SASS.
# From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run31/call.sh
set -u
R=${OUT:?OUT=folder}/run31
mkdir -p "$R"
begin=$(date +%s)
here=$(pwd)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
PKG=$(cd "$(mktemp -d)" && python3 -c 'import os, rmsnorm_conformance.backends.cuda_rmsnorm as m; print(os.path.dirname(m.__file__))')
cp "$PKG/rmsnorm_device.h" /tmp/tree.h
V=$here/reports/h200/kernels/run31/variants.py
python3 "$V" /tmp/tree.h interleave > /tmp/interleave.h
python3 "$V" /tmp/tree.h w-first > /tmp/w-first.h
sed 's/return sizeof(T) == 2 \&\& sizeof(O) == 2 \&\& M != Mode::kFusedAdd \&\& K >= 2;/return false;/' /tmp/tree.h > /tmp/general.h
grep -c "return false;" /tmp/general.h > "$R/patch.txt"
export PYTHONUNBUFFERED=1
LEAN='_ZN7rmsnorm6detail18forward_row_kernelI13__nv_bfloat16S2_LNS0_4ModeE0ELi4ELb1EEEvNS0_11ForwardArgsE'
sweep() {  # label header dtypes
  cp "$2" "$PKG/rmsnorm_device.h"
  for d in $3; do
    RMSNORM_CUDA_BUILD_DIR=/tmp/b-$(basename "$2" .h) timeout 90 python3 benchmarks/kernel_sweep.py --kinds forward --dtype $d \
      --tries "0,0,0,0" --out "$R/$1-$d.json" > "$R/$1-$d.log" 2>&1
    echo "$1 $d exit $? at $(( $(date +%s) - begin )) s" >> "$R/call.log"
  done
  lib=$(find /tmp/b-$(basename "$2" .h) -name '*.so' | head -1)
  [ -n "$lib" ] && cuobjdump -sass -fun "$LEAN" "$lib" 2>/dev/null | grep -oE '(LDG|STG|BAR|LDS|STS)[.A-Z0-9]*' \
    | nl > "$R/$1-sass-order.txt"
}
sweep tree /tmp/tree.h "bfloat16 float16"
sweep interleave /tmp/interleave.h "bfloat16 float16"
sweep w-first /tmp/w-first.h "bfloat16 float16"
sweep general /tmp/general.h "bfloat16 float16"
sweep tree-2 /tmp/tree.h "bfloat16 float16"
cp /tmp/tree.h "$PKG/rmsnorm_device.h"
echo "done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run31.tgz" -C "$OUT" run31 && rm -rf "$R"  # one file back (the device returns at most eight)
