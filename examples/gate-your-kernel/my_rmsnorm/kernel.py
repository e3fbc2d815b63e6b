"""RMSNorm made of elementwise PyTorch ops, reduced in an order fixed by the row length alone.

A kernel stays batch-invariant when its reduction order depends on the dim and never on the number of rows.
This one reduces a row as a GPU warp would: 32 lanes each fold the row's chunks in halves, then the lanes fold
in halves too. Every step is an elementwise add, so no torch reduction can pick another tree for another batch.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

LANES = 32
SUPPORTED_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)


def check_inputs(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Refuse what RMSNorm cannot normalise, naming what was wrong."""
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"my_rmsnorm: x.dtype={x.dtype} is not one of float32, bfloat16, float16")
    if weight.dtype != x.dtype:
        raise TypeError(f"my_rmsnorm: weight.dtype={weight.dtype} differs from x.dtype={x.dtype}")
    if weight.dim() != 1 or x.dim() < 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"my_rmsnorm: weight of shape {tuple(weight.shape)} does not fit x of shape "
                         f"{tuple(x.shape)}; it must be ({x.shape[-1] if x.dim() else '?'},)")
    if weight.device != x.device:
        raise ValueError(f"my_rmsnorm: x is on {x.device} but weight is on {weight.device}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"my_rmsnorm: eps must be a finite number > 0, got eps={eps!r}")


def lane_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim (keepdim) in an order that depends only on its length.

    The row is zero-padded to LANES * 2**k columns and cut into 2**k chunks of LANES; chunk c is added to
    chunk c + 2**(k-1), and so on down to one chunk, then lane l to lane l + LANES/2, down to one lane.
    """
    dim = t.shape[-1]
    chunks = 1 << (-(-dim // LANES) - 1).bit_length()
    if chunks * LANES != dim:
        t = F.pad(t, (0, chunks * LANES - dim))
    t = t.unflatten(-1, (chunks, LANES))
    while t.shape[-2] > 1:
        half = t.shape[-2] // 2
        t = t[..., :half, :] + t[..., half:, :]
    t = t.squeeze(-2)
    while t.shape[-1] > 1:
        half = t.shape[-1] // 2
        t = t[..., :half] + t[..., half:]
    return t


def rms_norm_fp32(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * weight`` accumulated and returned in float32."""
    check_inputs(x, weight, eps)
    with torch.no_grad():  # a forward-only kernel: it declares no backward
        x32 = x.float()
        rms = torch.sqrt(lane_sum(x32 * x32) / x.shape[-1] + eps)
        return (x32 / rms) * weight.float()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm in float32 arithmetic, rounded once to ``x.dtype``."""
    return rms_norm_fp32(x, weight, eps).to(x.dtype)


class MyRMSNorm:
    """The kernel as an rmsnorm-conformance backend: ``name`` and ``forward`` are all the protocol needs;
    ``forward_fp32``, ``devices``, ``dtypes`` and ``supports_backward`` say what else it offers."""

    name = "my_rmsnorm"
    devices = None  # plain torch ops: any device torch runs on
    dtypes = SUPPORTED_DTYPES
    supports_backward = False

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return rms_norm(x, weight, eps)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return rms_norm_fp32(x, weight, eps)
