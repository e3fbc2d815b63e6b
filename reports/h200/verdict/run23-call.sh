#!/usr/bin/env bash
# Run 23: the README's RL command (native, Triton, CUDA and Liger-Kernel, two parity pairs, --modes=compile,cudagraph,
# -n 8) to its end on the current tree (its --deadline far enough out that the run finishes), then CUDA cold: one
# backend's time to verdict after this round's changes (a worker's exit without the interpreter's teardown). From the
# wheel in an empty folder, Liger-Kernel's wheel in .whl/ (carried). From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run23-call.sh
set -u
R=${OUT:?OUT=folder}/run23
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
OUT=$R RL_LIMIT=400 bash benchmarks/h200_verdict.sh bytecode rl 2>&1 | tail -5 > "$R/rl.log"
OUT=$R bash benchmarks/h200_verdict.sh bytecode cuda-cold 2>&1 | tail -5 > "$R/cuda-cold.log"
