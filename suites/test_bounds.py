"""Writes outside a kernel's views and offsets past 32 bits: guard zones (``semantics.bounds``) around every layout
the harness hands a backend, the backward's buffers, and the rows near the end of batches past 2^31 elements.

Every backend call of every suite already runs inside guard zones (``harness/checking/bounds.py``); the sweep here
makes the calls whose stray writes land in a zone most plainly: rows given as the head of a larger padded buffer,
rows in a wider buffer, strided and offset weights, each variant, and the backward.
"""

from __future__ import annotations

import pytest
import torch

from ..contract.families import axis_a, axis_b, semantics
from ..contract.rmsnorm import INT32_OFFSET_ROWS_CHECKED
from ..harness import (
    WEIGHT_LAYOUTS,
    AccuracyCase,
    BatchSizeCase,
    GradientCase,
    StridedCase,
    assert_bitwise,
    assert_holds,
    assert_within,
    conformance,
    entry_points,
    explicit_cases,
    guard,
    lay_out_weight,
    offset_room,
    reference_fp32,
    strategies,
    strided_layout,
    thresholds,
)

SMALL = 1 << 14  # elements: these checks are about where a call writes, not about scale
SPARE_ROWS = 3  # rows of a padded buffer past the rows a call is given (a captured graph's static input)


