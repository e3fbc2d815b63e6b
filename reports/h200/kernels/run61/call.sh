#!/usr/bin/env bash
# Kernels run 61: the CUDA backend's tests on the H200 after the compile check's cache (backends/cuda_rmsnorm/_build.py:
# the kernel units' commands split out, a cache of compiled units, the warm-up entry that needs no torch). From the
# tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run61/call.sh
set -u
mkdir -p "$OUT/r"
(python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
 timeout 480 python3 -m pytest tests/test_cuda_backend.py -n 8 -q -p no:cacheprovider 2>&1 | tail -15) > "$OUT/r/log.txt" 2>&1
