#!/usr/bin/env bash
# Run 24: one backend's cold time to verdict on the current tree, Triton twice and CUDA once in one call (CUDA ran
# 47.3 s in run 23 against 54-62 s in runs 15-18: machines differ, so both backends are timed on one). From the wheel
# in an empty folder; from the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run24-call.sh
set -u
R=${OUT:?OUT=folder}/run24
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
for stage in triton-cold cuda-cold triton-cold; do
  n=$(ls "$R" | grep -c "^$stage.*\.md$" || true)
  OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-$n bash benchmarks/h200_verdict.sh bytecode $stage 2>&1 | tail -2 >> "$R/runs.log"
done
