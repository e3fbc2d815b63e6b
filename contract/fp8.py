"""RMSNorm fused with fp8 quantization, as rollout engines ship it: the E4M3FN format's facts and the references.

The reference quantizes the contract's fp32 normalized row (``reference.py``, fixed order, so batch-invariant)
once: ``clamp(y32 / scale, -448, 448)`` cast to ``float8_e4m3fn``. A dynamic scale is the row's own
``max |y32| / 448``, floored at ``MIN_SCALE`` so that an all-zero row has a usable one.
"""

from __future__ import annotations

import math

import torch

from .inputs import check_inputs
from .reference import reference_fp32, reference_fused_add, rounding_class_outputs

FP8_DTYPE = torch.float8_e4m3fn
# E4M3FN: 4 exponent bits (bias 7), 3 mantissa bits, no infinities; 0x7f/0xff are NaN, so the largest finite value
# is 1.75 * 2^8 = 448 and an unsaturated conversion of anything past the rounding boundary 464 gives NaN.
E4M3_MAX = 448.0
E4M3_OVERFLOW = 464.0  # halfway between 448 and the 480 the format lacks: round-to-nearest goes past 448 above it
MANTISSA_BITS = 3
MIN_NORMAL = 2.0**-6  # smallest normal magnitude (exponent field 1)
SUBNORMAL_SPACING = 2.0**-9  # spacing of the subnormals, MIN_NORMAL / 2^MANTISSA_BITS, and the smallest positive
# The floor of a dynamic scale: vLLM's min_scaling_factor<Float8_e4m3fn> (csrc/quantization/utils.cuh),
# 1 / (448 * 512). Without it an all-zero row would divide by zero.
MIN_SCALE = 1.0 / (E4M3_MAX * 512.0)


def ulp(magnitude: float) -> float:
    """The spacing of E4M3FN values at ``magnitude`` (the gap above it; 2^-9 throughout the subnormals)."""
    magnitude = abs(float(magnitude))
    if not math.isfinite(magnitude) or magnitude > E4M3_MAX:
        raise ValueError(f"magnitude={magnitude!r} is outside E4M3FN's finite range [0, {E4M3_MAX:g}]")
    if magnitude < MIN_NORMAL:
        return SUBNORMAL_SPACING
    return 2.0 ** (math.floor(math.log2(magnitude)) - MANTISSA_BITS)


def quantize(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``values / scale`` in fp32, saturated to +-448 and rounded once to E4M3FN (NaN stays NaN)."""
    scaled = values.float() / scale.float()
    return scaled.clamp(-E4M3_MAX, E4M3_MAX).to(FP8_DTYPE)


def dynamic_scale(y32: torch.Tensor) -> torch.Tensor:
    """Per-row scale ``max(max |y32| / 448, MIN_SCALE)``, fp32, shape ``y32.shape[:-1] + (1,)``; a row holding NaN
    gets NaN."""
    amax = y32.float().abs().amax(dim=-1, keepdim=True) if y32.shape[-1] else y32.new_zeros(*y32.shape[:-1], 1)
    # amax ignores no NaN: torch's max propagates it, so a NaN row keeps a NaN scale (and NaN output).
    scale = amax / torch.full((), E4M3_MAX, dtype=torch.float32, device=y32.device)
    return torch.where(torch.isnan(scale), scale, scale.clamp_min(MIN_SCALE))


def check_scale(scale: torch.Tensor, x: torch.Tensor) -> None:
    """A static scale: one positive finite fp32 value on x's device (shape () or (1,))."""
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"rms_norm_fp8 expects the scale as a tensor, got {type(scale).__name__}")
    if scale.dtype != torch.float32 or scale.numel() != 1:
        raise ValueError(f"rms_norm_fp8 needs one float32 scale, got scale.dtype={scale.dtype} and "
                         f"scale.shape={tuple(scale.shape)}")
    if scale.device != x.device:
        raise ValueError(f"rms_norm_fp8 needs x and scale on one device, got x.device={x.device} and "
                         f"scale.device={scale.device}")


def reference_fp8_static(x: torch.Tensor, weight: torch.Tensor, eps: float, scale: torch.Tensor) -> torch.Tensor:
    """``clamp(y32 / scale, -448, 448)`` rounded once to E4M3FN, y32 the contract's fp32 reference."""
    check_inputs(x, weight, eps)
    check_scale(scale, x)
    return quantize(reference_fp32(x, weight, eps).detach(), scale.reshape(()))


def reference_fp8_dynamic(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: scale per row (:func:`dynamic_scale`), q the row quantized with it once."""
    y32 = reference_fp32(x, weight, eps).detach()
    scale = dynamic_scale(y32)
    return quantize(y32, scale), scale


def reference_fp8_fused_add_static(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                                   scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, residual_out)``: residual_out as the fused add's reference stores it, q from the stored residual."""
    check_scale(scale, x)
    y32, residual_out = reference_fused_add(x, residual, weight, eps)
    return quantize(y32.detach(), scale.reshape(())), residual_out


def reference_fp8_fused_add_dynamic(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                                    eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q, scale, residual_out)``: the dynamic quantization of the fused add's y, from the stored residual."""
    y32, residual_out = reference_fused_add(x, residual, weight, eps)
    scale = dynamic_scale(y32.detach())
    return quantize(y32.detach(), scale), scale, residual_out


def fp8_rounding_class_outputs(rows: torch.Tensor, weight: torch.Tensor, eps: float, x_dtype: torch.dtype,
                               scale: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    """The quantized output of each fp8 rounding class (contract ``FP8_ROUNDING_CLASSES``) for ``rows`` (x, or a
    fused add's stored residual) at ``scale`` (a static scale, or the kernel's own per-row one).

    ``fp32_once`` is the reference; ``through_x_dtype`` rounds the normalized row to x's dtype first, under
    either rounding class of ``forward`` (vLLM's kernels round ``x * rms`` to x's dtype and multiply by the
    weight in it), so a kernel's own forward order does not count against it.
    """
    classes = rounding_class_outputs(rows, weight.float(), eps, x_dtype)
    return {
        "fp32_once": [quantize(reference_fp32(rows, weight, eps).detach(), scale)],
        "through_x_dtype": [quantize(y.float(), scale) for y in classes.values()],
    }


__all__ = [
    "E4M3_MAX",
    "E4M3_OVERFLOW",
    "FP8_DTYPE",
    "MIN_NORMAL",
    "MIN_SCALE",
    "SUBNORMAL_SPACING",
    "check_scale",
    "dynamic_scale",
    "fp8_rounding_class_outputs",
    "quantize",
    "reference_fp8_dynamic",
    "reference_fp8_fused_add_dynamic",
    "reference_fp8_fused_add_static",
    "reference_fp8_static",
    "ulp",
]
