#!/usr/bin/env bash
# Kernels run 14: the session's final tree (the Triton forward's 2-D tile, two vector widths a padded width, the
# compile check to machine code) from its wheel: the CUDA build, both backends' GPU tests and the parity and modes
# gate. From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run14/call.sh
set -u
R=${OUT:?OUT=folder}/run14
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=${DEADLINE:-330} STAGES="build test_cuda test_triton" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
( cd "$(mktemp -d)" && timeout 150 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda \
  --device=cuda --modes=compile,cudagraph -k test_bitwise_parity -n 8 -q -p no:cacheprovider \
  --report="$R/parity.md" ) > "$R/parity.log" 2>&1
echo "parity gate exit $?" >> "$R/parity.log"
