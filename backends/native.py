"""The ground truth: a pure-PyTorch RMSNorm whose bits cannot depend on the batch, on any device, forward and
backward.

torch's own reductions pick their reduction tree from the number of rows (aten's Reduce.cuh), so the sum
of squares here is a fixed pairwise tree built from elementwise adds only: pad the row to a power of two
with zeros, then add the two halves until one column is left. Every later step (sqrt, division,
products) is a correctly rounded IEEE operation, so the result is also the same on CPU and GPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .validation import SUPPORTED_DTYPES, check_inputs


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


class NativeRMSNormOp:
    """RMSNorm in plain PyTorch: fp32 accumulation, bitwise batch-invariant by construction.

    ``forward`` returns ``x.dtype``; ``forward_fp32`` returns float32 and is the reference every other
    backend is measured against, and (through autograd) the golden source for gradients.
    """

    name = "native"
    devices = None  # any device torch runs on
    dtypes = SUPPORTED_DTYPES

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward(x, weight, eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward_fp32(x, weight, eps).to(x.dtype)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _FixedOrderRMSNorm.apply(x.float(), weight.float(), float(eps))

    def __repr__(self) -> str:
        return "NativeRMSNormOp()"


def oracle_fp64(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm in fp64: no claim to invariance, only to accuracy; it bounds the reference's own error."""
    check_inputs(x, weight, eps)
    x64 = x.double()
    mean_square = (x64 * x64).mean(dim=-1, keepdim=True)
    return x64 / torch.sqrt(mean_square + eps) * weight.double()
