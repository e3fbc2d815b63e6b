#!/usr/bin/env bash
# Kernels run 21: the tree with run 20's pick (the Triton backward's loop pipelined three stages deep at every dim,
# four tiles an iteration: 0.614 -> 0.676 of a copy at 65536x4096 and 0.756 -> 0.814 at 2097152x128 in run 20's
# sweep). From the tree's wheel: the CUDA build, the Triton backend's GPU tests, the committed benchmark regenerated
# (Liger-Kernel's wheel in .whl/, carried), the parity and modes gate for native, Triton and CUDA. From the tree's
# root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run21/call.sh
set -u
R=${OUT:?OUT=folder}/run21
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=${DEADLINE:-330} STAGES="build test_triton bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
( cd "$(mktemp -d)" && timeout 150 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda \
  --device=cuda --modes=compile,cudagraph -k test_bitwise_parity -n 8 -q -p no:cacheprovider \
  --report="$R/parity.md" ) > "$R/parity.log" 2>&1
echo "parity gate exit $?" >> "$R/parity.log"
