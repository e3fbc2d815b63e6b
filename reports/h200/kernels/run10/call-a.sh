#!/usr/bin/env bash
# Run 10, call a: the backward with the weight staged in fp32 (w32), the fp16 forward in the row kernel (row16) and
# with its second pass widened by the ALU (rowalu, run 9's next try), each against the committed tree (base), built
# side by side and measured one after another in one call. Then the GPU tests on w32. From the tree's root:
#   OUT=<folder> bash reports/h200/kernels/run10/call-a.sh
set -u
R=${OUT:?OUT=folder}/run10a
P=reports/h200/kernels
mkdir -p "$R"
M='case $V in base|w32)
  python3 $ROOT/benchmarks/kernel_sweep.py --quick --kinds backward --dtype bfloat16 --out $VOUT/sweep-bwd-bf16.json
  python3 $ROOT/benchmarks/kernel_sweep.py --quick --kinds backward --dtype float16 --out $VOUT/sweep-bwd-f16.json;;
esac
case $V in base|row16|rowalu)
  python3 $ROOT/benchmarks/kernel_sweep.py --quick --kinds forward --dtype float16 --out $VOUT/sweep-fwd-f16.json;;
esac'
OUT=$R/v DEADLINE=${DEADLINE:-420} VARIANTS="base:- w32:$P/run10/a-w32.patch row16:$P/run10/a-row16.patch \
rowalu:$P/run9/next-rowalu.patch" MEASURE="$M" bash benchmarks/h200_variants.sh
( cd /tmp/variants/w32/tree && rm -rf rmsnorm_conformance && pip install -q --no-deps /tmp/variants/w32/whl/*.whl \
  && RMSNORM_CUDA_BUILD_DIR=/tmp/variants/w32/build timeout 150 python3 -m pytest tests/test_cuda_backend.py -n 8 -q \
  -p no:cacheprovider ) > "$R/test_cuda-w32.log" 2>&1
echo "tests exit $?" >> "$R/test_cuda-w32.log"
tail -3 "$R/test_cuda-w32.log"
grep -rh "" "$R"/v/summary.log
