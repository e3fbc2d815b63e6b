#!/usr/bin/env bash
# Kernels run 13: the Triton forward with whole rows loaded as [rows, columns] (flat, the tree's new default) against
# the 3-D tile, at the four target shapes in bf16 and fp16; then, on the tree as it is, the CUDA build, Triton's GPU
# tests (both layouts bitwise native), the committed benchmark (Liger-Kernel's wheel in .whl/) and the parity and
# modes gate. From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run13/call.sh
set -u
R=${OUT:?OUT=folder}/run13
mkdir -p "$R"
TREE=$PWD
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
(cd /tmp && timeout 240 python3 "$TREE/benchmarks/forward_tuning.py" --backend triton --out "$R/triton-forward.json" \
  --shapes 65536x4096,2097152x128,16384x8192,4096x4096 --dtypes bfloat16,float16 \
  --tries 1024/1024/1/16/0,1024/1024/1/16/1,2048/2048/1/16/1,512/1024/1/16/1 > "$R/triton-forward.log" 2>&1
 echo "exit $?" >> "$R/triton-forward.log")
OUT=$R/k DEADLINE=${DEADLINE:-330} STAGES="build test_triton bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
( cd "$(mktemp -d)" && timeout 150 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda \
  --device=cuda --modes=compile,cudagraph -k test_bitwise_parity -n 8 -q -p no:cacheprovider \
  --report="$R/parity.md" ) > "$R/parity.log" 2>&1
echo "parity gate exit $?" >> "$R/parity.log"
