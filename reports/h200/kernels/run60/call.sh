#!/usr/bin/env bash
# Kernels run 60: the forward's 0.97 at 16384x8192 and 4096x4096 (run 58: CUDA bf16 0.964 / 0.949, Triton 0.966 /
# 0.964, fp16 0.972 / 0.943 and 0.972 / 0.927). CUDA: the lean row kernel (16-bit forward) with memory hints on its
# loads and stores (variants.py: x loaded asking L2 for 256-byte lines, the same through the non-coherent path
# without L1 allocation, y stored streaming), each in its own build folder of the installed package, the default
# launch and two rows a block ("4,512"), in turns twice (benchmarks/kernel_sweep.py: each against a copy in the same
# process, spot checked bit for bit against native). Triton: the forward's warps a row at 8192 and 4096 and two
# rows a program at 4096 (benchmarks/forward_tuning.py), the list twice. From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run60/call.sh
set -u
R=${OUT:?OUT=folder}/run60
mkdir -p "$R"
begin=$(date +%s)
here=$(pwd)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl60 . \
  && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl60/*.whl > "$R/call.log" 2>&1
mv rmsnorm_conformance /tmp/rmsnorm_conformance_source  # the source folder would shadow the installed package
PKG=$(cd / && python3 -c 'import os, rmsnorm_conformance.backends.cuda_rmsnorm as m; print(os.path.dirname(m.__file__))')
echo "package: $PKG" >> "$R/call.log"
cp "$PKG/rmsnorm_device.h" /tmp/tree.h
V=$here/reports/h200/kernels/run60/variants.py
for v in l2 l2nc stcs; do python3 "$V" /tmp/tree.h $v > /tmp/$v.h || echo "variant $v failed" >> "$R/call.log"; done
export PYTHONUNBUFFERED=1
sweep() {  # label header pass
  cp "$2" "$PKG/rmsnorm_device.h"
  for d in bfloat16 float16; do
    RMSNORM_CUDA_BUILD_DIR=/tmp/b-$1 timeout 150 python3 benchmarks/kernel_sweep.py --kinds forward --dtype $d \
      --tries "0,0,0,0;4,512,0,0" --out "$R/$1-$3-$d.json" > "$R/$1-$3-$d.log" 2>&1
    echo "$1 pass $3 $d exit $? at $(( $(date +%s) - begin )) s" >> "$R/call.log"
  done
}
for pass in 1 2; do
  sweep tree /tmp/tree.h $pass
  sweep l2 /tmp/l2.h $pass
  sweep l2nc /tmp/l2nc.h $pass
  sweep stcs /tmp/stcs.h $pass
done
cp /tmp/tree.h "$PKG/rmsnorm_device.h"
T="1024/1024/1,1024/512/1,1024/2048/1,8192/1024/1"
timeout 200 python3 benchmarks/forward_tuning.py --backend triton --shapes 16384x8192,4096x4096 \
  --dtypes bfloat16,float16 --tries "$T,$T" --out "$R/triton.json" > "$R/triton.log" 2>&1
echo "triton exit $? at $(( $(date +%s) - begin )) s" >> "$R/call.log"
echo "done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run60.tgz" -C "$OUT" run60 && rm -rf "$R"  # one file back (the device returns at most eight)
