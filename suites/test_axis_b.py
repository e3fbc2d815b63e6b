"""Axis-B: low-precision output within the profile's bound of the fp32 reference of the very same inputs,
with the weight contiguous, a strided view or an offset slice of a larger tensor; drawn, and a few rows at every
threshold dim (the wide ones and a model's own included), which a sweep reaches only by chance."""

from __future__ import annotations

from ..contract.families import axis_b
from ..harness import (
    AccuracyCase,
    assert_within,
    conformance,
    correctly_rounded,
    explicit_cases,
    lay_out_weight,
    reference_fp32,
    strategies,
    thresholds,
)


def _draw(subject):
    return {"dtype": subject.dtype, "max_elements": subject.max_elements, "any_weight_layout": True,
            "model_dims": subject.model_dims}


def _inputs(subject, b):
    """x, and the weight in the batch's layout (made on the device: a copy there would be contiguous)."""
    x, w = subject.inputs(b)
    return x, lay_out_weight(w, b.weight_layout)


@conformance(axis_b.OUTPUT.id, AccuracyCase, lambda s: strategies.accuracy_cases(**_draw(s)))
def test_output(subject, case):
    check_output(subject, case)


@explicit_cases(axis_b.OUTPUT.id, AccuracyCase, thresholds.accuracy_plan)
def test_output_at_threshold_dims(subject, case, memo):
    check_output(subject, case)


def check_output(subject, case):
    b = case.batch
    x, w = _inputs(subject, b)
    out = subject.forward(x, w, b.eps)
    oracle = correctly_rounded(x, w, b.eps) if subject.profile.name == "strict" else None
    assert_within(subject, case, actual=out, reference=reference_fp32(x, w, b.eps),
                  correctly_rounded=oracle, dim=b.dim,
                  what=f"{b.dtype} output of {b.rows}x{b.dim} '{b.values}' rows (eps={b.eps:g}, "
                       f"{b.weight_layout} weight) is off the fp32 reference")


def _no_forward_fp32(subject):
    return None if subject.backend.has_forward_fp32 else f"{subject.backend.name} has no forward_fp32"


@conformance(axis_b.FORWARD_FP32.id, AccuracyCase, lambda s: strategies.accuracy_cases(**_draw(s)),
             skip_reason=_no_forward_fp32)
def test_forward_fp32(subject, case):
    check_forward_fp32(subject, case)


@explicit_cases(axis_b.FORWARD_FP32.id, AccuracyCase, thresholds.accuracy_plan, skip_reason=_no_forward_fp32)
def test_forward_fp32_at_threshold_dims(subject, case, memo):
    check_forward_fp32(subject, case)


def check_forward_fp32(subject, case):
    b = case.batch
    x, w = _inputs(subject, b)
    out = subject.forward_fp32(x, w, b.eps)
    bound = subject.profile.output_bound("float32")
    oracle = correctly_rounded(x, w, b.eps) if subject.profile.name == "strict" else None
    assert_within(subject, case, actual=out, reference=reference_fp32(x, w, b.eps),
                  bound=bound, correctly_rounded=oracle, dim=b.dim,
                  what=f"forward_fp32 of {b.dtype} input ({b.weight_layout} weight) is off the fp32 reference")
