#!/usr/bin/env bash
# Run 18: one backend's time to verdict (CUDA, cold) twice on a fresh machine, as in runs 15 and 16, after pytest's
# assertion rewriting was narrowed to the suites (harness/plugin/rewrite.py). From the tree's root:
#   OUT=<folder> bash reports/h200/verdict/run18-call.sh
set -u
R=${OUT:?OUT=folder}/run18
mkdir -p "$R"
OUT=$R VERDICT_LIMIT=100 VERDICT_TAG=-1 bash benchmarks/h200_verdict.sh bytecode cuda-cold
OUT=$R VERDICT_LIMIT=100 VERDICT_TAG=-2 bash benchmarks/h200_verdict.sh bytecode cuda-cold
