#!/usr/bin/env bash
# Run 30: the time to verdict with every condition of a backend call read back from the GPU at once (one wait for
# the guard zones, the views, the earlier outputs and the inputs, after run 29's one wait each of them): Triton cold,
# the README's RL command to its end (native, Triton, CUDA and Liger-Kernel, two parity pairs,
# --modes=compile,cudagraph, -n 8), CUDA cold, Triton cold again. From the wheel in an empty folder, Liger-Kernel's
# wheel in .whl/ (carried). From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run30-call.sh
set -u
R=${OUT:?OUT=folder}/run30
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-1 bash benchmarks/h200_verdict.sh bytecode triton-cold 2>&1 | tail -2 >> "$R/runs.log"
OUT=$R RL_LIMIT=300 bash benchmarks/h200_verdict.sh bytecode rl 2>&1 | tail -2 >> "$R/runs.log"
OUT=$R VERDICT_LIMIT=120 bash benchmarks/h200_verdict.sh bytecode cuda-cold 2>&1 | tail -2 >> "$R/runs.log"
OUT=$R VERDICT_LIMIT=100 VERDICT_TAG=-2 bash benchmarks/h200_verdict.sh bytecode triton-cold 2>&1 | tail -2 >> "$R/runs.log"
