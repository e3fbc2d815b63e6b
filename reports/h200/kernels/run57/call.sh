#!/usr/bin/env bash
# Kernels run 57: run 56's experiment again, now applied (run 56 patched the moved source folder, not the installed
# package, so its "8,..." configurations ran four groups a thread): the forward's row kernel with eight groups a
# thread (../run56/eight-groups.patch on the installed package's sources, in a build folder of its own), forward and
# fused add at the four target shapes in bf16 and fp16, each configuration twice in turns, each against a copy in
# the same process (benchmarks/forward_tuning.py). From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run57/call.sh
set -u
R=${OUT:?OUT=folder}/run57
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl57 . \
  && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl57/*.whl > "$R/call.log" 2>&1
rm -rf rmsnorm_conformance  # the source folder would shadow the installed package here
SITE=$(cd / && python3 -c 'import os, rmsnorm_conformance as p; print(os.path.dirname(p.__file__))')
echo "package at $SITE" >> "$R/call.log"
patch -d "$SITE/backends/cuda_rmsnorm" -p1 < reports/h200/kernels/run56/eight-groups.patch >> "$R/call.log" 2>&1
grep -n "kMaxGroupsPerThread = " "$SITE/backends/cuda_rmsnorm/rmsnorm_plan.h" >> "$R/call.log"
RMSNORM_CUDA_BUILD_DIR=/tmp/rmsnorm-cuda-build-eight57 timeout 400 python3 benchmarks/forward_tuning.py --backend cuda \
  --tries "0,0;8,0;8,64;0,0;8,0;8,64" --shapes 65536x4096,2097152x128,16384x8192,4096x4096 \
  --dtypes bfloat16,float16 --out "$R/eight-groups.json" > "$R/eight-groups.log" 2>&1
echo "sweep exit $? after $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run57.tgz" -C "$OUT" run57 && rm -rf "$R"  # one file back (the device returns at most eight)
