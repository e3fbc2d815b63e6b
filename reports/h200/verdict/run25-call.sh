#!/usr/bin/env bash
# Run 25: Triton's time to verdict cold and then with its caches kept (Triton's and Inductor's, from the cold run),
# on the current tree, in one call: what a cold run's compiling costs now, and whether the tests alone fit in 60 s.
# From the wheel in an empty folder; from the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run25-call.sh
set -u
R=${OUT:?OUT=folder}/run25
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
OUT=$R VERDICT_LIMIT=150 bash benchmarks/h200_verdict.sh bytecode triton-cold 2>&1 | tail -2 >> "$R/runs.log"
for n in 1 2; do
  OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-caches-kept-$n bash benchmarks/h200_verdict.sh bytecode triton 2>&1 | tail -2 >> "$R/runs.log"
done
