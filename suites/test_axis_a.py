"""Axis-A: a row's output bits must not depend on what else is in the batch, in every dtype and through every
entry point the backend offers.

Each ``test_<variant>`` is one variant of CONTRACT.md's Axis-A table, swept by Hypothesis through ``forward``
and ``forward_fp32`` (the case says which); each ``test_<variant>_at_thresholds`` (and the QK-norm ones) runs
the contract's thresholds as explicit cases beside it, so that no threshold is reached only by chance. The
variants engines ship are held to the same table in test_variants.py.
"""

from __future__ import annotations

import pytest
import torch

from rmsnorm_conformance.harness import (
    WEIGHT_LAYOUTS,
    BatchSizeCase,
    FirstCallCase,
    GradModeCase,
    LeadingDimsCase,
    PaddingCase,
    PermutationCase,
    PositionCase,
    RepeatCase,
    SliceCase,
    StridedCase,
    assert_bitwise,
    assert_holds,
    call,
    conformance,
    entry_points,
    explicit_cases,
    first_call_plan,
    lay_out_weight,
    make_pad,
    missing_reason,
    run_fresh,
    strategies,
    strided_layout,
    thresholds,
)

REPEATS = 4  # reduction orders that vary per call agree on a single row about half the time
PAD_SALT = 7  # pad rows of each row input come from their own generator


def _draw(subject):
    """What every Axis-A strategy takes from the subject: dtype, budget and the backend's entry points."""
    return {"dtype": subject.dtype, "max_elements": subject.max_elements,
            "entries": entry_points(subject.backend)}


def _inputs(subject, batch, entry, *, rows=None, salt=0):
    """x and the weight (in the batch's layout, made on the device) on the subject's device."""
    reason = missing_reason(subject.backend, entry)
    if reason:
        pytest.skip(reason)
    x, w = subject.inputs(batch, rows=rows, salt=salt)
    return x, lay_out_weight(w, batch.weight_layout)


def _whole(subject, case, memo):
    """x, weight and output of ``case.batch`` whole: computed once per batch and entry point, so a threshold
    plan compares many sub-batches against one large batch."""
    key = (case.batch, case.entry)
    if memo.get("whole", (None,))[0] != key:
        memo.pop("whole", None)  # free the previous batch first: threshold batches fill the budget
        x, w = _inputs(subject, case.batch, case.entry)
        memo["whole"] = (key, (x, w, call(subject, case.entry, x, w, case.batch.eps)))
    return memo["whole"][1]


