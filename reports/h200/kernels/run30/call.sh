#!/usr/bin/env bash
# Kernels run 30: dw's final kernel with its tree in registers (up to 32 partial rows a thread) against the stack in
# local memory before it (run 20's profile: 18.8 µs at 65536x4096, 12.8 µs at 2097152x128). The backward's default
# launch and 128 rows of dw a block (benchmarks/kernel_sweep.py, spot checked bit for bit against native, each ratio
# against a copy in the same process) with the header before (base) and the tree's (new), each in a build folder of
# its own, base / new / base / new. Then, from the tree's wheel: the CUDA backend's GPU tests, the committed
# benchmark regenerated (Liger-Kernel's wheel in .whl/, carried) and the parity and modes gate for native, Triton and
# CUDA. The base header is the tree's before this run, put in place first:
#   mkdir -p reports/h200/kernels/run30/base
#   git show 07345a6:backends/cuda_rmsnorm/rmsnorm_device.h > reports/h200/kernels/run30/base/rmsnorm_device.h
# then from the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run30/call.sh
set -u
R=${OUT:?OUT=folder}/run30
mkdir -p "$R"
begin=$(date +%s)
here=$(pwd)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
PKG=$(cd "$(mktemp -d)" && python3 -c 'import os, rmsnorm_conformance.backends.cuda_rmsnorm as m; print(os.path.dirname(m.__file__))')
cp "$PKG/rmsnorm_device.h" /tmp/new.h
cp "$here/reports/h200/kernels/run30/base/rmsnorm_device.h" /tmp/base.h
cmp -s /tmp/new.h /tmp/base.h && echo "the two headers are the same" >> "$R/call.log"
export PYTHONUNBUFFERED=1
sweep() {  # label header build-folder dtypes
  cp "$2" "$PKG/rmsnorm_device.h"
  for d in $4; do
    RMSNORM_CUDA_BUILD_DIR=/tmp/b-$3 timeout 100 python3 benchmarks/kernel_sweep.py --kinds backward --dtype $d \
      --tries "0,0,0,0;0,0,0,128" --out "$R/$1-$d.json" > "$R/$1-$d.log" 2>&1
    echo "$1 $d exit $? at $(( $(date +%s) - begin )) s" >> "$R/call.log"
  done
}
sweep base-1 /tmp/base.h base "bfloat16 float16"
sweep new-1 /tmp/new.h new "bfloat16 float16"
sweep base-2 /tmp/base.h base bfloat16
sweep new-2 /tmp/new.h new bfloat16
cp /tmp/new.h "$PKG/rmsnorm_device.h"
OUT=$R/k DEADLINE=${DEADLINE:-270} STAGES="build test_cuda bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
echo "kernels done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
( cd "$(mktemp -d)" && timeout 110 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda \
  --device=cuda --modes=compile,cudagraph -k test_bitwise_parity -n 8 -q -p no:cacheprovider \
  --report="$R/parity.md" ) > "$R/parity.log" 2>&1
echo "parity gate exit $?" >> "$R/parity.log"
echo "done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run30.tgz" -C "$OUT" run30 && rm -rf "$R"  # one file back (the device returns at most eight)
