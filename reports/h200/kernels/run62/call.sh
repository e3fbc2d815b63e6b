#!/usr/bin/env bash
# Kernels run 62 (prepared without a GPU; NOTES.md). The CUDA backward, built side by side and measured one after
# another in one call (benchmarks/h200_variants.sh), as the tree (base) and four patches: dw's stack in global memory,
# where it stays in L2 (l2stack: bwd-stack-in-l2.patch), the same without its discard of read lines (l2keep), two rows
# reduced under one barrier on top of l2stack (paired: bwd-paired-rows.patch), and a power-of-two dim's divisions as
# exact multiplies on top of that (pow2: bwd-paired-rows-pow2-dim.patch). Each at 65536x4096 and 2097152x128, bf16,
# under 64 / 128 / 256 rows a block and 3-6 stages, against a device copy in the same process
# (benchmarks/kernel_sweep.py spot-checks every configuration bitwise against native). Then the tree's Triton GPU
# tests and CUDA's in-place tests, the Triton backward's variants (benchmarks/triton_tuning.py --backward-variants),
# all of the CUDA tests on pow2, and the backward's bitwise tests on paired and l2stack. From the tree's root:
#   OUT=<folder> bash reports/h200/kernels/run62/call.sh
# With little device time: ONLY=paired (the tree against one variant, then its tests until UNTIL seconds in).
set -u
R=${OUT:?OUT=folder}/run62
P=reports/h200/kernels/run62
mkdir -p "$R"
begin=$(date +%s)
ALL="l2stack:$P/bwd-stack-in-l2.patch l2keep:$P/bwd-stack-in-l2-no-discard.patch paired:$P/bwd-paired-rows.patch pow2:$P/bwd-paired-rows-pow2-dim.patch"
[[ -n ${ONLY:-} ]] && ALL=$(tr ' ' '\n' <<< "$ALL" | grep "^$ONLY:")
# k, threads, stages, rows a block (0: the default). The tree keeps 3 stages where its stack leaves no room for more.
TRIES="0,0,0,0;0,0,3,0;0,0,4,0;0,0,5,0;0,0,0,128;0,0,4,128;0,0,5,128;0,0,0,256;0,0,5,256;0,0,6,256"
M="python3 \$ROOT/benchmarks/kernel_sweep.py --kinds backward --dtype bfloat16 --tries '$TRIES' \
--out \$VOUT/sweep-bwd-bf16.json"
OUT=$R/v DEADLINE=${DEADLINE:-360} VARIANTS="base:- $ALL" MEASURE="$M" bash benchmarks/h200_variants.sh
K="dx_bitwise or dw_bitwise or batch_size_and_slice or strided_rows or test_backward or gradient_of_one \
or empty_batch or compiled_fullgraph or cuda_graph or dw_bitwise_at_every_depth"
run_tests() {  # variant log filter files...: the variant tree's tests with its own package and build
  local v=$1 log=$2 k=$3 left
  shift 3
  left=$(( ${UNTIL:-560} - ($(date +%s) - begin) ))
  (( left > 30 )) || { echo "$log tests: not run, $left s left" >> "$R/tests.log"; return; }
  ( cd /tmp/variants/$v/tree && { [[ ! -d rmsnorm_conformance ]] || mv rmsnorm_conformance /tmp/variants/$v/shadow; } \
    && PYTHONPATH=/tmp/variants/$v/site RMSNORM_CUDA_BUILD_DIR=/tmp/variants/$v/build timeout -s INT "$left" \
       python3 -m pytest "$@" -n 8 -q -p no:cacheprovider -k "$k" ) > "$R/tests-$log.log" 2>&1
  echo "$log tests: exit $?, $(tail -1 "$R/tests-$log.log")" >> "$R/tests.log"
}
# The tree first: its Triton backend's tests on the GPU (the divisions by a power-of-two dim, now multiplies; the
# in-place fused add), and CUDA's in-place fused add (its refusals of overlapping x and residual).
run_tests base base-triton "test_" tests/test_triton_backend.py
run_tests base base-cuda "in_place or opcheck or compiled" tests/test_cuda_backend.py
# The Triton backward under 4, 5 and 6 stages (benchmarks/triton_tuning.py's BWD_VARIANTS), the tree's package.
( cd /tmp && PYTHONPATH=/tmp/variants/base/site timeout 180 python3 "$OLDPWD/benchmarks/triton_tuning.py" \
    --backward-variants --out "$R/triton-stages.json" ) > "$R/triton-stages.log" 2>&1
echo "triton stages: exit $?" >> "$R/tests.log"
# pow2 changes the forward's rms too: all of the CUDA backend's tests.
[[ -z ${ONLY:-} || $ONLY == pow2 ]] && run_tests pow2 pow2 "test_" tests/test_cuda_backend.py
for v in ${ONLY:-paired l2stack}; do [[ $v == pow2 ]] || run_tests "$v" "$v" "$K" tests/test_cuda_backend.py; done
echo "done: $(( $(date +%s) - begin )) s" >> "$R/tests.log"
tar czf "$OUT/run62.tgz" -C "$OUT" run62 && rm -rf "$R"  # one file back (the device returns at most eight)