def _assert_same(subject, case, *, actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """The entry point's outputs bitwise equal, the entry point named."""
    __tracebackhide__ = True
    assert_bitwise(subject, case, actual=actual, expected=expected, what=f"{case.entry}: {what}",
                   dim=case.batch.dim)


# --- batch size ---------------------------------------------------------------------------------------------


def _batch_size(subject, case, memo):
    x, w, full = _whole(subject, case, memo)
    a, n = case.start, case.length
    alone = call(subject, case.entry, x[a: a + n].clone(), w, case.batch.eps)
    _assert_same(subject, case, actual=alone, expected=full[a: a + n],
                 what=f"rows [{a}:{a + n}] alone differ from the same rows in a batch of {case.batch.rows}")


@conformance("axis_a.batch_size", BatchSizeCase, lambda s: strategies.batch_size_cases(**_draw(s)))
def test_batch_size(subject, case):
    _batch_size(subject, case, {})


@explicit_cases("axis_a.batch_size", BatchSizeCase, thresholds.batch_size_plan)
def test_batch_size_at_thresholds(subject, case, memo):
    """Every threshold's row count alone against the largest batch in reach, in every threshold dim."""
    _batch_size(subject, case, memo)


# --- slice offset -------------------------------------------------------------------------------------------


def _slice_offset(subject, case, memo):
    x, w, full = _whole(subject, case, memo)
    a, n = case.start, case.length
    part = x[a: a + n] if case.as_view else x[a: a + n].clone()
    kind = "view" if case.as_view else "copy"
    _assert_same(subject, case, actual=call(subject, case.entry, part, w, case.batch.eps), expected=full[a: a + n],
                 what=f"rows [{a}:{a + n}] as a {kind} differ from the same rows of the whole batch")


@conformance("axis_a.slice_offset", SliceCase, lambda s: strategies.slice_cases(**_draw(s)))
def test_slice_offset(subject, case):
    _slice_offset(subject, case, {})


@explicit_cases("axis_a.slice_offset", SliceCase, thresholds.slice_plan)
def test_slice_offset_at_thresholds(subject, case, memo):
    """Views of every threshold's row count at the end of the largest batch in reach, in every threshold dim."""
    _slice_offset(subject, case, memo)


# --- padding ------------------------------------------------------------------------------------------------


def _padding(subject, case, memo):
    b = case.batch
    x, w = _inputs(subject, b, case.entry)
    gen = b.generator(salt=PAD_SALT)
    before = make_pad(case.content, case.before, b.dim, b.dtype, gen)
    after = make_pad(case.content, case.after, b.dim, b.dtype, gen)
    padded = torch.cat([subject.to_device(before), x, subject.to_device(after)])
    alone = call(subject, case.entry, x, w, b.eps)
    out = call(subject, case.entry, padded, w, b.eps)[case.before: case.before + b.rows]
    _assert_same(subject, case, actual=out, expected=alone,
                 what=f"{b.rows} real rows between {case.before} and {case.after} pad rows of {case.content} "
                      "differ from the real rows alone")


@conformance("axis_a.padding", PaddingCase, lambda s: strategies.padding_cases(**_draw(s)))
def test_padding(subject, case):
    _padding(subject, case, {})


@explicit_cases("axis_a.padding", PaddingCase, thresholds.padding_plan)
def test_padding_at_thresholds(subject, case, memo):
    """Every threshold's row count padded up to the next one, in every threshold dim."""
    _padding(subject, case, memo)


# --- position and permutation -------------------------------------------------------------------------------


@conformance("axis_a.position", PositionCase, lambda s: strategies.position_cases(**_draw(s)))
def test_position(subject, case):
    b = case.batch
    x, w = _inputs(subject, b, case.entry)
    row, others = x[:1], x[1:]

    def placed(index):
        return torch.cat([others[:index], row, others[index:]])

    first = call(subject, case.entry, placed(case.first), w, b.eps)[case.first]
    second = call(subject, case.entry, placed(case.second), w, b.eps)[case.second]
    _assert_same(subject, case, actual=second, expected=first,
                 what=f"one row at index {case.second} differs from the same row at index {case.first} of a "
                      f"batch of {b.rows}")


@conformance("axis_a.permutation", PermutationCase, lambda s: strategies.permutation_cases(**_draw(s)))
def test_permutation(subject, case):
    b = case.batch
    x, w = _inputs(subject, b, case.entry)
    perm = subject.to_device(torch.randperm(b.rows, generator=torch.Generator().manual_seed(case.perm_seed)))
    out = call(subject, case.entry, x[perm], w, b.eps)
    expected = call(subject, case.entry, x, w, b.eps)[perm]
    _assert_same(subject, case, actual=out, expected=expected, what=f"permuting {b.rows} rows changed output bits")


# --- leading dims and strided rows ----------------------------------------------------------------------------


def _leading_dims(subject, case, memo):
    b = case.batch
    x, w = _inputs(subject, b, case.entry)
    flat = call(subject, case.entry, x, w, b.eps)
    shaped = call(subject, case.entry, x.view(*case.shape, b.dim), w, b.eps)
    _assert_same(subject, case, actual=shaped.reshape(-1, b.dim), expected=flat,
                 what=f"x viewed as {[*case.shape, b.dim]} differs from the flat [{b.rows}, {b.dim}]")


@conformance("axis_a.leading_dims", LeadingDimsCase, lambda s: strategies.leading_dims_cases(**_draw(s)))
def test_leading_dims(subject, case):
    _leading_dims(subject, case, {})


@explicit_cases("axis_a.leading_dims", LeadingDimsCase, thresholds.qk_leading_dims_plan)
def test_leading_dims_qk_norm(subject, case, memo):
    """QK-norm's [T, H, 128] for every head count of the contract (8, 32, 40, 64) against [T*H, 128]."""
    _leading_dims(subject, case, memo)


def _strided_rows(subject, case, memo):
    b = case.batch
    x, w = _inputs(subject, b, case.entry)
    view = strided_layout(case, x)
    w_contiguous = w.contiguous()
    expected = call(subject, case.entry, view.contiguous(), w_contiguous, b.eps)
    _assert_same(subject, case, actual=call(subject, case.entry, view, w, b.eps), expected=expected,
                 what=f"{case.layout} layout with strides {tuple(view.stride())} and a {b.weight_layout} weight "
                      "differs from contiguous copies")
    # Every weight layout, on every case: the layout of the weight is this variant's too.
    for layout in WEIGHT_LAYOUTS[1:]:
        laid_out = lay_out_weight(w_contiguous, layout)
        _assert_same(subject, case, actual=call(subject, case.entry, view.contiguous(), laid_out, b.eps),
                     expected=expected, what=f"a {layout} weight (strides {laid_out.stride()}, storage offset "
                                             f"{laid_out.storage_offset()}) differs from a contiguous one")


@conformance("axis_a.strided_rows", StridedCase, lambda s: strategies.strided_cases(**_draw(s)))
def test_strided_rows(subject, case):
    _strided_rows(subject, case, {})


@explicit_cases("axis_a.strided_rows", StridedCase, thresholds.qk_fused_heads_plan)
def test_strided_rows_qk_norm(subject, case, memo):
    """QK-norm's query heads sliced out of a fused QKV projection, for every head count of the contract."""
    _strided_rows(subject, case, memo)


# --- repeat, grad mode, first call ----------------------------------------------------------------------------


@conformance("axis_a.repeat", RepeatCase, lambda s: strategies.repeat_cases(**_draw(s)))
def test_repeat(subject, case):
    b = case.batch
    x, w = _inputs(subject, b, case.entry)
    first = call(subject, case.entry, x, w, b.eps)
    other, _ = _inputs(subject, b, case.entry, rows=max(1, b.rows // 2) + 1, salt=3)
    # Several repeats, with a different call before each: state left behind by one call must not leak into
    # the next, and a nondeterministic kernel that agrees half the time is still caught.
    for attempt in range(1, REPEATS + 1):
        call(subject, case.entry, other, w, b.eps)
        _assert_same(subject, case, actual=call(subject, case.entry, x, w, b.eps), expected=first,
                     what=f"repeat {attempt} of the same call gave different bits")


def _requiring_grad(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


@conformance("axis_a.grad_mode", GradModeCase, lambda s: strategies.grad_mode_cases(**_draw(s)))
def test_grad_mode(subject, case):
    """Training calls the norm on inputs that require grad, sampling under inference_mode (or no_grad): the
    same rows must give the same bits in each."""
    b = case.batch
    x, w = _inputs(subject, b, case.entry)
    plain = call(subject, case.entry, x, w, b.eps)
    with torch.enable_grad():
        training = call(subject, case.entry, _requiring_grad(x), _requiring_grad(w), b.eps)
    with torch.no_grad():
        no_grad = call(subject, case.entry, _requiring_grad(x), _requiring_grad(w), b.eps)
    with torch.inference_mode():
        sampling = call(subject, case.entry, x.clone(), w.clone(), b.eps)
    for mode, out in (("inputs that require grad", training), ("torch.no_grad()", no_grad),
                      ("torch.inference_mode()", sampling)):
        _assert_same(subject, case, actual=out, expected=plain,
                     what=f"{b.rows} rows with {mode} differ from the same rows with plain inputs")


def _first_call(subject, case, memo):
    if "fresh" not in memo:
        for c in memo["plan"]:
            reason = missing_reason(subject.backend, c.entry)
            if reason:
                pytest.skip(reason)
        memo["fresh"] = run_fresh(subject.backend.spec, subject.device, memo["plan"])
    fresh = memo["fresh"]
    b = case.batch
    assert_holds(subject, case, ok=fresh.error is None, dim=b.dim,
                 what=f"the first calls could not be made in a fresh process: {fresh.error}")
    first, second = (subject.to_device(t) for t in fresh.outputs[case])
    x, w = _inputs(subject, b, case.entry)
    warm = call(subject, case.entry, x, w, b.eps)
    where = f"dim {b.dim}, {subject.dtype_label}"
    _assert_same(subject, case, actual=first, expected=second,
                 what=f"the first call for {where} in a fresh process differs from its second call")
    _assert_same(subject, case, actual=first, expected=warm,
                 what=f"the first call for {where} in a fresh process differs from the same call in the "
                      "long-running test process")


@explicit_cases("axis_a.first_call", FirstCallCase, first_call_plan, replayed_here=True)
def test_first_call(subject, case, memo):
    """Each threshold dim's first call through each entry point in a fresh process, against later calls."""
    _first_call(subject, case, memo)
