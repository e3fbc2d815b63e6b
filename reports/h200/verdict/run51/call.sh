#!/usr/bin/env bash
# Run 51: Triton cold as a fresh machine's first run (runs 46 and 48: 51.9 and 67.0 s; run 50 had it as a machine's
# second, 53.1 s), on the tree of kernels run 30; then, on the same machine, Nsight Compute on the CUDA launches whose
# targets are not met (benchmarks/profile_kernels.py --unmet: the backward in bf16 at 65536x4096 and 2097152x128,
# dw's final kernel after each, the forward at 16384x8192), for dw's final kernel's duration after its change (run
# 20's profile: 18.8 and 12.8 µs). From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run51/call.sh
set -u
R=${OUT:?OUT=folder}/run51
mkdir -p "$R"
begin=$(date +%s)
OUT=$R VERDICT_LIMIT=150 bash benchmarks/h200_verdict.sh bytecode triton-cold > "$R/runs.log" 2>&1
echo "verdict done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
mv rmsnorm_conformance /tmp/
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 150 "$NCU" --set full --nvtx --nvtx-include "prof/" --clock-control none -f -o /tmp/prof \
  python3 benchmarks/profile_kernels.py --unmet > "$R/ncu.log" 2>&1
echo "ncu exit $? after $(( $(date +%s) - begin )) s" >> "$R/ncu.log"
[ -f /tmp/prof.ncu-rep ] && "$NCU" --import /tmp/prof.ncu-rep --page details > "$R/ncu-unmet.txt" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
tar czf "$OUT/run51.tgz" -C "$OUT" run51 && rm -rf "$R"  # one file back (the device returns at most eight)
