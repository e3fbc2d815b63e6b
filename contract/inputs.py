"""What RMSNorm accepts, as the contract states it: the input checks the reference applies and this project's
backends share, so that bad input fails the same clear way everywhere.

The messages name what was wrong (shapes, dtypes, devices, eps); the semantics suite holds any backend,
ours or a third party's, to the same wording rules.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection

import torch

from .rmsnorm import DTYPE_PAIRS

SUPPORTED_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)

# (x dtype, weight dtype) pairs as torch dtypes: every pair the contract defines (an fp32 weight with bf16/fp16 x
# as well), which the reference takes; a backend that declares fewer passes its own to check_inputs.
SAME_DTYPE_PAIRS: tuple[tuple[torch.dtype, torch.dtype], ...] = tuple((d, d) for d in SUPPORTED_DTYPES)
CONTRACT_DTYPE_PAIRS: tuple[tuple[torch.dtype, torch.dtype], ...] = tuple(
    (getattr(torch, x), getattr(torch, w)) for x, w in DTYPE_PAIRS)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_inputs(x: torch.Tensor, weight: torch.Tensor, eps: float, *,
                 dtype_pairs: Collection[tuple[torch.dtype, torch.dtype]] = CONTRACT_DTYPE_PAIRS) -> None:
    """Raise TypeError/ValueError if (x, weight, eps) is outside what RMSNorm accepts.

    ``dtype_pairs`` are the (x dtype, weight dtype) pairs taken: by default every pair the contract defines.
    Order matters only for which error a doubly-wrong call reports: types first, then shapes, devices, eps.
    """
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError(
            f"rms_norm expects tensors, got x of type {type(x).__name__} "
            f"and weight of type {type(weight).__name__}"
        )
    _check_x_dtype(x)
    if (x.dtype, weight.dtype) not in dtype_pairs:
        taken = [_name(w) for xd, w in dtype_pairs if xd == x.dtype]
        raise TypeError(
            f"rms_norm takes weight of dtype {' or '.join(taken) or 'none'} with x of dtype {_name(x.dtype)}, "
            f"got x.dtype={x.dtype} and weight.dtype={weight.dtype}"
        )
    if x.dim() < 1:
        raise ValueError(f"rms_norm needs x with at least one dim, got x.shape={tuple(x.shape)}")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(
            f"rms_norm needs weight of shape ({x.shape[-1]},) to match x.shape[-1]; "
            f"got x.shape={tuple(x.shape)} and weight.shape={tuple(weight.shape)}"
        )
    _check_x_shape(x)
    if x.device != weight.device:
        raise ValueError(
            f"rms_norm needs x and weight on one device, got x.device={x.device} "
            f"and weight.device={weight.device}"
        )
    check_eps(eps)


def check_unweighted_inputs(x: torch.Tensor, eps: float) -> None:
    """The checks of :func:`check_inputs` that do not involve a weight (``forward_unweighted``)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"rms_norm expects a tensor, got x of type {type(x).__name__}")
    _check_x_dtype(x)
    _check_x_shape(x)
    check_eps(eps)


def check_residual(x: torch.Tensor, residual: torch.Tensor, *, fp32_residual: bool = False) -> None:
    """A fused add's residual: x's shape and device, and x's dtype (or float32 where ``fp32_residual``)."""
    if not isinstance(residual, torch.Tensor):
        raise TypeError(f"fused_add_rms_norm expects a tensor residual, got {type(residual).__name__}")
    taken = (x.dtype, torch.float32) if fp32_residual else (x.dtype,)
    if residual.dtype not in taken:
        raise TypeError(
            f"fused_add_rms_norm takes a residual of dtype {' or '.join(_name(d) for d in taken)} with x of dtype "
            f"{_name(x.dtype)}, got x.dtype={x.dtype} and residual.dtype={residual.dtype}"
        )
    if residual.shape != x.shape:
        raise ValueError(
            f"fused_add_rms_norm needs a residual of x's shape, got x.shape={tuple(x.shape)} "
            f"and residual.shape={tuple(residual.shape)}"
        )
    if residual.device != x.device:
        raise ValueError(
            f"fused_add_rms_norm needs x and residual on one device, got x.device={x.device} "
            f"and residual.device={residual.device}"
        )


def check_in_place(x: torch.Tensor, residual: torch.Tensor) -> None:
    """A fused add in place writes y into x and residual_out into residual: neither may write one memory location
    twice (an expanded tensor), and the two may not overlap, or which write lands last would decide the result."""
    for name, t in (("x", x), ("residual", residual)):
        if torch._debug_has_internal_overlap(t) == 1:
            raise ValueError(
                f"fused_add_rms_norm_ writes into {name}, whose elements share memory (strides "
                f"{tuple(t.stride())} for shape {tuple(t.shape)}): pass a tensor with one location an element"
            )
    if x.numel() and residual.numel() and _byte_ranges_meet(x, residual):
        raise ValueError(
            "fused_add_rms_norm_ writes into x and residual, which overlap in memory "
            f"(x.data_ptr()={x.data_ptr():#x}, residual.data_ptr()={residual.data_ptr():#x}): pass separate tensors"
        )


def check_no_gradient_in_place(x: object, residual: object) -> None:
    """A fused add in place records no gradient: where grad mode would record one (x or residual requires grad), it
    is refused rather than done behind autograd's back. Cheap enough to run before a backend's fast path (any x)."""
    if (getattr(x, "requires_grad", False) or getattr(residual, "requires_grad", False)) and torch.is_grad_enabled():
        raise RuntimeError("fused_add_rms_norm_ writes into x and residual, and one of them requires grad: the "
                           "in-place fused add has no gradient (call it under torch.no_grad())")


def _byte_ranges_meet(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the spans of memory that a and b's elements lie in meet (a conservative test of overlap)."""
    if a.device != b.device or a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False

    def span(t: torch.Tensor) -> tuple[int, int]:
        low = high = t.data_ptr()
        for size, stride in zip(t.shape, t.stride(), strict=True):
            reach = (size - 1) * stride * t.element_size()
            low, high = (low + reach, high) if reach < 0 else (low, high + reach)
        return low, high + t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def check_eps(eps: float) -> None:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"rms_norm needs eps to be a finite number > 0, got eps={eps!r}")


def _check_x_dtype(x: torch.Tensor) -> None:
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"rms_norm supports x of dtype float32, bfloat16 or float16, got x.dtype={x.dtype}"
        )


def _check_x_shape(x: torch.Tensor) -> None:
    if x.dim() < 1:
        raise ValueError(f"rms_norm needs x with at least one dim, got x.shape={tuple(x.shape)}")
    if x.shape[-1] == 0:
        raise ValueError(f"rms_norm needs a last dim of at least 1, got x.shape={tuple(x.shape)}")
