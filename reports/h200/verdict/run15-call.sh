#!/usr/bin/env bash
# Run 15: one backend (CUDA, cold) with the workers' compile-stack import at their start, then without it
# (RMSNORM_CONFORMANCE_WARM_UP=build: the controller's build alone, as in runs 12-14), then with it again; then
# README's RL command with one worker per core of the machine (-n 16). From the tree's root on a fresh GPU machine,
# Liger-Kernel's wheel in .whl/:
#   OUT=<folder> bash reports/h200/verdict/run15-call.sh
set -u
R=${OUT:?OUT=folder}/run15
mkdir -p "$R"
OUT=$R VERDICT_LIMIT=110 VERDICT_TAG=-1 bash benchmarks/h200_verdict.sh bytecode cuda-cold
RMSNORM_CONFORMANCE_WARM_UP=build OUT=$R VERDICT_LIMIT=110 bash benchmarks/h200_verdict.sh bytecode cuda-cold
OUT=$R VERDICT_LIMIT=110 VERDICT_TAG=-2 bash benchmarks/h200_verdict.sh bytecode cuda-cold
VERDICT_WORKERS=16 VERDICT_TAG=-n16 OUT=$R RL_LIMIT=${RL_LIMIT:-250} bash benchmarks/h200_verdict.sh bytecode rl
