#!/usr/bin/env bash
# Kernels run 12: Nsight Compute on one launch each of the CUDA and Triton forwards at 65536x4096 and 2097152x128
# (bf16), for what bounds Triton's forward at head_dim (run 11); then Triton's time to verdict from a cold machine and
# a census of the binaries its cache then holds, by kernel. From the tree's root, on the GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run12/call.sh
set -u
R=${OUT:?OUT=folder}/run12
mkdir -p "$R"
TREE=$PWD
(cd /tmp && python3 -c 'import rmsnorm_conformance.backends.triton_rmsnorm') 2>/dev/null || {
  python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && \
  python3 -m pip install -q --no-deps --force-reinstall /tmp/whl/*.whl; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
(cd /tmp && timeout 300 "$NCU" --set full --nvtx --nvtx-include "prof/" --clock-control none -o "$R/forward-peers" \
  python3 "$TREE/benchmarks/profile_kernels.py" --forward-peers > "$R/forward-peers.log" 2>&1
 "$NCU" --import "$R/forward-peers.ncu-rep" --page details > "$R/forward-peers.txt" 2>&1)
rm -f "$R/forward-peers.ncu-rep"
OUT=$R VERDICT_LIMIT=150 bash benchmarks/h200_verdict.sh bytecode triton-cold > "$R/verdict.log" 2>&1
# The census: each binary of Triton's cache is a folder holding <kernel name>.json beside its code.
find ~/.triton/cache -name '*.json' ! -name '__grp__*' -printf '%f\n' | sed 's/\.json$//' | sort | uniq -c \
  | sort -rn > "$R/triton-cache-census.txt"
