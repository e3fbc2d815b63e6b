"""Axis-B: accuracy. A backend's output lies within the profile's bound of the fp32 reference of the very inputs
it received.
"""

from __future__ import annotations

from ..rules import Rule

OUTPUT = Rule(
    "axis_b.output", "output accuracy",
    "forward(x, w) in x.dtype lies within the profile's bound of the fp32 reference computed from the "
    "very inputs the backend received (upcast), and NaN/Inf sit exactly where the reference has them.")

FORWARD_FP32 = Rule(
    "axis_b.forward_fp32", "fp32 output accuracy",
    "Where a backend offers forward_fp32, its fp32 output lies within the float32 bound of the "
    "reference for inputs of every dtype.")

# The family in CONTRACT.md's order.
RULES: tuple[Rule, ...] = (
    OUTPUT,
    FORWARD_FP32,
)
