#!/usr/bin/env bash
# Kernels run 58: the committed benchmark with the forward and the fused add measured in rounds (benchmarks/bench.py
# --rounds, default 5 on a GPU: the copy and every subject in turns, the medians over rounds, each round's ratio
# beside them), after runs 56 and 57 read one forward kernel at 0.917-0.994 of a copy between measurements at
# 4096x4096. Liger-Kernel's wheel in .whl/ (carried). From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run58/call.sh
set -u
R=${OUT:?OUT=folder}/run58
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl58 . \
  && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl58/*.whl > "$R/call.log" 2>&1
mv rmsnorm_conformance /tmp/rmsnorm_conformance_source  # the source folder would shadow the installed package
OUT=$R/k DEADLINE=520 STAGES="build bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
echo "done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run58.tgz" -C "$OUT" run58 && rm -rf "$R"  # one file back (the device returns at most eight)
