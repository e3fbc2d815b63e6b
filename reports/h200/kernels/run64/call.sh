#!/usr/bin/env bash
# Kernels run 64: run 62's two rows under one barrier again, with the launch it refused fixed: the patch kept at least
# three stages, and fp32 rows of 4097-8192 columns (65,536 bytes a stage at 512 threads) need 245,760 bytes at three,
# over the 232,448 a block may have, so every fp32 case at 8192 failed, among them kernel_sweep.py's spot check, which
# ended every try of the sweep before a bf16 call ran. Fixed: two stages (none in flight) where three do not fit.
# paired.patch and pow2.patch are run 62's bwd-paired-rows.patch and bwd-paired-rows-pow2-dim.patch with that fix,
# against the tree. Built side by side with the tree (benchmarks/h200_variants.sh), the CUDA backward swept at
# 65536x4096 and 2097152x128 bf16 against a copy in the same process, then each patched tree's backward tests. From
# the tree's root on a GPU machine (after run 63, warm):
#   OUT=<folder> bash reports/h200/kernels/run64/call.sh
set -u
R=${OUT:?OUT=folder}/run64
P=reports/h200/kernels/run64
mkdir -p "$R"
begin=$(date +%s)
TRIES="0,0,0,0;0,0,4,0;0,0,5,0;0,0,0,128;0,0,5,128"
M="python3 \$ROOT/benchmarks/kernel_sweep.py --kinds backward --dtype bfloat16 --tries '$TRIES' \
--out \$VOUT/sweep-bwd-bf16.json"
OUT=$R/v DEADLINE=${DEADLINE:-200} VARIANTS="base:- paired:$P/paired.patch pow2:$P/pow2.patch" MEASURE="$M" \
  bash benchmarks/h200_variants.sh
K="dx_bitwise or dw_bitwise or batch_size_and_slice or strided_rows or test_backward or gradient_of_one \
or empty_batch or compiled_fullgraph or cuda_graph or dw_bitwise_at_every_depth"
for v in paired pow2; do
  left=$(( ${UNTIL:-270} - ($(date +%s) - begin) ))
  (( left > 30 )) || { echo "$v tests: not run, $left s left" >> "$R/tests.log"; continue; }
  ( cd /tmp/variants/$v/tree && { [[ ! -d rmsnorm_conformance ]] || mv rmsnorm_conformance /tmp/variants/$v/shadow; } \
    && PYTHONPATH=/tmp/variants/$v/site RMSNORM_CUDA_BUILD_DIR=/tmp/variants/$v/build timeout -s INT "$left" \
       python3 -m pytest tests/test_cuda_backend.py -n 8 -q -p no:cacheprovider -k "$K" ) > "$R/tests-$v.log" 2>&1
  echo "$v tests: exit $?, $(tail -1 "$R/tests-$v.log")" >> "$R/tests.log"
done
echo "done: $(( $(date +%s) - begin )) s" >> "$R/tests.log"
tar czf "$OUT/run64.tgz" -C "$OUT" run64 && rm -rf "$R"  # one file back (the device returns at most eight)
