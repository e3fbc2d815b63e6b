#!/usr/bin/env bash
# Kernels run 55: the Triton backward under a cap on registers a thread (80, 72, 64; benchmarks/triton_tuning.py's
# BWD_VARIANTS), bf16 dx + dw at 65536x4096 and 2097152x128, each against a copy in the same process and bit for bit
# against the default. From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run55/call.sh
set -u
R=${OUT:?OUT=folder}/run55
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
start=$(date +%s)
timeout 300 python3 benchmarks/triton_tuning.py --backward-variants --out "$R/variants.json" > "$R/variants.log" 2>&1
echo "sweep exit $? after $(( $(date +%s) - start )) s" >> "$R/variants.log"
tar czf "$OUT/run55.tgz" -C "$OUT" run55 && rm -rf "$R"  # one file back (the device returns at most eight)
