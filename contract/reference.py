"""The contract's reference: a pure-PyTorch fp32 RMSNorm whose bits cannot depend on the batch, on any device,
forward and backward, plus the fp64 oracle that bounds its error and the seed's formula for cross-checks.

torch's own reductions pick their reduction tree from the number of rows (aten's Reduce.cuh), so the sums
here follow the contract's canonical order (contract/canonical_order.py) with elementwise ops only. CPU and
GPU bits agree because every step is correctly rounded on both: operands are tensors (torch's CUDA division
by a Python number multiplies by its reciprocal) and the sqrt goes through fp64 (torch's CPU float sqrt is
not correctly rounded).
The harness judges every backend against this module; the native backend is a thin adapter over it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .canonical_order import GROUP, padded_width
from .inputs import check_inputs, check_residual, check_unweighted_inputs
from .rmsnorm import OFFSET_DTYPES


def _halve(t: torch.Tensor, width: int) -> torch.Tensor:
    """Add the two halves of the last dim (of size ``width``, a power of two) until one element is left."""
    while width > 1:
        width //= 2
        t = t[..., :width] + t[..., width:]
    return t


def sum_fixed_order(t: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim, keepdim, in the canonical order: pad with +0.0 to ``padded_width``, reduce each
    group of ``GROUP`` consecutive elements by halving, then the group sums by halving.

    The padding changes no sum except that of a row of -0.0 (to +0.0).
    """
    size = t.shape[-1]
    width = padded_width(size)
    if width != size:
        t = F.pad(t, (0, width - size))
    groups = _halve(t.unflatten(-1, (width // GROUP, GROUP)), GROUP).squeeze(-1)
    return _halve(groups, width // GROUP)


def sum_of_squares_fixed_order(x32: torch.Tensor) -> torch.Tensor:
    """Sum of squares over the last dim, keepdim, in the canonical order of :func:`sum_fixed_order`."""
    return sum_fixed_order(x32 * x32)


def _scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """``value`` as an fp32 tensor on ``like``'s device, so that arithmetic with it is tensor arithmetic."""
    return torch.full((), value, dtype=torch.float32, device=like.device)


def _rms(x32: torch.Tensor, eps: float) -> torch.Tensor:
    """``sqrt(S / D + eps)`` per row, keepdim: the canonical order's normalize step up to its reciprocal."""
    mean = sum_of_squares_fixed_order(x32) / _scalar(x32.shape[-1], x32)
    # torch's CPU float sqrt is not correctly rounded (about one result in six is an ulp off; measured on
    # torch 2.13, every CPU capability); the CUDA one is. The fp64 sqrt of an fp32 value, rounded to fp32,
    # is the correctly rounded fp32 sqrt on both.
    return torch.sqrt((mean + _scalar(eps, x32)).double()).float()


def _reciprocal(rms: torch.Tensor) -> torch.Tensor:
    """``inv = 1 / rms`` per row, one correctly rounded fp32 division (a tensor numerator: torch's division by a
    Python number would multiply by a reciprocal, and ``torch.reciprocal`` promises no rounding)."""
    return _scalar(1.0, rms) / rms


class _FixedOrderRMSNorm(torch.autograd.Function):
    """fp32 RMSNorm whose backward reduces in the same fixed order as its forward.

    Autograd through the forward's ops would reduce dx's row sum with torch's own reduction (the backward of
    a broadcast), whose order on CUDA depends on the number of rows: dx would not be batch-invariant.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x32: torch.Tensor, w32: torch.Tensor,
                eps: float) -> torch.Tensor:
        rms = _rms(x32, eps)
        inv = _reciprocal(rms)
        ctx.save_for_backward(x32, w32, rms, inv)
        # One correctly rounded division per row, then two separately rounded multiplies per element
        # (contract/canonical_order.py, "normalize"; why the edge cases keep their bits: RECIPROCAL_NOTE there).
        return (x32 * inv) * w32

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:  # Any: FunctionCtx's stub lacks saved_tensors
        x32, w32, rms, inv = ctx.saved_tensors
        grad = grad.float()
        gw = grad * w32
        # d/dx_j of x_j * w_j / rms = (g_j w_j - x_j * mean(g w x) / rms^2) / rms; the per-row coefficient keeps
        # its divisions (once a row), the per-element division by rms is the multiply by inv.
        mean_gwx = sum_fixed_order(gw * x32) / _scalar(x32.shape[-1], x32)
        dx = (gw - x32 * (mean_gwx / (rms * rms))) * inv
        # dw sums over every row in the canonical order, rows in place of elements; the + 0.0 makes a zero
        # sum +0.0 whatever zero rows a kernel pads with.
        per_row = (grad * (x32 * inv)).reshape(-1, x32.shape[-1])
        dw = sum_fixed_order(per_row.t()).reshape(-1) + 0.0 if per_row.shape[0] else torch.zeros_like(w32)
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


# --- The variants engines ship, and the rounding classes ------------------------------------------------------
# Each variant's reference reuses the fixed-order normalization above; only what a variant adds is written here.


def _normalize_fp32(x32: torch.Tensor, scale32: torch.Tensor, eps: float) -> torch.Tensor:
    """(x32 * inv) * scale32 in the reference's fixed order: the variants differ from forward only in scale32."""
    return _FixedOrderRMSNorm.apply(x32, scale32, float(eps))


def reference_fused_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                        eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y32, residual_out)``: residual_out is x + residual in fp32, rounded once to the residual's dtype; y32 is
    the fp32 reference RMSNorm of residual_out as stored (round y32 to x's dtype for the output)."""
    check_inputs(x, weight, eps)
    check_residual(x, residual, fp32_residual=True)
    residual_out = (x.float() + residual.float()).to(residual.dtype)
    return _normalize_fp32(residual_out.float(), weight.float(), eps), residual_out


def offset_scale(weight: torch.Tensor, offset_dtype: str = "float32") -> torch.Tensor:
    """``1 + weight`` as the fp32 factor a weight-offset RMSNorm scales by: formed in fp32, or (``"weight"``)
    rounded once to the weight's dtype first, as a kernel that adds in the weight's dtype does."""
    if offset_dtype not in OFFSET_DTYPES:
        raise ValueError(f"offset_dtype={offset_dtype!r}; known: {', '.join(OFFSET_DTYPES)}")
    scale = 1.0 + weight.float()
    return scale.to(weight.dtype).float() if offset_dtype == "weight" else scale


def reference_offset(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                     offset_dtype: str = "float32") -> torch.Tensor:
    """The fp32 reference of ``(x / rms) * (1 + weight)`` (Gemma's norm), the offset formed as ``offset_dtype``
    says."""
    check_inputs(x, weight, eps)
    return _normalize_fp32(x.float(), offset_scale(weight, offset_dtype), eps)


def reference_unweighted(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The fp32 reference of ``x / rms``: RMSNorm with no weight (a scale of exactly 1 changes no bit)."""
    check_unweighted_inputs(x, eps)
    return _normalize_fp32(x.float(), torch.ones(x.shape[-1], dtype=torch.float32, device=x.device), eps)


def rounding_class_outputs(x: torch.Tensor, scale32: torch.Tensor, eps: float,
                           out_dtype: torch.dtype, rms_of: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The output in ``out_dtype`` of each rounding class (contract ``ROUNDING_CLASSES``) for rows ``x`` (any
    float dtype, upcast) scaled by ``scale32`` (the weight, 1 + weight, or ones for no weight, in fp32).

    ``product_fp32`` is the reference rounded once; ``normalized_rounded`` rounds the normalized row to
    ``out_dtype`` before the multiply, as Hugging Face's ``weight * hidden.to(input_dtype)`` does (a product of
    two bf16 or fp16 values is exact in fp32, so rounding it once more is that order's second rounding);
    ``inverse_rounded`` rounds 1/rms to ``out_dtype`` and the row times it, as a norm written in 16-bit torch
    ops does. ``rms_of`` takes the rms from other rows than those normalized (a fused add that mixes its
    inputs); by default from ``x`` itself. The steps are the reference's (:class:`_FixedOrderRMSNorm`).
    """
    x32 = x.float()
    inv = _reciprocal(_rms(x32 if rms_of is None else rms_of.float(), eps))
    ones = torch.ones(x32.shape[-1], dtype=torch.float32, device=x32.device)
    normalized = (x32 * inv) * ones
    by_rounded_inverse = (x32 * inv.to(out_dtype).float()).to(out_dtype).float()
    return {
        "product_fp32": (normalized * scale32).to(out_dtype),
        "normalized_rounded": (normalized.to(out_dtype).float() * scale32).to(out_dtype),
        "inverse_rounded": (by_rounded_inverse * scale32).to(out_dtype),
    }
