"""Every kernel launched once on small inputs: a run to put under compute-sanitizer.

Covers each dtype, every launch shape (one thread per row with one or two groups, rows sharing a warp or a
block, a block per row, four groups a thread, the streaming kernels), aligned and misaligned rows, a
misaligned weight, the backward of both outputs, and every variant.
"""

from __future__ import annotations

import torch

SMOKE_DIMS: tuple[int, ...] = (1, 7, 16, 128, 1000, 1001, 4096, 8192, 16384, 20000, 70000)


def run(device: str = "cuda") -> list[str]:
    """Launch every kernel and synchronize; returns one line per (dtype, dim)."""
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
                op.forward_offset(xs, ws)
                op.forward_unweighted(xs)
                op.fused_add(xs, xs.clone(), ws)
                op.fused_add_(xs.clone(), xs.clone(), ws)
                for fn in (op.forward, op.forward_fp32):
                    xg = xs.detach().requires_grad_(True)
                    wg = ws.detach().requires_grad_(True)
                    fn(xg, wg).sum().backward()
            torch.cuda.synchronize(device)
            lines.append(f"smoke {str(dtype).removeprefix('torch.')} dim {dim}: ok")
    return lines
