#!/usr/bin/env bash
# Kernels run 59: why Liger-Kernel's forward is ahead at 65536x4096 in the committed benchmark (run 58: 0.993-0.995
# of a copy against 0.979-0.983): the forward of CUDA, Triton and Liger-Kernel timed as bench.py times it (the L2
# flushed before each call) and back to back, five rounds in turns with the copy, at 65536x4096, 16384x8192 and
# 4096x4096 in bf16 and fp16 (benchmarks/flush_effect.py). Liger-Kernel's wheel in .whl/ (carried). From the tree's
# root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run59/call.sh
set -u
R=${OUT:?OUT=folder}/run59
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl59 . \
  && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl59/*.whl > "$R/call.log" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  >> "$R/call.log" 2>&1
export PYTHONPATH=/tmp/site
mv rmsnorm_conformance /tmp/rmsnorm_conformance_source  # the source folder would shadow the installed package
for dtype in bfloat16 float16; do
  timeout 240 python3 benchmarks/flush_effect.py --dtype $dtype --out "$R/flush-$dtype.json" \
    > "$R/flush-$dtype.log" 2>&1
  echo "$dtype exit $? after $(( $(date +%s) - begin )) s" >> "$R/call.log"
done
tar czf "$OUT/run59.tgz" -C "$OUT" run59 && rm -rf "$R"  # one file back (the device returns at most eight)
