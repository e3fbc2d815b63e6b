"""Backends with planted fp8 defects: each is the native ground truth plus one bug in its fp8 entry points, the way
real fused norm-and-quantize kernels get them wrong, and each names the rule it breaks in ``breaks`` (and, where
another rule catches it too, in ``also_breaks``). A control that quantizes through x's dtype, as vLLM's kernels do,
declares that class and must pass.

tests/detection/test_detection.py runs the suite tests of each defect's rule against it, as for every defect of the zoo;
tests/checking/test_fp8.py checks the rules each also breaks (``also_breaks``).
"""

from __future__ import annotations

import math

import torch

from ..backends.native import NativeRMSNormOp
from ..contract.families import fp8
from ..contract.fp8 import E4M3_MAX, E4M3_OVERFLOW, FP8_DTYPE, MIN_SCALE, check_scale, quantize
from ..contract.inputs import check_inputs
from ..contract.reference import reference_fp32, reference_fused_add, rounding_class_outputs

BLOCK_ROWS = 4  # rows per block whose largest |y| BlockMaxScale shares: a CTA's rows in a multi-row kernel


def _fused_rows(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(y32, residual_out) of the contract's fused add."""
    y32, residual_out = reference_fused_add(x, residual, weight, eps)
    return y32.detach(), residual_out


class BlockMaxScale(NativeRMSNormOp):
    """Breaks axis_a.fp8: the dynamic per-token scale is the largest |y| over a block of 4 consecutive rows, not the
    row's own, as a kernel that packs several tokens into one CTA and reduces the absmax across the CTA does; a
    row's scale and its fp8 bits then change with its neighbours and with where the batch starts (and the scale is
    no longer its row's own, variants.fp8_scale)."""

    name = "block_max_scale"
    breaks = fp8.AXIS_A_FP8.id
    also_breaks = (fp8.FP8_SCALE.id,)
    # The planted mechanism a diagnosis must name (checking/diagnosis.py): the scale shared by blocks of 4 rows.
    mechanism = ("period", BLOCK_ROWS, "fp8 scale")

    @staticmethod
    def _block_quantize(y32: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = y32.reshape(-1, y32.shape[-1])
        amax = rows.abs().amax(dim=-1, keepdim=True) if rows.shape[-1] else rows.new_zeros(rows.shape[0], 1)
        pad = (-amax.shape[0]) % BLOCK_ROWS
        blocks = torch.cat([amax, amax.new_zeros(pad, 1)]).reshape(-1, BLOCK_ROWS).amax(dim=-1, keepdim=True)
        shared = blocks.expand(-1, BLOCK_ROWS).reshape(-1, 1)[: amax.shape[0]]
        scale = (shared / E4M3_MAX).clamp_min(MIN_SCALE).reshape(*y32.shape[:-1], 1)
        return quantize(y32, scale), scale

    def forward_fp8_dynamic(self, x: torch.Tensor, weight: torch.Tensor,
                            eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        return self._block_quantize(reference_fp32(x, weight, eps).detach())

    def fused_add_fp8_dynamic(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                              eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y32, residual_out = _fused_rows(x, residual, weight, eps)
        return *self._block_quantize(y32), residual_out


def unsaturated_cast(scaled: torch.Tensor) -> torch.Tensor:
    """fp32 to E4M3FN without saturation, as CUDA's ``__nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E4M3)`` converts:
    a value that rounds past 448 (above 464) has no encoding but NaN. (torch 2.13's own cast saturates on the CPU, so
    the overflow is written out here.)"""
    return torch.where(scaled.abs() > E4M3_OVERFLOW, torch.full_like(scaled, math.nan), scaled).to(FP8_DTYPE)


class UnsaturatedCast(NativeRMSNormOp):
    """Breaks variants.fp8_output: the static-scale quantization casts y / scale to fp8 without clamping to +-448
    first, as a kernel written with the non-saturating conversion intrinsic does; outputs past the fp8 range become
    NaN instead of 448, which a calibrated static scale hides until an outlier token arrives."""

    name = "unsaturated_cast"
    breaks = fp8.FP8_OUTPUT.id

    def forward_fp8_static(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                           scale: torch.Tensor) -> torch.Tensor:
        check_scale(scale, x)
        return unsaturated_cast(reference_fp32(x, weight, eps).detach() / scale.reshape(()))

    def fused_add_fp8_static(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                             scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_scale(scale, x)
        y32, residual_out = _fused_rows(x, residual, weight, eps)
        return unsaturated_cast(y32 / scale.reshape(())), residual_out


def _through_x_dtype(rows: torch.Tensor, weight: torch.Tensor, eps: float, x_dtype: torch.dtype,
                     order: str) -> torch.Tensor:
    """The normalized row rounded to x's dtype in the given rounding class of forward, back in fp32."""
    return rounding_class_outputs(rows, weight.float(), eps, x_dtype)[order].float()


class _ThroughXDtype(NativeRMSNormOp):
    """fp8 entry points that round y to x's dtype (in ``order``, a rounding class of forward) before quantizing."""

    order = "product_fp32"

    def _y(self, rows: torch.Tensor, weight: torch.Tensor, eps: float, x_dtype: torch.dtype) -> torch.Tensor:
        check_inputs(rows, weight, eps)
        return _through_x_dtype(rows, weight, eps, x_dtype, self.order)

    def _dynamic(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        amax = y.abs().amax(dim=-1, keepdim=True) if y.shape[-1] else y.new_zeros(*y.shape[:-1], 1)
        scale = (amax / E4M3_MAX).clamp_min(MIN_SCALE)
        return quantize(y, scale), scale

    def forward_fp8_static(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                           scale: torch.Tensor) -> torch.Tensor:
        check_scale(scale, x)
        return quantize(self._y(x, weight, eps, x.dtype), scale.reshape(()))

    def forward_fp8_dynamic(self, x: torch.Tensor, weight: torch.Tensor,
                            eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        return self._dynamic(self._y(x, weight, eps, x.dtype))

    def fused_add_fp8_static(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                             scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_scale(scale, x)
        _, residual_out = _fused_rows(x, residual, weight, eps)
        return quantize(self._y(residual_out, weight, eps, x.dtype), scale.reshape(())), residual_out

    def fused_add_fp8_dynamic(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                              eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        _, residual_out = _fused_rows(x, residual, weight, eps)
        return *self._dynamic(self._y(residual_out, weight, eps, x.dtype)), residual_out


class DoubleRounding(_ThroughXDtype):
    """Breaks variants.fp8_rounding_class: rounds y to x's dtype, then quantizes it to fp8, while declaring that it
    quantizes the fp32 row once; a bf16 value that lands on an fp8 rounding tie goes to even where the fp32 value
    went the other way, so about 1% of its fp8 outputs in bf16 differ from a single rounding's, as an unfused norm
    followed by a quantize kernel (or vLLM's fused kernels) give, each within 1 fp8 ULP and so invisible to the
    bound."""

    name = "double_rounding"
    breaks = fp8.FP8_ROUNDING_CLASS.id
    fp8_rounding_class = "fp32_once"


class VllmOrderFp8(_ThroughXDtype):
    """A correct control: vLLM's order (``x * rms`` rounded to x's dtype, times the weight rounded again, then
    quantized), declared as through_x_dtype; it must pass every fp8 rule."""

    name = "vllm_order_fp8"
    order = "normalized_rounded"
    fp8_rounding_class = "through_x_dtype"


FP8_DEFECTS: tuple[type[NativeRMSNormOp], ...] = (BlockMaxScale, UnsaturatedCast, DoubleRounding)
