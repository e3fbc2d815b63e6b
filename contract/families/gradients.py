"""Gradients: dx and dw against fp32 autograd through the reference, and their batch invariance and
determinism.
"""

from __future__ import annotations

from ..rules import Rule

DX_TOLERANCE = Rule(
    "gradients.dx_tolerance", "dx accuracy",
    "dx, with the weight trained and with it frozen (x alone requiring grad, as under LoRA), lies within the "
    "profile's gradient bound of fp32 autograd through the reference. Besides atol and "
    "rtol, the bound allows fp32 roundings of the terms dx sums, inv * (|g w| + |xhat| * mean(|g w xhat|)): "
    "in rows of small scale those terms cancel to a small dx, and any fp32 order is off by roundings of them.")

DW_TOLERANCE = Rule(
    "gradients.dw_tolerance", "dw accuracy",
    "dw lies within the profile's gradient bound of fp32 autograd through the reference, with the same "
    "allowance for roundings of its terms, sum(|g xhat|) over the rows.")

DX_BATCH_INVARIANCE = Rule(
    "gradients.dx_batch_invariance", "dx batch invariance",
    "dx of rows [0:b] computed alone equals dx of the same rows inside a larger batch, bitwise, with the "
    "weight trained and with it frozen (requires_grad=False, as under LoRA).")

DW_DETERMINISM = Rule(
    "gradients.dw_determinism", "dw determinism",
    "dw is bitwise identical run to run for the same inputs, and on a CPU with 1, 2, 4 and the machine's count "
    "of intra-op threads, at drawn batches and at the large-batch thresholds.")

# The family in CONTRACT.md's order.
RULES: tuple[Rule, ...] = (
    DX_TOLERANCE,
    DW_TOLERANCE,
    DX_BATCH_INVARIANCE,
    DW_DETERMINISM,
)
