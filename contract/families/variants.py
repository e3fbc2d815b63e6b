"""Variants: the entry points engines ship beside forward (the fused add, the weight offset, no weight), their
batch invariance, accuracy and rounding, and an fp32 weight with 16-bit x.
"""

from __future__ import annotations

from ..rules import Rule

AXIS_A_FUSED_ADD = Rule(
    "axis_a.fused_add", "fused add batch invariance",
    "fused_add's y and residual_out hold every Axis-A variant above (batch size, slice offset, padding, "
    "position, permutation, leading dims, strided rows and weight layouts, repeat, grad mode, and the "
    "thresholds), bitwise, the residual transformed like x; its first calls are held to axis_a.first_call.")

AXIS_A_OFFSET = Rule(
    "axis_a.offset", "offset batch invariance",
    "forward_offset's output holds every Axis-A variant above, bitwise, the thresholds included (its first "
    "calls: axis_a.first_call).")

AXIS_A_UNWEIGHTED = Rule(
    "axis_a.unweighted", "no-weight batch invariance",
    "forward_unweighted's output holds every Axis-A variant above, bitwise, the thresholds included (its first "
    "calls: axis_a.first_call).")

FUSED_ADD_RESIDUAL = Rule(
    "variants.fused_add_residual", "fused add residual",
    "residual_out is bitwise x + residual computed in fp32 and rounded once to the residual's dtype; a "
    "backend that declares fused_add_in_place writes it into residual (and y into x), and returns nothing "
    "or the tensors it wrote, (x, residual).")

FUSED_ADD_OUTPUT = Rule(
    "variants.fused_add_output", "fused add output accuracy",
    "fused_add's y, in x's dtype and shape, lies within the output bound of the fp32 reference RMSNorm of "
    "residual_out as stored.")

FUSED_ADD_STORED_RESIDUAL = Rule(
    "variants.fused_add_stored_residual", "fused add normalizes the stored residual",
    "The rms and the normalized row of y both come from residual_out as stored, never from the fp32 sum. y "
    "is held against each other choice in turn (both from the sum, the rms from the sum, the row from the "
    "sum), within its rounding class: on the elements where that choice and the stored residual give "
    "different bits, y has that choice's bits on no more of them than the stored residual's (a breach "
    "needs two).")

FUSED_ADD_AS_FORWARD = Rule(
    "variants.fused_add_as_forward", "fused add as its own forward",
    "fused_add's y is bitwise the backend's own forward of residual_out as stored (same weight, eps): the "
    "fused and the unfused path of one backend give a row the same bits, so a sampler that fuses the "
    "residual add and a trainer that adds then normalizes agree. Held where residual_out is in x's dtype, "
    "the forward's own input; a NaN matches any NaN in the same place.")

OFFSET_OUTPUT = Rule(
    "variants.offset_output", "offset output accuracy",
    "forward_offset's y, in x's dtype and shape, lies within the output bound of the fp32 reference "
    "(x / rms) * (1 + weight), 1 + weight formed in the declared offset dtype.")

OFFSET_DTYPE = Rule(
    "variants.offset_dtype", "offset dtype",
    "1 + weight is formed where the backend declares (fp32 by default): on the elements where forming it in "
    "fp32 or in the weight's dtype gives different bits, y has the other one's bits on no more of them than "
    "the declared one's (a breach needs two).")

UNWEIGHTED_OUTPUT = Rule(
    "variants.unweighted_output", "no-weight output accuracy",
    "forward_unweighted's y, in x's dtype and shape, lies within the output bound of the fp32 reference "
    "x / rms.")

PURITY = Rule(
    "variants.purity", "variant purity",
    "A variant leaves its inputs unchanged and returns outputs that alias no input; a fused add that "
    "declares fused_add_in_place writes y into x and residual_out into residual, and nothing else.")

ROUNDING_CLASS = Rule(
    "variants.rounding_class", "declared rounding class",
    "A backend that declares its rounding class follows it, through every entry point it declares it for "
    "(forward, fused_add, forward_offset, forward_unweighted): held against each other class in turn, on "
    "the elements where that class and the declared one give different bits, its output has that class's "
    "bits on no more of them than the declared one's (a breach needs two).")

MIXED_PRECISION_FP32_WEIGHT = Rule(
    "mixed_precision.fp32_weight", "fp32 weight",
    "With an fp32 weight and bf16/fp16 x, the weight enters the product in fp32 (forward, and the fused add "
    "and offset where offered): on the elements where rounding the weight to x's dtype first gives "
    "different bits, the output has the rounded weight's bits on no more of them than the fp32 weight's "
    "(a breach needs two).")

# The family in CONTRACT.md's order.
RULES: tuple[Rule, ...] = (
    AXIS_A_FUSED_ADD,
    AXIS_A_OFFSET,
    AXIS_A_UNWEIGHTED,
    FUSED_ADD_RESIDUAL,
    FUSED_ADD_OUTPUT,
    FUSED_ADD_STORED_RESIDUAL,
    FUSED_ADD_AS_FORWARD,
    OFFSET_OUTPUT,
    OFFSET_DTYPE,
    UNWEIGHTED_OUTPUT,
    PURITY,
    ROUNDING_CLASS,
    MIXED_PRECISION_FP32_WEIGHT,
)
