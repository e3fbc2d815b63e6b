#!/usr/bin/env bash
# Kernels run 23: the Triton backward with 16 warps a row at 4096 (benchmarks/triton_tuning.py --backward-variants,
# run 23's variants: 2, 4 or 8 tiles an iteration, 2-4 stages), each against a copy in the same process and bit for
# bit against the default; then, where a variant beats the default at its worst shape, the Triton backend's GPU tests
# under it (run17/retune.py). From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run23/call.sh
set -u
R=${OUT:?OUT=folder}/run23
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
start=$(date +%s)
timeout 200 python3 benchmarks/triton_tuning.py --backward-variants --out "$R/variants.json" > "$R/variants.log" 2>&1
echo "sweep exit $? after $(( $(date +%s) - start )) s" >> "$R/variants.log"
pick=$(python3 -c "
import json, sys
d = json.load(open(sys.argv[1])); best = d['best']
variants = dict((v['variant'], v['fields']) for v in d['backward_variants'])
print(json.dumps(variants[best['label']]) if best['label'] != 'default' else '')" "$R/variants.json")
if [ -n "$pick" ]; then
  RETUNE_BWD="$pick" PYTHONPATH=reports/h200/kernels/run17 timeout 170 python3 -m pytest -p retune \
    tests/test_triton_backend.py -n 8 -q -p no:cacheprovider --tb=short > "$R/test_triton.log" 2>&1
  echo "tests under $pick: exit $? after $(( $(date +%s) - start )) s" >> "$R/test_triton.log"
fi
