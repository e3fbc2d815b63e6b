#!/usr/bin/env bash
# Kernels run 32: the CUDA backend's GPU tests on the tree after run 30, with the test added for dw's final kernel at
# 16, 32 and 64 partial rows a thread (the unrolled trees of 16 and 32 and the streamed one, which the other dw tests,
# at most 8 a thread, do not reach): bitwise native at 16384, 32768 and 65536 rows of 8192 bf16. From the tree's root
# on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run32/call.sh
set -u
R=${OUT:?OUT=folder}/run32
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=${DEADLINE:-240} STAGES="build test_cuda" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
echo "done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run32.tgz" -C "$OUT" run32 && rm -rf "$R"  # one file back (the device returns at most eight)
