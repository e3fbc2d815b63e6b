#!/usr/bin/env bash
# Kernels run 22: the Triton backward's run-22 variants around the default of run 21 (benchmarks/triton_tuning.py
# --backward-variants: rows a tile, warps, rows a program and tiles an iteration at 128; a fourth stage and two tiles
# an iteration at both shapes), each against a copy in the same process and bit for bit against the default. From
# the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run22/call.sh
set -u
R=${OUT:?OUT=folder}/run22
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
start=$(date +%s)
timeout 240 python3 benchmarks/triton_tuning.py --backward-variants --out "$R/variants.json" > "$R/variants.log" 2>&1
echo "sweep exit $? after $(( $(date +%s) - start )) s" >> "$R/variants.log"
# The same call's machine, right after (the CUDA backward's launch configurations, BACKWARD_TRIES, after the lean
# indexing of run 15; its extension built by the first import):
#   python3 benchmarks/kernel_sweep.py --kinds backward --out "$R/cuda-bwd-sweep.json" > "$R/cuda-bwd-sweep.log"
