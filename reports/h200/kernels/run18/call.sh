#!/usr/bin/env bash
# Kernels run 18: the tree with run 17's pick (the Triton backward's loop pipelined three stages deep where a tile
# holds several rows: 0.689 -> 0.755 of a copy at 2097152x128 in run 17's sweep). From the tree's wheel: the CUDA
# build, the Triton backend's GPU tests (both backward loops at every dim among them), the committed benchmark
# regenerated (Liger-Kernel's wheel in .whl/, carried), the parity and modes gate for native, Triton and CUDA, then
# an Nsight Compute profile of the Triton backward (the default and the 16-warp pipelined loop at 4096). From the
# tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run18/call.sh
set -u
R=${OUT:?OUT=folder}/run18
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=${DEADLINE:-300} STAGES="build test_triton bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
( cd "$(mktemp -d)" && timeout 150 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda \
  --device=cuda --modes=compile,cudagraph -k test_bitwise_parity -n 8 -q -p no:cacheprovider \
  --report="$R/parity.md" ) > "$R/parity.log" 2>&1
echo "parity gate exit $?" >> "$R/parity.log"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 100 "$NCU" --set full --nvtx --nvtx-include "prof/" -k regex:_rms_norm_bwd_kernel --clock-control none -f \
  -o /tmp/prof python3 benchmarks/profile_kernels.py --triton-backward > "$R/ncu.log" 2>&1
echo "ncu exit $?" >> "$R/ncu.log"
[ -f /tmp/prof.ncu-rep ] && "$NCU" --import /tmp/prof.ncu-rep --page details > "$R/ncu-triton-bwd.txt" 2>&1
