"""The ground truth: a pure-PyTorch RMSNorm whose bits cannot depend on the batch, on any device.

torch's own reductions pick their reduction tree from the number of rows (aten's Reduce.cuh), so the sum
of squares here is a fixed pairwise tree built from elementwise adds only: pad the row to a power of two
with zeros, then add the two halves until one column is left. Every later step (sqrt, division,
products) is a correctly rounded IEEE operation, so the result is also the same on CPU and GPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .validation import SUPPORTED_DTYPES, check_inputs


def sum_of_squares_fixed_order(x32: torch.Tensor) -> torch.Tensor:
    """Sum of squares over the last dim, keepdim, by a pairwise tree whose shape depends only on the dim."""
    squares = x32 * x32
    dim = squares.shape[-1]
    width = 1 << (dim - 1).bit_length()
    if width != dim:
        # Adding +0.0 changes no sum: squares are >= +0 or NaN.
        squares = F.pad(squares, (0, width - dim))
    while width > 1:
        width //= 2
        squares = squares[..., :width] + squares[..., width:]
    return squares


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
        x32 = x.float()
        mean_square = sum_of_squares_fixed_order(x32) / x32.shape[-1]
        # x / sqrt(.) rounds once where x * rsqrt(.) rounds twice; both are the contract's formula.
        return (x32 / torch.sqrt(mean_square + eps)) * weight.float()

    def __repr__(self) -> str:
        return "NativeRMSNormOp()"


def oracle_fp64(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm in fp64: no claim to invariance, only to accuracy; it bounds the reference's own error."""
    check_inputs(x, weight, eps)
    x64 = x.double()
    mean_square = (x64 * x64).mean(dim=-1, keepdim=True)
    return x64 / torch.sqrt(mean_square + eps) * weight.double()
