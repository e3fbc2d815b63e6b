#!/usr/bin/env bash
# Run 54: the gradient calibration on the GPU again (run 52's), with its left-to-right order left to right at every
# dim: the script of run 52 summed dims above 4096 in blocks of 256 (as it still sums dw's rows). From the tree's
# root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run54/call.sh
set -u
R=${OUT:?OUT=folder}/run54
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . > "$R/runs.log" 2>&1 \
  && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl/*.whl >> "$R/runs.log" 2>&1
mv rmsnorm_conformance /tmp/
timeout 400 python3 benchmarks/calibrate_gradients.py --device cuda --out "$R/calibration-gradients-cuda.md" \
  > "$R/calibration.log" 2>&1
echo "calibration exit $? after $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run54.tgz" -C "$OUT" run54 && rm -rf "$R"  # one file back (the device returns at most eight)
