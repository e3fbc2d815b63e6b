#!/usr/bin/env bash
# Kernels run 24 (committed, not run yet): the tree after run 22 (the Triton backward pipelined at every dim, four
# tiles an iteration where a tile holds several rows, two where it is one row, one at dims that are no multiple of 16
# bytes; kernels run 22's section). From the tree's wheel: the CUDA build, the Triton backend's GPU tests, the
# committed benchmark regenerated (Liger-Kernel's wheel in .whl/, carried), the parity and modes gate for native,
# Triton and CUDA. From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run24/call.sh
set -u
R=${OUT:?OUT=folder}/run24
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=${DEADLINE:-330} STAGES="build test_triton bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
( cd "$(mktemp -d)" && timeout 150 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda \
  --device=cuda --modes=compile,cudagraph -k test_bitwise_parity -n 8 -q -p no:cacheprovider \
  --report="$R/parity.md" ) > "$R/parity.log" 2>&1
echo "parity gate exit $?" >> "$R/parity.log"
