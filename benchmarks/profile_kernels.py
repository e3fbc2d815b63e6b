"""One launch of each CUDA kernel of interest inside an NVTX range named ``prof``, after warm-up launches outside
it, for Nsight Compute:

    ncu --set full --nvtx --nvtx-include "prof/" --clock-control none -o prof python benchmarks/profile_kernels.py

With ``--triton-backward``: the Triton backward instead, under the code's tuning and under each tuning named
in TRITON_BACKWARD_TUNINGS (fields of its _GPU_BWD), one launch of each at both shapes.

With ``--forward-peers``: the forward of CUDA and of Triton, one launch of each at both shapes: where kernels that
compute the same bits differ in achieved bandwidth, occupancy and stalls.

With ``--unmet``: the CUDA launches whose targets were not met on an H200: the backward in bf16 at both shapes, and
the forward at 16384 x 8192 in fp16 beside bf16 (both on the row kernel now; the fp16 one was a staged kernel
before).

With ``--unmet-forward``: the forward launches below 0.97 of a copy in the committed benchmark, 16384 x 8192 and
4096 x 4096 in bf16 and fp16, of CUDA, of Triton and of Liger-Kernel where it is installed (the peer that reaches
the same figure, or not, at the same shape): how evenly the multiprocessors are kept busy (the workload
distribution), the bandwidth reached, occupancy and stalls.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

SHAPES = ((65536, 4096), (2097152, 128))


def profile_once(call: Any, *args: Any) -> None:
    """``call(*args)`` once outside the ``prof`` range (compiles, caches), then once inside it."""
    call(*args)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("prof")
    call(*args)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


def profile_shape(op: Any, backward: Any, rows: int, dim: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(dim)
    x = torch.randn(rows, dim, device="cuda", generator=gen).bfloat16()
    r = torch.randn(rows, dim, device="cuda", generator=gen).bfloat16()
    g = torch.randn(rows, dim, device="cuda", generator=gen).bfloat16()
    w = torch.randn(dim, device="cuda", generator=gen).bfloat16()
    profile_once(op.forward, x, w, 1e-6)
    profile_once(op.fused_add, x, r, w, 1e-6)
    profile_once(backward, g, x, w, 1e-6, True)


# _GPU_BWD fields of the Triton backward tunings profiled besides the code's own: the pipelined loop at 4096 with
# 16 warps a row, measured on an H200 at 0.44 of a copy against the prefetching loop's 0.61 with half the registers
# a thread.
TRITON_BACKWARD_TUNINGS: tuple[dict, ...] = (
    {"prefetch": False, "stages": 3, "staged_rows": 1, "warp_elems": 256},
)


def profile_triton_backward() -> int:
    import rmsnorm_conformance.backends.triton_rmsnorm as tr

    base = tr._GPU_BWD
    for rows, dim in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(dim)
        x = torch.randn(rows, dim, device="cuda", generator=gen).bfloat16()
        g = torch.randn(rows, dim, device="cuda", generator=gen).bfloat16()
        w = torch.randn(dim, device="cuda", generator=gen).bfloat16()
        for fields in ({}, *TRITON_BACKWARD_TUNINGS):
            tr._GPU_BWD = base._replace(**fields)
            tr.launch_config.cache_clear()
            profile_once(tr._backward, x, w, g, 1e-6, True, True)
        tr._GPU_BWD = base
        del x, g, w
        torch.cuda.empty_cache()
    return 0


def profile_forward_peers() -> int:
    import rmsnorm_conformance.backends.triton_rmsnorm as tr
    from rmsnorm_conformance.backends.cuda_rmsnorm import CudaRMSNormOp, _ops

    op, triton_op = CudaRMSNormOp(), tr.TritonRMSNormOp()
    _ops.require(torch.device("cuda"))
    for rows, dim in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(dim)
        x = torch.randn(rows, dim, device="cuda", generator=gen).bfloat16()
        w = torch.randn(dim, device="cuda", generator=gen).bfloat16()
        for call in (op.forward, triton_op):
            profile_once(call, x, w, 1e-6)
        torch.cuda.empty_cache()
    return 0


def profile_unmet() -> int:
    from rmsnorm_conformance.backends.cuda_rmsnorm import CudaRMSNormOp, _ops

    op = CudaRMSNormOp()
    _ops.require(torch.device("cuda"))
    backward = _ops.op("rms_norm_backward")
    for rows, dim in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(dim)
        x = torch.randn(rows, dim, device="cuda", generator=gen).bfloat16()
        g = torch.randn(rows, dim, device="cuda", generator=gen).bfloat16()
        w = torch.randn(dim, device="cuda", generator=gen).bfloat16()
        profile_once(backward, g, x, w, 1e-6, True)
    for dtype in (torch.float16, torch.bfloat16):
        gen = torch.Generator(device="cuda").manual_seed(8192)
        x = torch.randn(16384, 8192, device="cuda", generator=gen).to(dtype)
        w = torch.randn(8192, device="cuda", generator=gen).to(dtype)
        profile_once(op.forward, x, w, 1e-6)
    return 0


UNMET_FORWARD_SHAPES = ((16384, 8192), (4096, 4096))


def profile_unmet_forward() -> int:
    import importlib.util

    import rmsnorm_conformance.backends.triton_rmsnorm as tr
    from rmsnorm_conformance.backends.cuda_rmsnorm import CudaRMSNormOp, _ops

    op, triton_op = CudaRMSNormOp(), tr.TritonRMSNormOp()
    _ops.require(torch.device("cuda"))
    calls: list[Any] = [op.forward, triton_op]
    if importlib.util.find_spec("liger_kernel") is not None:
        from rmsnorm_conformance.backends.liger import LigerRMSNorm

        calls.append(LigerRMSNorm().forward)
    for dtype in (torch.bfloat16, torch.float16):
        for rows, dim in UNMET_FORWARD_SHAPES:
            gen = torch.Generator(device="cuda").manual_seed(dim)
            x = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
            w = torch.randn(dim, device="cuda", generator=gen).to(dtype)
            for call in calls:
                profile_once(call, x, w, 1e-6)
            del x, w
            torch.cuda.empty_cache()
    return 0


def main() -> int:
    if "--unmet-forward" in sys.argv:
        return profile_unmet_forward()
    if "--unmet" in sys.argv:
        return profile_unmet()
    if "--triton-backward" in sys.argv:
        return profile_triton_backward()
    if "--forward-peers" in sys.argv:
        return profile_forward_peers()
    from rmsnorm_conformance.backends.cuda_rmsnorm import CudaRMSNormOp, _ops

    op = CudaRMSNormOp()
    _ops.require(torch.device("cuda"))
    backward = _ops.op("rms_norm_backward")
    for rows, dim in SHAPES:
        profile_shape(op, backward, rows, dim)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
