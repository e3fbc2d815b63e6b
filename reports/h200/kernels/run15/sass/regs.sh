#!/bin/bash
# usage: regs.sh <tree> ; prints regs/spills/smem for every backward_kernel of the three backward units
T=$1
cd $T/backends/cuda_rmsnorm
for u in backward_bf16 backward_f16 backward_f32; do
  nvcc -cubin $u.cu -o /tmp/sass/regs_$u.cubin -I. -std=c++20 -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr -O3 -lineinfo -fmad=false -gencode=arch=compute_90,code=sm_90 -Xptxas=-v 2>&1 | python3 -c "
import sys,re
name=None
for l in sys.stdin:
    m=re.search(r\"Compiling entry function '(\S+)'\",l)
    if m: name=m.group(1); continue
    m=re.search(r'(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads',l)
    if m and name: spill=m.groups(); continue
    m=re.search(r'Used (\d+) registers',l)
    if m and name and 'backward_kernel' in name:
        k=re.search(r'backward_kernelI(.*?)EEvNS',name).group(1)
        print('$u',k.replace('13__nv_bfloat16','bf16').replace('6__half','f16'),'regs',m.group(1),'stack/spill st/ld',*spill)
"
done