def _layouts(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """x as a backend may be given it: alone, as the head of a larger padded buffer, as rows of a wider buffer."""
    rows, dim = x.shape
    padded = torch.zeros(rows + SPARE_ROWS, dim, dtype=x.dtype, device=x.device)
    padded[:rows] = x
    wide = torch.zeros(rows, dim + 8, dtype=x.dtype, device=x.device)
    wide[:, :dim] = x
    return {"contiguous": x, f"the first {rows} rows of a buffer of {rows + SPARE_ROWS}": padded[:rows],
            f"rows of a buffer {dim + 8} wide": wide[:, :dim]}


def _takes(backend, *tensors: torch.Tensor) -> bool:
    """Is a call with these tensors inside the backend's declared limits? Layouts it declares it does not take
    are left out, so that the layouts it takes are still guarded (a whole case would otherwise not run)."""
    return not backend.limits.declared_any or backend.limits.outside(("x",) * len(tensors), tensors) is None


@conformance((semantics.BOUNDS.id, semantics.DEVICE_FAULT.id), AccuracyCase,
             lambda s: strategies.accuracy_cases(dtype=s.dtype, max_elements=SMALL))
def test_bounds(subject, case):
    """Every entry point on every layout, each call inside guard zones: a changed canary fails the call, and a
    call after which the device is lost fails semantics.device_fault (every call of every test is watched so)."""
    b = case.batch
    backend = subject.backend
    x, w = subject.inputs(b)
    residuals = _layouts(subject.to_device(b.residual())) if backend.offers("fused_add") else {}
    calls = 0
    for where, rows in _layouts(x).items():
        for layout in WEIGHT_LAYOUTS:
            for entry in entry_points(backend):
                weight = lay_out_weight(w, layout)
                if _takes(backend, rows, weight):
                    subject.call(entry, rows, weight, b.eps)
                    calls += 1
        if backend.offers("forward_offset") and _takes(backend, rows, w):
            subject.call("forward_offset", rows, w, b.eps)
            calls += 1
        if backend.offers("forward_unweighted") and _takes(backend, rows):
            subject.call("forward_unweighted", rows, b.eps)
            calls += 1
        # An in-place fused add writes y into x and residual_out into residual: both guarded.
        if residuals and _takes(backend, rows, residuals[where], w):
            subject.call("fused_add", rows, residuals[where], w, b.eps)
            calls += 1
    assert_holds(subject, case, ok=True, dim=b.dim, rule=semantics.BOUNDS.id,
                 what=f"{calls} calls on {len(residuals) or 3} layouts of x left every canary in place")
    assert_holds(subject, case, ok=True, dim=b.dim, rule=semantics.DEVICE_FAULT.id,
                 what=f"{calls} calls left the device usable")


def _no_backward(subject):
    if subject.backend.supports_backward(subject.device, subject.torch_dtype):
        return None
    return f"{subject.backend.name} has no backward (its output does not require grad)"


@conformance(semantics.BOUNDS.id, GradientCase,
             lambda s: strategies.gradient_cases(dtype=s.dtype, max_elements=SMALL), skip_reason=_no_backward)
def test_backward_bounds(subject, case):
    """The backward's buffers the harness allocates, in guard zones: x and weight (saved for the backward),
    grad_output (a kernel may write dx into it in place) and x.grad, into which autograd accumulates dx."""
    b = case.batch
    x, w = subject.inputs(b)
    g = subject.to_device(torch.randn(b.rows, b.dim, generator=b.generator(salt=5)).to(x.dtype))
    zones = {"x": guard(x, "x"), "weight": guard(w, "weight"), "grad_output": guard(g, "grad_output"),
             "x.grad": guard(torch.zeros_like(x), "x.grad (accumulated into by the backward)")}
    xg = zones["x"].view.requires_grad_(True)
    wg = zones["weight"].view.requires_grad_(True)
    xg.grad = zones["x.grad"].view
    y = subject.forward(xg, wg, b.eps)
    subject.backward(y, zones["grad_output"].view, zones=list(zones.values()))
    breaches = [w_ for z in zones.values() if (w_ := z.written())]
    assert_holds(subject, case, ok=not breaches, dim=b.dim,
                 what="the forward and backward wrote outside the tensors they were given: " + "; ".join(breaches))


# --- 32-bit offsets ------------------------------------------------------------------------------------------


def _own_weight_dtype(subject) -> None:
    """The offsets are x's: the cases run once per x dtype, with the weight in x's dtype, not per declared pair."""
    if subject.weight_dtype != subject.dtype:
        pytest.skip("the 32-bit offset cases run with the weight in x's dtype; the offsets are x's")


def _whole(subject, case, memo):
    """The whole batch through the case's entry point: its inputs made once per batch (2^31 elements take a while
    to draw), its output once per entry point."""
    if memo.get("inputs", (None,))[0] != case.batch:
        memo.pop("inputs", None)
        memo.pop("whole", None)
        memo["inputs"] = (case.batch, subject.inputs(case.batch, drawn_on_device=True))
    x, w = memo["inputs"][1]
    if memo.get("whole", (None,))[0] != case.entry:
        memo.pop("whole", None)  # free the previous entry point's output first
        memo["whole"] = (case.entry, subject.call(case.entry, x, w, case.batch.eps))
    return x, w, memo["whole"][1]


@explicit_cases(axis_a.BATCH_SIZE.id, BatchSizeCase, thresholds.int32_batch_plan, room=offset_room)
def test_batch_size_past_int32_offsets(subject, case, memo):
    """The last rows of a batch past 2^31 elements, alone, against the same rows in the batch."""
    _own_weight_dtype(subject)
    x, w, full = _whole(subject, case, memo)
    a, n = case.start, case.length
    alone = subject.call(case.entry, x[a: a + n].clone(), w, case.batch.eps)
    assert_bitwise(subject, case, actual=alone, expected=full[a: a + n], dim=case.batch.dim,
                   what=f"{case.entry}: rows [{a}:{a + n}] alone differ from the same rows of a batch of "
                        f"{case.batch.rows} (their offsets pass 2^31 elements there)")


def _accuracy_plan(dtype, device, budget, source, entries, *, dims=()):
    """The batch of the 32-bit offset case through forward (axis_b.output's entry point; forward_fp32 has its own
    rule), as an AccuracyCase: its last rows are checked."""
    plan = thresholds.int32_batch_plan(dtype, device, budget, source, ("forward",))
    return thresholds.Plan([AccuracyCase(c.batch) for c in plan.cases], plan.skipped)


@explicit_cases(axis_b.OUTPUT.id, AccuracyCase, _accuracy_plan, room=offset_room)
def test_output_past_int32_offsets(subject, case, memo):
    """The last rows of a batch past 2^31 elements against the reference of those rows."""
    _own_weight_dtype(subject)
    x, w, full = _whole(subject, BatchSizeCase(case.batch, INT32_OFFSET_ROWS_CHECKED), memo)
    n = INT32_OFFSET_ROWS_CHECKED
    a = case.batch.rows - n
    assert_within(subject, case, actual=full[a: a + n], reference=reference_fp32(x[a: a + n], w, case.batch.eps),
                  dim=case.batch.dim, what=f"rows [{a}:{a + n}] of a batch of {case.batch.rows}, whose offsets pass "
                                           "2^31 elements, are off the reference")


@explicit_cases(axis_a.STRIDED_ROWS.id, StridedCase, thresholds.int32_strided_plan, room=offset_room)
def test_strided_rows_past_int32_offsets(subject, case, memo):
    """A view whose last rows start past 2^31 elements of its buffer: those rows against a contiguous copy."""
    _own_weight_dtype(subject)
    b = case.batch
    x, w = subject.inputs(b, drawn_on_device=True)
    view = strided_layout(case, x)
    del x
    n = INT32_OFFSET_ROWS_CHECKED
    out = subject.call(case.entry, view, w, b.eps)[-n:].clone()
    tail = view[-n:].contiguous()
    del view
    alone = subject.call(case.entry, tail, w, b.eps)
    assert_bitwise(subject, case, actual=out, expected=alone, dim=b.dim,
                   what=f"{case.entry}: the last {n} rows of a view with row stride {2 * b.dim}, starting past 2^31 "
                        "elements of its buffer, differ from a contiguous copy of them")
