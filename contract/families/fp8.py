"""fp8 output: RMSNorm fused with fp8 (E4M3FN) quantization, as rollout engines ship it. The format's facts
and references are in ``contract/fp8.py``.
"""

from __future__ import annotations

from ..rules import Rule

AXIS_A_FP8 = Rule(
    "axis_a.fp8", "fp8 batch invariance",
    "The fp8 entry points' outputs (the fp8 bits, the per-row dynamic scales, a fused add's residual_out) "
    "hold every Axis-A variant above (batch size, slice offset, padding, position, leading dims, repeat), "
    "bitwise, with one static scale for the whole case.")

FP8_OUTPUT = Rule(
    "variants.fp8_output", "fp8 output accuracy",
    "q is float8_e4m3fn of x's shape and lies within 1 fp8 ULP (ordered-bit distance) of the correctly "
    "rounded fp8 value of y32 / scale, or of y rounded to x's dtype first and then divided (the "
    "through_x_dtype class: in fp16's subnormal range that rounding alone can exceed an fp8 step), with the "
    "kernel's own scale for a dynamic quantization (so a scale difference does not compound); values past "
    "+-448 saturate to +-448, and q is NaN exactly where the reference is.")

FP8_SCALE = Rule(
    "variants.fp8_scale", "fp8 dynamic scale",
    "A dynamic scale is fp32 of shape x.shape[:-1] + (1,), and each row's is that row's own "
    "max(max |y32| / 448, 1 / (448 * 512)) within the fp8 scale bound.")

FP8_ROUNDING_CLASS = Rule(
    "variants.fp8_rounding_class", "declared fp8 rounding class",
    "A backend that declares its fp8 rounding class follows it: on the elements where the two classes give "
    "different fp8 bits, its output has the other class's bits on no more of them than the declared one's "
    "(a breach needs two).")

# The family in CONTRACT.md's order.
RULES: tuple[Rule, ...] = (
    AXIS_A_FP8,
    FP8_OUTPUT,
    FP8_SCALE,
    FP8_ROUNDING_CLASS,
)
