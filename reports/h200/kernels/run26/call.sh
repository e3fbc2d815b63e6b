#!/usr/bin/env bash
# Kernels run 26: the tree after verdict run 48 (the Triton dw passes in one tile of 64 rows on a GPU, whose
# benchmark and parity gate have not run since run 24). From the tree's wheel: the CUDA build, the Triton backend's
# GPU tests, the committed benchmark regenerated (Liger-Kernel's wheel in .whl/, carried), the parity and modes
# gate for native, Triton and CUDA; then Nsight Compute on the forward launches still under 0.97 of a copy
# (benchmarks/profile_kernels.py --unmet-forward: CUDA, Triton and Liger-Kernel at 16384x8192 and 4096x4096, bf16
# and fp16). From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run26/call.sh
set -u
R=${OUT:?OUT=folder}/run26
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=${DEADLINE:-300} STAGES="build test_triton bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
echo "kernels done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
( cd "$(mktemp -d)" && timeout 150 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda \
  --device=cuda --modes=compile,cudagraph -k test_bitwise_parity -n 8 -q -p no:cacheprovider \
  --report="$R/parity.md" ) > "$R/parity.log" 2>&1
echo "parity gate exit $?" >> "$R/parity.log"
echo "parity done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} timeout 110 "$NCU" --set full --nvtx --nvtx-include "prof/" \
  --clock-control none -f -o /tmp/prof python3 benchmarks/profile_kernels.py --unmet-forward > "$R/ncu.log" 2>&1
echo "ncu exit $? after $(( $(date +%s) - begin )) s" >> "$R/ncu.log"
[ -f /tmp/prof.ncu-rep ] && "$NCU" --import /tmp/prof.ncu-rep --page details > "$R/ncu-unmet-forward.txt" 2>&1
echo "done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run26.tgz" -C "$OUT" run26 && rm -rf "$R"  # one file back (the device returns at most eight)
