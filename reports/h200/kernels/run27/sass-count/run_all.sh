#!/usr/bin/env bash
# The forwards' SASS instructions by class, per element of a row, on each one's main path (kernels run 27's "why"):
# Triton's forward (Triton 3.6, as the GPU machine has it, compiled for sm_90 with the backend's GPU tuning) against
# the CUDA row and staged kernels, all of commit cbd8227 (the staged forward kernel was removed after it). No GPU is
# needed: the Triton 3.6 wheel carries cuobjdump and nvdisasm; nvcc compiles the CUDA units with the build's flags.
#   git worktree add <dir> cbd8227 && SRC=<dir> bash reports/h200/kernels/run27/sass-count/run_all.sh
# The branch decisions of each main path (predicated branches taken or not) are written in classes.py and split.py
# for those binaries' addresses. Prints the table in table.txt.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "${SRC:?SRC=a checkout of commit cbd8227}" && pwd)
WORK=$(mktemp -d)
cp "$HERE"/*.py "$HERE"/row_f16.cu "$WORK"/
cd "$WORK"
python3 -m venv venv && venv/bin/pip install -q torch==2.13.0 triton==3.6.0 numpy
B=$(ls -d venv/lib/python3*/site-packages/triton/backends/nvidia/bin)
F="-O3 -lineinfo -fmad=false -std=c++17 -gencode=arch=compute_90,code=sm_90 -cubin"
nvcc $F -I"$SRC/backends/cuda_rmsnorm" -o fwd_f16.cubin "$SRC/backends/cuda_rmsnorm/forward_f16.cu"
nvcc $F -I"$SRC/backends/cuda_rmsnorm" -o fwd_bf16.cubin "$SRC/backends/cuda_rmsnorm/forward_bf16.cu"
nvcc $F -I"$SRC/backends/cuda_rmsnorm" -o row_f16.cubin row_f16.cu  # the fp16 row kernel, instantiated alone
SRC=$SRC venv/bin/python triton_fwd_sass.py 8192 float16 | grep -E "cfg|REG"
SRC=$SRC venv/bin/python triton_fwd_sass.py 4096 bfloat16 | grep -E "cfg|REG"
for c in fwd_f16 fwd_bf16 row_f16; do "$B/nvdisasm" -c -g $c.cubin > $c.dis; done
venv/bin/python cut.py fwd_f16.dis _ZN7rmsnorm6detail14forward_kernelI6__halfS2_LNS0_4ModeE0ELi4EEEvNS0_11ForwardArgsE > staged_f16.txt
venv/bin/python cut.py row_f16.dis _ZN7rmsnorm6detail18forward_row_kernelI6__halfS2_LNS0_4ModeE0ELi4EEEvNS0_11ForwardArgsE > row_f16.txt
venv/bin/python cut.py fwd_bf16.dis _ZN7rmsnorm6detail18forward_row_kernelI13__nv_bfloat16S2_LNS0_4ModeE0ELi4EEEvNS0_11ForwardArgsE > row_bf16.txt
"$B/nvdisasm" -c -g triton_fwd_float16_8192.cubin > triton_f16.txt
"$B/nvdisasm" -c -g triton_fwd_bfloat16_4096.cubin > triton_bf16.txt
for f in staged_f16 row_f16 row_bf16 triton_f16 triton_bf16; do venv/bin/python compact.py $f.txt > $f.c; done
venv/bin/python classes.py
venv/bin/python split.py
