#!/usr/bin/env bash
# Kernels run 67 (prepared without a GPU; NOTES.md): run 66 first (CUDA's in-place fused add and its version
# counters), then the CUDA backward at more blocks a multiprocessor. Built side by side (benchmarks/h200_variants.sh)
# and swept at 65536x4096 and 2097152x128 bf16, each configuration against a device copy in the same process and
# spot-checked bitwise against native (benchmarks/kernel_sweep.py):
#   base      the tree (two blocks of 256 threads a multiprocessor: 128 registers and 110,592 bytes of shared memory)
#   l2stack   run 62's dw stack in global memory (61,440 bytes at three stages), registers as before
#   bounds    the tree, with backward_kernel compiled a second time for more blocks (bwd-bounds.patch): three of
#             256 threads (80 registers), or two of 512 with one group a thread (64), launched where the block's shared
#             memory leaves room for them; at the defaults only the one-group tries reach it
#   l2bounds  both (bwd-stack-in-l2-bounds.patch): three blocks of 256 at the default three stages
# Then the backward's bitwise tests on l2bounds (its default launches the bounded kernel) and on bounds under one
# group a thread (RMSNORM_CUDA_BACKWARD_CONFIG=1,512,0,0). From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run67/call.sh
set -u
R=${OUT:?OUT=folder}/run67
P=reports/h200/kernels/run67
mkdir -p "$R"
begin=$(date +%s)
OUT=$OUT bash reports/h200/kernels/run66/call.sh
echo "run66: done after $(( $(date +%s) - begin )) s" >> "$R/tests.log"
# k, threads, stages, rows a block (0: the default).
TRIES="0,0,0,0;0,0,2,0;0,0,4,0;0,0,0,128;0,0,0,256;1,512,0,0;1,512,0,32;1,512,2,0"
M="python3 \$ROOT/benchmarks/kernel_sweep.py --kinds backward --dtype bfloat16 --tries '$TRIES' \
--out \$VOUT/sweep-bwd-bf16.json"
OUT=$R/v DEADLINE=${DEADLINE:-330} \
  VARIANTS="base:- l2stack:reports/h200/kernels/run62/bwd-stack-in-l2.patch bounds:$P/bwd-bounds.patch l2bounds:$P/bwd-stack-in-l2-bounds.patch" \
  MEASURE="$M" bash benchmarks/h200_variants.sh
K="dx_bitwise or dw_bitwise or batch_size_and_slice or strided_rows or test_backward or gradient_of_one \
or empty_batch or compiled_fullgraph or cuda_graph or dw_bitwise_at_every_depth"
run_tests() {  # variant log config: the variant tree's backward tests with its own package and build
  local v=$1 log=$2 config=$3 left
  left=$(( ${UNTIL:-560} - ($(date +%s) - begin) ))
  (( left > 30 )) || { echo "$log tests: not run, $left s left" >> "$R/tests.log"; return; }
  ( cd /tmp/variants/$v/tree && { [[ ! -d rmsnorm_conformance ]] || mv rmsnorm_conformance /tmp/variants/$v/shadow; } \
    && PYTHONPATH=/tmp/variants/$v/site RMSNORM_CUDA_BUILD_DIR=/tmp/variants/$v/build \
       RMSNORM_CUDA_BACKWARD_CONFIG=$config timeout -s INT "$left" \
       python3 -m pytest tests/test_cuda_backend.py -n 8 -q -p no:cacheprovider -k "$K" ) > "$R/tests-$log.log" 2>&1
  echo "$log tests: exit $?, $(tail -1 "$R/tests-$log.log")" >> "$R/tests.log"
}
run_tests l2bounds l2bounds ""
run_tests bounds bounds-one-group "1,512,0,0"
echo "done: $(( $(date +%s) - begin )) s" >> "$R/tests.log"
tar czf "$OUT/run67.tgz" -C "$OUT" run67 && rm -rf "$R"  # one file back (the device returns at most eight)
