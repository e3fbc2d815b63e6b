#!/usr/bin/env bash
# Kernels run 16: the tree with run 15's lean backward indexing (bwd-lean-indexing.patch, applied after run 15
# measured it: 0.791 -> 0.873 of a copy at 65536x4096 bf16, 0.897 -> 0.918 at 2097152x128, its 95 backward tests
# bitwise native). From the tree's wheel: the CUDA build, every CUDA test, the committed benchmark (Liger-Kernel's
# wheel in .whl/, carried) and the parity and modes gate for native, Triton and CUDA. From the tree's root on a
# fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run16/call.sh
set -u
R=${OUT:?OUT=folder}/run16
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=${DEADLINE:-400} STAGES="build test_cuda bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
( cd "$(mktemp -d)" && timeout 150 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda \
  --device=cuda --modes=compile,cudagraph -k test_bitwise_parity -n 8 -q -p no:cacheprovider \
  --report="$R/parity.md" ) > "$R/parity.log" 2>&1
echo "parity gate exit $?" >> "$R/parity.log"
