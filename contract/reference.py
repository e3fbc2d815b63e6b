"""The contract's reference: a pure-PyTorch fp32 RMSNorm whose bits cannot depend on the batch, on any device,
forward and backward, plus the fp64 oracle that bounds its error and the seed's formula for cross-checks.

torch's own reductions pick their reduction tree from the number of rows (aten's Reduce.cuh), so the sum
of squares here is a fixed pairwise tree built from elementwise adds only: pad the row to a power of two
with zeros, then add the two halves until one column is left. sqrt and division are correctly rounded.
The harness judges every backend against this module; the native backend is a thin adapter over it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .inputs import check_inputs


def sum_fixed_order(t: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim, keepdim, by a pairwise tree whose shape depends only on the dim's size.

    Zero padding to a power of two changes no sum except that of a row of -0.0 (to +0.0), which this
    module never sums.
    """
    size = t.shape[-1]
    width = 1 << max(size - 1, 0).bit_length()
    if width != size:
        t = F.pad(t, (0, width - size))
    while width > 1:
        width //= 2
        t = t[..., :width] + t[..., width:]
    return t


def sum_of_squares_fixed_order(x32: torch.Tensor) -> torch.Tensor:
    """Sum of squares over the last dim, keepdim, in the fixed order of :func:`sum_fixed_order`."""
    return sum_fixed_order(x32 * x32)


class _FixedOrderRMSNorm(torch.autograd.Function):
    """fp32 RMSNorm whose backward reduces in the same fixed order as its forward.

    Autograd through the forward's ops would reduce dx's row sum with torch's own reduction (the backward of
    a broadcast), whose order on CUDA depends on the number of rows: dx would not be batch-invariant.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x32: torch.Tensor, w32: torch.Tensor,
                eps: float) -> torch.Tensor:
        rms = torch.sqrt(sum_of_squares_fixed_order(x32) / x32.shape[-1] + eps)
        ctx.save_for_backward(x32, w32, rms)
        # x / rms rounds once where x * rsqrt(.) rounds twice; both are the contract's formula.
        return (x32 / rms) * w32

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        x32, w32, rms = ctx.saved_tensors
        grad = grad.float()
        gw = grad * w32
        # d/dx_j of x_j * w_j / rms = (g_j w_j - x_j * mean(g w x) / rms^2) / rms
        mean_gwx = sum_fixed_order(gw * x32) / x32.shape[-1]
        dx = (gw - x32 * (mean_gwx / (rms * rms))) / rms
        # dw sums over every row: a fixed tree over the flattened rows, the same on every run and device.
        per_row = (grad * (x32 / rms)).reshape(-1, x32.shape[-1])
        dw = sum_fixed_order(per_row.t()).reshape(-1) if per_row.shape[0] else torch.zeros_like(w32)
        return dx, dw, None


def reference_fp32(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The reference output in fp32 of the very inputs given (upcast), differentiable in both."""
    check_inputs(x, weight, eps)
    return _FixedOrderRMSNorm.apply(x.float(), weight.float(), float(eps))


def seed_formula_fp32(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The contract's formula written directly in fp32 torch ops, ``x * rsqrt(mean(x^2) + eps) * w``.

    Not batch-invariant (torch picks the mean's reduction order); used where an independent formula is the
    point: the semantics cross-check, calibration, and benchmarks of the eager seed.
    """
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def oracle_fp64(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm in fp64: no claim to invariance, only to accuracy; it bounds the reference's own error."""
    check_inputs(x, weight, eps)
    x64 = x.double()
    mean_square = (x64 * x64).mean(dim=-1, keepdim=True)
    return x64 / torch.sqrt(mean_square + eps) * weight.double()
