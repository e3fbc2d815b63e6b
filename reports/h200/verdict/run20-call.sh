#!/usr/bin/env bash
# Run 20: Triton's cold time to verdict with two vector widths a padded width (16 bytes or one element) against four
# (the largest power of two dividing the dim), as an A/B in one call on one machine: two wheels of the package built
# beforehand from the two trees (ab/a: four widths, ab/b: two), run a, b, b, a, every cache cleared before each run.
# From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run20-call.sh
set -u
R=${OUT:?OUT=folder}/run20
mkdir -p "$R"
mv rmsnorm_conformance /tmp/  # the runs start in empty folders anyway; nothing here may shadow the installed wheel
for v in a b b a; do
  python3 -m pip install -q --no-deps --force-reinstall ab/$v/*.whl
  n=$(ls "$R" | grep -c "^triton-cold-$v" || true)
  OUT=$R VERDICT_LIMIT=125 VERDICT_TAG=-$v$n bash benchmarks/h200_verdict.sh bytecode triton-cold
  find ~/.triton/cache -name '*.json' ! -name '__grp__*' -printf '%f\n' | sed 's/\.json$//' | sort | uniq -c \
    | sort -rn > "$R/census-$v$n.txt"
done
