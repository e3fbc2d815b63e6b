#!/usr/bin/env bash
# Run 15: the CUDA backward with less instruction overhead (bwd-lean-indexing.patch; with the weight staged in fp32
# and 32 rows a block at 4096, bwd-lean-indexing-w32.patch; NOTES.md has the SASS counts), each against the tree
# (base), built side by side and measured one after another in one call (benchmarks/h200_variants.sh): the
# backward's launch configurations at 65536x4096 and 2097152x128, bf16, against a device copy in the same process
# (benchmarks/kernel_sweep.py, which spot-checks every configuration bitwise against native). Then, for each
# patched tree, the CUDA tests that hold the backward bitwise to native (dx, dw, batch sizes and slices, strides,
# one input's gradient, empty and non-finite rows, torch.compile and CUDA-graph replay). From the tree's root:
#   OUT=<folder> bash reports/h200/kernels/run15/call.sh
# With little device time: ONLY=lean DEADLINE=<s> UNTIL=<s> (the tree against one variant, then its tests until
# UNTIL seconds into the call).
set -u
R=${OUT:?OUT=folder}/run15
P=reports/h200/kernels/run15
mkdir -p "$R"
begin=$(date +%s)
ALL="lean:$P/bwd-lean-indexing.patch w32:$P/bwd-lean-indexing-w32.patch"
[[ -n ${ONLY:-} ]] && ALL=$(tr ' ' '\n' <<< "$ALL" | grep "^$ONLY:")
M='python3 $ROOT/benchmarks/kernel_sweep.py --quick --kinds backward --dtype bfloat16 --out $VOUT/sweep-bwd-bf16.json'
OUT=$R/v DEADLINE=${DEADLINE:-170} VARIANTS="base:- $ALL" \
  MEASURE="$M" bash benchmarks/h200_variants.sh
K="dx_bitwise or dw_bitwise or batch_size_and_slice or strided_rows or test_backward or gradient_of_one \
or empty_batch or compiled_fullgraph or cuda_graph"
for v in ${ONLY:-lean w32}; do
  left=$(( ${UNTIL:-265} - ($(date +%s) - begin) ))
  (( left > 30 )) || { echo "$v tests: not run, $left s left" >> "$R/tests.log"; continue; }
  ( cd /tmp/variants/$v/tree && mv rmsnorm_conformance /tmp/variants/$v/shadow \
    && PYTHONPATH=/tmp/variants/$v/site RMSNORM_CUDA_BUILD_DIR=/tmp/variants/$v/build timeout -s INT "$left" \
       python3 -m pytest tests/test_cuda_backend.py -n 8 -q -p no:cacheprovider -k "$K" ) > "$R/test_cuda-$v.log" 2>&1
  echo "$v tests: exit $?, $(tail -1 "$R/test_cuda-$v.log")" >> "$R/tests.log"
done
echo "done: $(( $(date +%s) - begin )) s" >> "$R/tests.log"
