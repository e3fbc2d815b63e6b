"""SASS instructions a function has (static, every path), from ``cuobjdump -sass`` of a cubin: how the lean row kernel
compares with the general one in size (kernels run 27).

    nvcc -O3 -lineinfo -fmad=false -std=c++17 -gencode=arch=compute_90,code=sm_90 -cubin -I backends/cuda_rmsnorm \
        -o fwd_bf16.cubin backends/cuda_rmsnorm/forward_bf16.cu
    cuobjdump -sass fwd_bf16.cubin > fwd_bf16.sass   # the Triton 3.6 wheel carries a cuobjdump
    python count_static.py fwd_bf16.sass forward_row_kernel
"""

import re
import sys
from pathlib import Path


def main() -> None:
    path, word = sys.argv[1], sys.argv[2]
    name, counts = None, {}
    for line in Path(path).read_text().splitlines():
        found = re.search(r"Function : (\S+)", line)
        if found:
            name = found.group(1)
            counts[name] = 0
        elif name and re.search(r"/\*[0-9a-f]{4,}\*/\s+\S", line):
            counts[name] += 1
    for name, n in counts.items():
        if word in name:
            print(f"{n:6d}  {name}")


if __name__ == "__main__":
    main()
