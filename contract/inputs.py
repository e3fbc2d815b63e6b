"""What RMSNorm accepts, as the contract states it: the input checks the reference applies and this project's
backends share, so that bad input fails the same clear way everywhere.

The messages name what was wrong (shapes, dtypes, devices, eps); the semantics suite holds any backend,
ours or a third party's, to the same wording rules.
"""

from __future__ import annotations

import math
import numbers

import torch

SUPPORTED_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)


def check_inputs(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Raise TypeError/ValueError if (x, weight, eps) is outside what RMSNorm accepts.

    Order matters only for which error a doubly-wrong call reports: types first, then shapes, devices, eps.
    """
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError(
            f"rms_norm expects tensors, got x of type {type(x).__name__} "
            f"and weight of type {type(weight).__name__}"
        )
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"rms_norm supports x of dtype float32, bfloat16 or float16, got x.dtype={x.dtype}"
        )
    if weight.dtype != x.dtype:
        raise TypeError(
            f"rms_norm needs weight in the dtype of x, got x.dtype={x.dtype} and weight.dtype={weight.dtype}"
        )
    if x.dim() < 1:
        raise ValueError(f"rms_norm needs x with at least one dim, got x.shape={tuple(x.shape)}")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(
            f"rms_norm needs weight of shape ({x.shape[-1]},) to match x.shape[-1]; "
            f"got x.shape={tuple(x.shape)} and weight.shape={tuple(weight.shape)}"
        )
    if x.shape[-1] == 0:
        raise ValueError(f"rms_norm needs a last dim of at least 1, got x.shape={tuple(x.shape)}")
    if x.device != weight.device:
        raise ValueError(
            f"rms_norm needs x and weight on one device, got x.device={x.device} "
            f"and weight.device={weight.device}"
        )
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"rms_norm needs eps to be a finite number > 0, got eps={eps!r}")
