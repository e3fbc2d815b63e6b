#!/usr/bin/env bash
# Run 10, call b: the tree as committed (the fp16 forward's 128 threads at head_dim, Triton's fused add at four rows
# a program) from its wheel: the CUDA build, both backends' GPU tests, the committed benchmark (Liger-Kernel's wheel
# in .whl/), then the parity and modes gate, then one backend's time to verdict twice (CUDA, cold; the verdict's
# run 16). From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run10/call-b.sh
set -u
R=${OUT:?OUT=folder}/run10b
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=${DEADLINE:-300} STAGES="build test_cuda test_triton bench" APPLY_PICKS=0 \
  bash benchmarks/h200_kernels_run.sh
( cd "$(mktemp -d)" && timeout 120 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda \
  --device=cuda --modes=compile,cudagraph -k test_bitwise_parity -n 8 -q -p no:cacheprovider \
  --report="$R/parity.md" ) > "$R/parity.log" 2>&1
echo "parity gate exit $?" >> "$R/parity.log"
tail -2 "$R/parity.log"; cat "$R/k/logs/stages.log"
mkdir -p "$R/verdict"
OUT=$R/verdict VERDICT_LIMIT=90 VERDICT_TAG=-1 bash benchmarks/h200_verdict.sh bytecode cuda-cold
OUT=$R/verdict VERDICT_LIMIT=90 VERDICT_TAG=-2 bash benchmarks/h200_verdict.sh bytecode cuda-cold
