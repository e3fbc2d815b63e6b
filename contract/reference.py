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

from .canonical_order import GROUP, padded_width
from .inputs import check_inputs, check_residual, check_unweighted_inputs
from .rmsnorm import OFFSET_DTYPES


def _canonical_layout(t: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A new contiguous tensor (of ``dtype``, default ``t``'s) holding ``t`` along ``dim`` padded with +0.0 to
    ``padded_width`` and reordered so that every level of the canonical order adds the first half of that dim to
    its second half: element ``g * GROUP + j`` (element j of group g) lies at ``j * G + g``.

    In that layout the group step's halvings (j with j + 4, + 2, + 1) come first and the groups step's (g with
    g + G/2, ...) after, each over two contiguous halves, so a level is one vectorised add over every row at once
    instead of a strided one; the pairs and the operand order (lower index first) are the canonical order's.
    """
    dim %= t.dim()
    size = t.shape[dim]
    width = padded_width(size)
    groups = width // GROUP
    shape = list(t.shape)
    shape[dim] = width
    out = torch.empty(shape, dtype=t.dtype if dtype is None else dtype, device=t.device)
    grouped = out.unflatten(dim, (GROUP, groups)).transpose(dim, dim + 1)  # [..., g, j, ...]
    whole, rest = divmod(size, GROUP)
    if whole:
        grouped.narrow(dim, 0, whole).copy_(t.narrow(dim, 0, whole * GROUP).unflatten(dim, (whole, GROUP)))
    if rest:
        last = grouped.select(dim, whole)  # [..., j, ...] of the partly filled group
        last.narrow(dim, 0, rest).copy_(t.narrow(dim, whole * GROUP, rest))
        last.narrow(dim, rest, GROUP - rest).zero_()
    used = whole + (rest > 0)
    if used < groups:
        grouped.narrow(dim, used, groups - used).zero_()
    return out


def _halve_in_place(laid_out: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over ``dim`` of a :func:`_canonical_layout` tensor, keepdim, adding halves in place (it is consumed)."""
    width = laid_out.shape[dim]
    while width > 1:
        width //= 2
        laid_out.narrow(dim, 0, width).add_(laid_out.narrow(dim, width, width))
    return laid_out.narrow(dim, 0, 1).clone()  # not a view that keeps the whole buffer alive


def sum_fixed_order(t: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sum over ``dim`` (default the last), keepdim, in ``t``'s dtype and the canonical order: pad with +0.0 to
    ``padded_width``, reduce each group of ``GROUP`` consecutive elements by halving, then the group sums by
    halving.

    The padding changes no sum except that of a row of -0.0 (to +0.0).
    """
    return _halve_in_place(_canonical_layout(t, dim), dim)


def _squares_laid_out(x: torch.Tensor) -> torch.Tensor:
    """The fp32 squares of ``x`` (any float dtype, upcast) in :func:`_canonical_layout` along the last dim: the
    upcast, the padding and the layout in one copy, then each square in place (the zeros square to +0.0)."""
    laid_out = _canonical_layout(x, -1, torch.float32)
    return laid_out.mul_(laid_out)


def sum_of_squares_fixed_order(x32: torch.Tensor) -> torch.Tensor:
    """Sum of squares over the last dim, keepdim, in the canonical order of :func:`sum_fixed_order`. Where autograd
    records it (x requires grad), out of place: the in-place squares of the fast path cannot be differentiated."""
    if x32.dtype == torch.float32 and not (x32.requires_grad and torch.is_grad_enabled()):
        return _halve_in_place(_squares_laid_out(x32), -1)
    return sum_fixed_order(x32 * x32)


def _scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """``value`` as an fp32 tensor on ``like``'s device, so that arithmetic with it is tensor arithmetic."""
    return torch.full((), value, dtype=torch.float32, device=like.device)


def _rms_of(squares: torch.Tensor, size: int, eps: float) -> torch.Tensor:
    """``sqrt(S / D + eps)`` per row, keepdim, from the :func:`_squares_laid_out` (consumed) of rows of ``size``
    elements: the canonical order's normalize step up to its reciprocal."""
    mean = _halve_in_place(squares, -1) / _scalar(size, squares)
    # torch's CPU float sqrt is not correctly rounded (about one result in six is an ulp off; measured on
    # torch 2.13, every CPU capability); the CUDA one is. The fp64 sqrt of an fp32 value, rounded to fp32,
    # is the correctly rounded fp32 sqrt on both.
    return torch.sqrt((mean + _scalar(eps, squares)).double()).float()


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``sqrt(S / D + eps)`` per row of ``x`` (any float dtype, upcast), keepdim."""
    return _rms_of(_squares_laid_out(x), x.shape[-1], eps)


def _reciprocal(rms: torch.Tensor) -> torch.Tensor:
    """``inv = 1 / rms`` per row, one correctly rounded fp32 division (a tensor numerator: torch's division by a
    Python number would multiply by a reciprocal, and ``torch.reciprocal`` promises no rounding)."""
    return _scalar(1.0, rms) / rms


def _normalized(x: torch.Tensor, scale32: torch.Tensor | None,
                eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y32, rms, inv)`` for rows ``x`` (any float dtype, upcast): ``y32 = (x32 * inv) * scale32``, or ``x32 * inv``
    with no scale (a scale of exactly 1 changes no bit)."""
    squares = _squares_laid_out(x)
    rms = _rms_of(squares, x.shape[-1], eps)
    inv = _reciprocal(rms)
    # One correctly rounded division per row, then two separately rounded multiplies per element
    # (contract/canonical_order.py, "normalize"; why the edge cases keep their bits: RECIPROCAL_NOTE there).
    # y32 takes the memory of the squares, spent by now (x.numel() <= its size): on a CPU a fresh large allocation
    # (its page faults) costs more than the multiplies. x is upcast exactly by the copy; both multiplies in place.
    y32 = squares.view(-1)[: x.numel()].view(x.shape).copy_(x).mul_(inv)
    if scale32 is not None:
        y32.mul_(scale32)
    return y32, rms, inv


class _FixedOrderRMSNorm(torch.autograd.Function):
    """fp32 RMSNorm whose backward reduces in the same fixed order as its forward.

    Autograd through the forward's ops would reduce dx's row sum with torch's own reduction (the backward of
    a broadcast), whose order on CUDA depends on the number of rows: dx would not be batch-invariant.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x32: torch.Tensor, w32: torch.Tensor,
                eps: float) -> torch.Tensor:
        y32, rms, inv = _normalized(x32, w32, eps)
        ctx.save_for_backward(x32, w32, rms, inv)
        return y32

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:  # Any: FunctionCtx's stub lacks saved_tensors
        x32, w32, rms, inv = ctx.saved_tensors
        return (*_fixed_order_backward(x32, w32, rms, inv, grad), None)


def _fixed_order_backward(x32: torch.Tensor, w32: torch.Tensor, rms: torch.Tensor, inv: torch.Tensor,
                          grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) in fp32 of ``(x32 * inv) * w32`` for the upstream gradient ``grad``, in the fixed order."""
    grad = grad.float()
    gw = grad * w32
    # d/dx_j of x_j * w_j / rms = (g_j w_j - x_j * mean(g w x) / rms^2) / rms; the per-row coefficient keeps
    # its divisions (once a row), the per-element division by rms is the multiply by inv.
    mean_gwx = sum_fixed_order(gw * x32) / _scalar(x32.shape[-1], x32)
    dx = (gw - x32 * (mean_gwx / (rms * rms))) * inv
    # dw sums over every row in the canonical order, rows in place of elements; the + 0.0 makes a zero
    # sum +0.0 whatever zero rows a kernel pads with.
    per_row = (grad * (x32 * inv)).reshape(-1, x32.shape[-1])
    dw = sum_fixed_order(per_row, dim=0).reshape(-1) + 0.0 if per_row.shape[0] else torch.zeros_like(w32)
    return dx, dw


def reference_backward_fp32(x: torch.Tensor, scale32: torch.Tensor, grad: torch.Tensor,
                            eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dscale) in fp32: what autograd gives through the fp32 reference ``(x32 * inv) * scale32`` for the
    upstream gradient ``grad``, the row statistics recomputed exactly as the forward formed them. For a caller
    that cannot run autograd through the reference (a custom operator's backward)."""
    x32 = x.float()
    _, rms, inv = _normalized(x32, scale32, float(eps))
    return _fixed_order_backward(x32, scale32, rms, inv, grad)


def _normalize_fp32(x: torch.Tensor, scale32: torch.Tensor | None, eps: float) -> torch.Tensor:
    """(x32 * inv) * scale32 (no scale: x32 * inv) in the reference's fixed order, the variants differing from
    forward only in scale32: through the autograd function where a gradient is wanted, else straight (the same
    ops, without the copies a backward needs kept)."""
    if torch.is_grad_enabled() and (x.requires_grad or (scale32 is not None and scale32.requires_grad)):
        if scale32 is None:
            scale32 = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
        return _FixedOrderRMSNorm.apply(x.float(), scale32, float(eps))
    return _normalized(x, scale32, float(eps))[0]


def reference_fp32(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The reference output in fp32 of the very inputs given (upcast), differentiable in both."""
    check_inputs(x, weight, eps)
    return _normalize_fp32(x, weight.float(), eps)


def seed_formula_fp32(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The contract's formula written directly in fp32 torch ops, ``x * rsqrt(mean(x^2) + eps) * w``.

    Not batch-invariant (torch picks the mean's reduction order); used where an independent formula is the
    point: the semantics cross-check, calibration, and benchmarks of the eager seed.
    """
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def gradient_terms(x: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor,
                   eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dx_terms, dw_terms)``, in fp64 with the shapes of x and weight: the size of the terms each gradient
    element is a sum of, which is the scale of the rounding any fp32 order of that sum carries.

    dx = inv * (g w - xhat * mean(g w xhat)) with xhat = x * inv: where the two terms cancel (rows of small
    scale, whose inv is large), dx is small but every fp32 order of it is off by a few roundings of the terms,
    ``inv * (|g w| + |xhat| * mean(|g w xhat|))``. dw = sum over rows of g * xhat: ``sum(|g xhat|)``.
    A bound on |dx| alone (atol, rtol) cannot tell such a rounding from a defect; one with a term in these can.
    """
    x64 = x.detach().double()
    gw = (grad.detach().double() * weight.detach().double()).abs()
    inv = torch.rsqrt((x64 * x64).mean(dim=-1, keepdim=True) + eps)
    xhat = (x64 * inv).abs_()
    dx_terms = inv * (gw + xhat * (gw * xhat).mean(dim=-1, keepdim=True))
    dw_terms = (grad.detach().double().abs() * xhat).reshape(-1, x.shape[-1]).sum(dim=0)
    return dx_terms, dw_terms


def oracle_fp64(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm in fp64: no claim to invariance, only to accuracy; it bounds the reference's own error."""
    check_inputs(x, weight, eps)
    x64 = x.double()
    mean_square = (x64 * x64).mean(dim=-1, keepdim=True)
    return x64 / torch.sqrt(mean_square + eps) * weight.double()


# --- The variants engines ship, and the rounding classes ------------------------------------------------------
# Each variant's reference reuses the fixed-order normalization above; only what a variant adds is written here.


def reference_fused_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                        eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y32, residual_out)``: residual_out is x + residual in fp32, rounded once to the residual's dtype; y32 is
    the fp32 reference RMSNorm of residual_out as stored (round y32 to x's dtype for the output)."""
    check_inputs(x, weight, eps)
    check_residual(x, residual, fp32_residual=True)
    residual_out = (x.float() + residual.float()).to(residual.dtype)
    return _normalize_fp32(residual_out, weight.float(), eps), residual_out


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
    return _normalize_fp32(x, offset_scale(weight, offset_dtype), eps)


def reference_unweighted(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The fp32 reference of ``x / rms``: RMSNorm with no weight (a scale of exactly 1 changes no bit)."""
    check_unweighted_inputs(x, eps)
    return _normalize_fp32(x, None, eps)


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
    inv = _reciprocal(_rms(x if rms_of is None else rms_of, eps))
    normalized = x32 * inv
    by_rounded_inverse = (x32 * inv.to(out_dtype).float()).to(out_dtype).float()
    return {
        "product_fp32": (normalized * scale32).to(out_dtype),
        "normalized_rounded": (normalized.to(out_dtype).float() * scale32).to(out_dtype),
        "inverse_rounded": (by_rounded_inverse * scale32).to(out_dtype),
    }
