#!/usr/bin/env bash
# Kernels run 65: the CUDA and Triton backends' whole GPU test files on the tree as committed after runs 62-64 (the
# CUDA in-place refusal checked before the fast entry, Triton's six backward stages), the package installed editable.
# From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run65/call.sh
set -u
R=${OUT:?OUT=folder}/run65
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$R/install.log" 2>&1
for f in cuda triton; do
  timeout -s INT "${LIMIT:-240}" python3 -m pytest "tests/test_${f}_backend.py" -n 8 -q -p no:cacheprovider \
    --junitxml="$R/test_${f}_backend.junit.xml" > "$R/test_${f}_backend.log" 2>&1
  echo "$f: exit $?, $(tail -1 "$R/test_${f}_backend.log"), $(( $(date +%s) - begin )) s" >> "$R/call.log"
done
tar czf "$OUT/run65.tgz" -C "$OUT" run65 && rm -rf "$R"  # one file back (the device returns at most eight)
