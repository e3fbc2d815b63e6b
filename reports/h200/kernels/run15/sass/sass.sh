#!/bin/bash
# usage: sass.sh <tree> <name> <outdir>
# Compiles <tree>'s backward_bf16.cu for sm_90 with the build's flags (those of _build.py's compile check:
# torch's defines, -O3 -lineinfo -fmad=false, C++20), prints ptxas' registers and spills, and writes
# <outdir>/<name>_k2.lst: backward_kernel<bf16, bf16, 2> as "address line instruction", the input of run_*.py.
set -e
T=$1; N=$2; O=$3
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${NVBIN:-$REPO/.venv/lib/python3.11/site-packages/triton/backends/nvidia/bin}  # cuobjdump/nvdisasm
mkdir -p "$O"
cd "$T/backends/cuda_rmsnorm"
nvcc -cubin backward_bf16.cu -o "$O/$N.cubin" -I. -std=c++20 -D__CUDA_NO_HALF_OPERATORS__ \
  -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ \
  --expt-relaxed-constexpr -O3 -lineinfo -fmad=false -gencode=arch=compute_90,code=sm_90 -Xptxas=-v 2> "$O/$N.ptxas"
grep -A3 "backward_kernelI13__nv_bfloat16S2_Li2E" "$O/$N.ptxas" | sed -n 3,4p
"$BIN/nvdisasm" -g -c "$O/$N.cubin" > "$O/$N.nvd"
python3 "$HERE/lines.py" "$O/$N.nvd" 'backward_kernelI13__nv_bfloat16S2_Li2E' > "$O/${N}_k2.lst"
