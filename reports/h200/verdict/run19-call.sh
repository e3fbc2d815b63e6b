#!/usr/bin/env bash
# Run 19: where Triton's one-backend time to verdict goes between compiles and tests, on a fresh machine. Triton
# cold (every cache cleared), then the same run with Triton's cache kept and Inductor's cleared, then with both
# kept: the differences bound what compiling ahead (or caching) could save. From the tree's root:
#   OUT=<folder> bash reports/h200/verdict/run19-call.sh
set -u
R=${OUT:?OUT=folder}/run19
mkdir -p "$R"
export VERDICT_LIMIT=150
OUT=$R bash benchmarks/h200_verdict.sh bytecode triton-cold
rm -rf "${TMPDIR:-/tmp}/torchinductor_$(id -un)"
OUT=$R VERDICT_TAG=-triton-cache-kept bash benchmarks/h200_verdict.sh bytecode triton
OUT=$R VERDICT_TAG=-both-caches-kept bash benchmarks/h200_verdict.sh bytecode triton
du -sh ~/.triton/cache "${TMPDIR:-/tmp}/torchinductor_$(id -un)" > "$R/cache-sizes.txt" 2>&1
find ~/.triton/cache -name '*.cubin' | wc -l >> "$R/cache-sizes.txt"
