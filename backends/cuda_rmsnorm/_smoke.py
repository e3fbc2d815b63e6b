"""Every kernel variant launched once on small inputs: a run to put under compute-sanitizer.

Covers each dtype, every launch shape (one thread per row, rows sharing a warp or a block, a block per
row, four chunks per thread, the looping kernels), aligned and misaligned rows, a misaligned weight, and
the backward of both outputs.
"""

from __future__ import annotations

import torch

SMOKE_DIMS: tuple[int, ...] = (1, 7, 128, 1000, 1001, 4096, 8192, 20000, 70000)


def run(device: str = "cuda") -> list[str]:
    """Launch every variant and synchronize; returns one line per (dtype, dim)."""
    from . import CudaRMSNormOp

    op = CudaRMSNormOp()
    gen = torch.Generator().manual_seed(0)
    lines = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for dim in SMOKE_DIMS:
            rows = 67
            x = torch.randn(rows, dim, generator=gen).to(device=device, dtype=dtype)
            w = torch.randn(dim, generator=gen).to(device=device, dtype=dtype)
            wide = torch.randn(rows, dim + 3, generator=gen).to(device=device, dtype=dtype)
            w_buffer = torch.randn(dim + 1, generator=gen).to(device=device, dtype=dtype)
            for xs, ws in ((x, w), (wide[:, 1:1 + dim], w), (x, w_buffer[1:])):
                op.forward(xs, ws)
                op.forward_fp32(xs, ws)
                for fn in (op.forward, op.forward_fp32):
                    xg = xs.detach().requires_grad_(True)
                    wg = ws.detach().requires_grad_(True)
                    fn(xg, wg).sum().backward()
            torch.cuda.synchronize(device)
            lines.append(f"smoke {str(dtype).removeprefix('torch.')} dim {dim}: ok")
    return lines
