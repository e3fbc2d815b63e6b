"""The variants engines ship (fused residual add, weight offset ``1 + weight``, no weight), held to the Axis-A
variants and Axis-B bounds of ``forward`` and to their own rules; the fp32-weight rule of mixed precision; and
the rounding class each backend's bits follow, for the report.

A backend that does not offer a variant is skipped for it, with that reason. Each Axis-A check transforms a
fused add's residual exactly as it transforms x (the same rows sliced, padded, placed, viewed or strided).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import strategies as st

from rmsnorm_conformance.contract import ROUNDING_CLASSES
from rmsnorm_conformance.contract.reference import (
    offset_scale,
    oracle_fp64,
    reference_offset,
    reference_unweighted,
    rounding_class_outputs,
)
from rmsnorm_conformance.harness import (
    ROUNDED_ENTRY_POINTS,
    AccuracyCase,
    Batch,
    BatchSizeCase,
    LeadingDimsCase,
    PaddingCase,
    PositionCase,
    RepeatCase,
    SliceCase,
    StridedCase,
    assert_bitwise,
    assert_holds,
    assert_within,
    conformance,
    make_pad,
    reference_fp32,
    rounding,
    strategies,
    strided_layout,
)

REPEATS = 4  # as in Axis-A: a reduction order that varies per call agrees on one row about half the time
# A variant's cases take an eighth of forward's element budget: a fused add holds twice the tensors, every
# check calls the variant and the reference several times, and forward's own Axis-A tests already reach the
# largest batches (512K elements still give 128 rows at dim 4096 and 4096 rows at dim 128 on the CPU).
BUDGET_SHARE = 8
GUARD = 64  # elements of guard buffer on each side of an input, for purity


@dataclass(frozen=True)
class EntryPoint:
    """A variant as the suites call it: its backend method, its Axis-A rule and its outputs."""

    method: str
    rule: str
    outputs: tuple[str, ...]

    @property
    def residual(self) -> bool:
        return "residual_out" in self.outputs


FUSED_ADD = EntryPoint("fused_add", "axis_a.fused_add", ("y", "residual_out"))
OFFSET = EntryPoint("forward_offset", "axis_a.offset", ("y",))
UNWEIGHTED = EntryPoint("forward_unweighted", "axis_a.unweighted", ("y",))
ENTRY_POINTS = (FUSED_ADD, OFFSET, UNWEIGHTED)


def _call(subject, entry: EntryPoint, x, residual, w, eps) -> tuple[torch.Tensor, ...]:
    """The variant's outputs, called through the subject: isolated and watched like every backend call."""
    if entry is FUSED_ADD:
        return subject.call("fused_add", x, residual, w, eps)
    if entry is OFFSET:
        return (subject.call("forward_offset", x, w, eps),)
    return (subject.call("forward_unweighted", x, eps),)


def _not_offered(entry: EntryPoint) -> Callable:
    def reason(subject) -> str | None:
        if not subject.backend.offers(entry.method):
            return f"{subject.backend.name} does not offer {entry.method}"
        return None

    return reason


def _residual_dtypes(subject) -> tuple[str, ...]:
    fp32 = subject.backend.fused_add_fp32_residual and subject.dtype != "float32"
    return (subject.dtype, "float32") if fp32 else (subject.dtype,)


def _cases(entry: EntryPoint, strategy: Callable) -> Callable:
    """Cases of ``strategy`` for ``entry`` within the variants' share of the element budget, and a fused add's
    residual in x's dtype or, where the backend takes it, fp32."""

    def cases(subject) -> st.SearchStrategy:
        drawn = strategy(dtype=subject.dtype, max_elements=_budget(subject))
        return strategies.with_residual_dtypes(drawn, _residual_dtypes(subject)) if entry.residual else drawn

    return cases


def _budget(subject) -> int:
    return max(1, subject.max_elements // BUDGET_SHARE)


def _inputs(subject, entry: EntryPoint, b: Batch, *, salt: int = 0, rows: int | None = None):
    """The row tensors a call takes (x, and a fused add's residual) and the weight, on the subject's device."""
    x = subject.to_device(b.x(rows, salt))
    rows_in = [x, subject.to_device(b.residual(rows, salt))] if entry.residual else [x]
    return rows_in, subject.to_device(b.w())


def _run(subject, entry: EntryPoint, rows_in, w, eps) -> tuple[torch.Tensor, ...]:
    return _call(subject, entry, rows_in[0], rows_in[1] if entry.residual else None, w, eps)


def _assert_outputs(subject, case, entry: EntryPoint, actual, expected, what: str) -> None:
    """Every output of the variant (y, and a fused add's residual_out) bitwise, under the variant's rule."""
    for name, a, e in zip(entry.outputs, actual, expected, strict=True):
        assert_bitwise(subject, case, actual=a, expected=e, dim=case.batch.dim, what=f"{entry.method} {name}: {what}")


# --- Axis-A, for each variant ----------------------------------------------------------------------------


def check_batch_size(subject, entry: EntryPoint, case: BatchSizeCase) -> None:
    b, n = case.batch, case.length
    rows_in, w = _inputs(subject, entry, b)
    full = _run(subject, entry, rows_in, w, b.eps)
    alone = _run(subject, entry, [t[:n].clone() for t in rows_in], w, b.eps)
    _assert_outputs(subject, case, entry, alone, [o[:n] for o in full],
                    f"rows [0:{n}] alone differ from the same rows in a batch of {b.rows}")


def check_slice_offset(subject, entry: EntryPoint, case: SliceCase) -> None:
    b, lo, hi = case.batch, case.start, case.start + case.length
    rows_in, w = _inputs(subject, entry, b)
    full = _run(subject, entry, rows_in, w, b.eps)
    part = [t[lo:hi] if case.as_view else t[lo:hi].clone() for t in rows_in]
    kind = "view" if case.as_view else "copy"
    _assert_outputs(subject, case, entry, _run(subject, entry, part, w, b.eps), [o[lo:hi] for o in full],
                    f"rows [{lo}:{hi}] as a {kind} differ from the same rows of the whole batch")


def check_padding(subject, entry: EntryPoint, case: PaddingCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)
    gen = b.generator(salt=7)
    padded = []
    for t in rows_in:
        dtype = str(t.dtype).removeprefix("torch.")
        before = make_pad(case.content, case.before, b.dim, dtype, gen)
        after = make_pad(case.content, case.after, b.dim, dtype, gen)
        padded.append(torch.cat([subject.to_device(before), t, subject.to_device(after)]))
    alone = _run(subject, entry, rows_in, w, b.eps)
    out = _run(subject, entry, padded, w, b.eps)
    _assert_outputs(subject, case, entry, [o[case.before: case.before + b.rows] for o in out], alone,
                    f"{b.rows} real rows between {case.before} and {case.after} pad rows of {case.content} "
                    f"differ from the real rows alone")


def check_position(subject, entry: EntryPoint, case: PositionCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)

    def placed(index: int) -> list[torch.Tensor]:
        return [torch.cat([t[1:][:index], t[:1], t[1:][index:]]) for t in rows_in]

    first = [o[case.first] for o in _run(subject, entry, placed(case.first), w, b.eps)]
    second = [o[case.second] for o in _run(subject, entry, placed(case.second), w, b.eps)]
    _assert_outputs(subject, case, entry, second, first,
                    f"one row at index {case.second} differs from the same row at index {case.first} of a batch "
                    f"of {b.rows}")


def check_leading_dims(subject, entry: EntryPoint, case: LeadingDimsCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)
    flat = _run(subject, entry, rows_in, w, b.eps)
    shaped = _run(subject, entry, [t.view(*case.shape, b.dim) for t in rows_in], w, b.eps)
    _assert_outputs(subject, case, entry, [o.reshape(-1, b.dim) for o in shaped], flat,
                    f"inputs viewed as {[*case.shape, b.dim]} differ from the flat [{b.rows}, {b.dim}]")


def check_strided_rows(subject, entry: EntryPoint, case: StridedCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)
    views = [strided_layout(case, t) for t in rows_in]
    out = _run(subject, entry, views, w, b.eps)
    expected = _run(subject, entry, [v.contiguous() for v in views], w, b.eps)
    _assert_outputs(subject, case, entry, out, expected,
                    f"{case.layout} layout with strides {tuple(views[0].stride())} differs from a contiguous copy")


def check_repeat(subject, entry: EntryPoint, case: RepeatCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)
    first = _run(subject, entry, rows_in, w, b.eps)
    other, _ = _inputs(subject, entry, b, salt=3, rows=max(1, b.rows // 2) + 1)
    for attempt in range(1, REPEATS + 1):
        _run(subject, entry, other, w, b.eps)
        again = _run(subject, entry, rows_in, w, b.eps)
        _assert_outputs(subject, case, entry, again, first, f"repeat {attempt} of the same call gave different bits")


def _axis_a(entry: EntryPoint, case_type: type, strategy: Callable) -> Callable:
    return conformance(entry.rule, case_type, _cases(entry, strategy), skip_reason=_not_offered(entry))


@_axis_a(FUSED_ADD, BatchSizeCase, strategies.batch_size_cases)
def test_fused_add_batch_size(subject, case):
    check_batch_size(subject, FUSED_ADD, case)


@_axis_a(FUSED_ADD, SliceCase, strategies.slice_cases)
def test_fused_add_slice_offset(subject, case):
    check_slice_offset(subject, FUSED_ADD, case)


@_axis_a(FUSED_ADD, PaddingCase, strategies.padding_cases)
def test_fused_add_padding(subject, case):
    check_padding(subject, FUSED_ADD, case)


@_axis_a(FUSED_ADD, PositionCase, strategies.position_cases)
def test_fused_add_position(subject, case):
    check_position(subject, FUSED_ADD, case)


@_axis_a(FUSED_ADD, LeadingDimsCase, strategies.leading_dims_cases)
def test_fused_add_leading_dims(subject, case):
    check_leading_dims(subject, FUSED_ADD, case)


@_axis_a(FUSED_ADD, StridedCase, strategies.strided_cases)
def test_fused_add_strided_rows(subject, case):
    check_strided_rows(subject, FUSED_ADD, case)


@_axis_a(FUSED_ADD, RepeatCase, strategies.repeat_cases)
def test_fused_add_repeat(subject, case):
    check_repeat(subject, FUSED_ADD, case)


@_axis_a(OFFSET, BatchSizeCase, strategies.batch_size_cases)
def test_offset_batch_size(subject, case):
    check_batch_size(subject, OFFSET, case)


@_axis_a(OFFSET, SliceCase, strategies.slice_cases)
def test_offset_slice_offset(subject, case):
    check_slice_offset(subject, OFFSET, case)


@_axis_a(OFFSET, PaddingCase, strategies.padding_cases)
def test_offset_padding(subject, case):
    check_padding(subject, OFFSET, case)


@_axis_a(OFFSET, PositionCase, strategies.position_cases)
def test_offset_position(subject, case):
    check_position(subject, OFFSET, case)


@_axis_a(OFFSET, LeadingDimsCase, strategies.leading_dims_cases)
def test_offset_leading_dims(subject, case):
    check_leading_dims(subject, OFFSET, case)


@_axis_a(OFFSET, StridedCase, strategies.strided_cases)
def test_offset_strided_rows(subject, case):
    check_strided_rows(subject, OFFSET, case)


@_axis_a(OFFSET, RepeatCase, strategies.repeat_cases)
def test_offset_repeat(subject, case):
    check_repeat(subject, OFFSET, case)


@_axis_a(UNWEIGHTED, BatchSizeCase, strategies.batch_size_cases)
def test_unweighted_batch_size(subject, case):
    check_batch_size(subject, UNWEIGHTED, case)


@_axis_a(UNWEIGHTED, SliceCase, strategies.slice_cases)
def test_unweighted_slice_offset(subject, case):
    check_slice_offset(subject, UNWEIGHTED, case)


@_axis_a(UNWEIGHTED, PaddingCase, strategies.padding_cases)
def test_unweighted_padding(subject, case):
    check_padding(subject, UNWEIGHTED, case)


@_axis_a(UNWEIGHTED, PositionCase, strategies.position_cases)
def test_unweighted_position(subject, case):
    check_position(subject, UNWEIGHTED, case)


@_axis_a(UNWEIGHTED, LeadingDimsCase, strategies.leading_dims_cases)
def test_unweighted_leading_dims(subject, case):
    check_leading_dims(subject, UNWEIGHTED, case)


@_axis_a(UNWEIGHTED, StridedCase, strategies.strided_cases)
def test_unweighted_strided_rows(subject, case):
    check_strided_rows(subject, UNWEIGHTED, case)


@_axis_a(UNWEIGHTED, RepeatCase, strategies.repeat_cases)
def test_unweighted_repeat(subject, case):
    check_repeat(subject, UNWEIGHTED, case)


# --- each variant's own rules ------------------------------------------------------------------------------


def _accuracy(entry: EntryPoint, **pinned) -> Callable:
    return _cases(entry, lambda **budget: strategies.accuracy_cases(**budget, **pinned))


def _strict_oracle(subject, x, scale):
    """The fp64 oracle of (x / rms) * scale for ULP bounds, or None outside the strict profile."""
    if subject.profile.name != "strict":
        return None
    ones = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
    return oracle_fp64(x.float(), ones) * scale.double()


def _assert_routed(subject, case, y, x, what: str) -> None:
    """y in x's dtype and shape: a bound check alone would let an fp32 y through."""
    got, want = (y.dtype, tuple(y.shape)), (x.dtype, tuple(x.shape))
    assert_holds(subject, case, ok=got == want, dim=case.batch.dim,
                 what=f"{what} returned (dtype, shape) {got}, but should be {want}")


@conformance("variants.fused_add_residual", AccuracyCase, _accuracy(FUSED_ADD), skip_reason=_not_offered(FUSED_ADD))
def test_fused_add_residual(subject, case):
    b = case.batch
    (x, r), w = _inputs(subject, FUSED_ADD, b)
    _, residual_out = subject.call("fused_add", x, r, w, b.eps)
    where = " (written into residual)" if subject.backend.fused_add_in_place else ""
    assert_bitwise(subject, case, actual=residual_out, expected=(x.float() + r.float()).to(r.dtype), dim=b.dim,
                   what=f"residual_out{where} is not x + residual rounded once to {b.residual_dtype}")


@conformance("variants.fused_add_output", AccuracyCase, _accuracy(FUSED_ADD), skip_reason=_not_offered(FUSED_ADD))
def test_fused_add_output(subject, case):
    b = case.batch
    (x, r), w = _inputs(subject, FUSED_ADD, b)
    y, residual_out = subject.call("fused_add", x, r, w, b.eps)
    _assert_routed(subject, case, y, x, "fused_add's y")
    stored = residual_out.detach()
    assert_within(subject, case, actual=y, reference=reference_fp32(stored, w, b.eps), dim=b.dim,
                  correctly_rounded=_strict_oracle(subject, stored, w.float()),
                  what=f"y of {b.rows}x{b.dim} '{b.values}' rows is off the fp32 reference of residual_out as stored")


@conformance("variants.fused_add_stored_residual", AccuracyCase, _accuracy(FUSED_ADD, values="normal"),
             skip_reason=_not_offered(FUSED_ADD))
def test_fused_add_stored_residual(subject, case):
    b = case.batch
    (x, r), w = _inputs(subject, FUSED_ADD, b)
    y, residual_out = subject.call("fused_add", x, r, w, b.eps)
    classes = rounding.fused_add_classes(x, r, residual_out.detach(), w, b.eps)
    result = rounding.vote(y, rounding.side(classes, "stored_residual"), rounding.side(classes, "fp32_sum"))
    assert_holds(subject, case, ok=not result.breached, dim=b.dim,
                 what="y is normalized from the fp32 sum, not from residual_out as stored: "
                      + result.describe("the stored residual", "the fp32 sum"))


@conformance("variants.offset_output", AccuracyCase, _accuracy(OFFSET), skip_reason=_not_offered(OFFSET))
def test_offset_output(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    y = subject.call("forward_offset", x, w, b.eps)
    _assert_routed(subject, case, y, x, "forward_offset")
    offset_dtype = subject.backend.offset_dtype
    assert_within(subject, case, actual=y, reference=reference_offset(x, w, b.eps, offset_dtype), dim=b.dim,
                  correctly_rounded=_strict_oracle(subject, x, offset_scale(w, offset_dtype)),
                  what=f"(x / rms) * (1 + weight) of {b.rows}x{b.dim} '{b.values}' rows, 1 + weight formed as "
                       f"offset_dtype={offset_dtype!r}, is off the fp32 reference")


def _offset_discriminates(subject) -> str | None:
    reason = _not_offered(OFFSET)(subject)
    if reason is None and subject.weight_dtype == "float32":
        return "with an fp32 weight, 1 + weight is the same formed in fp32 or in the weight's dtype"
    return reason


@conformance("variants.offset_dtype", AccuracyCase, _accuracy(OFFSET, values="normal"),
             skip_reason=_offset_discriminates)
def test_offset_dtype(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    y = subject.call("forward_offset", x, w, b.eps)
    declared = subject.backend.offset_dtype
    other = "weight" if declared == "float32" else "float32"
    result = rounding.vote(y, list(rounding.offset_classes(x, w, b.eps, declared).values()),
                           list(rounding.offset_classes(x, w, b.eps, other).values()))
    names = {"float32": "1 + weight in fp32", "weight": f"1 + weight in {b.weight_dtype}"}
    assert_holds(subject, case, ok=not result.breached, dim=b.dim,
                 what=f"declares offset_dtype={declared!r} but forms 1 + weight as {other!r}: "
                      + result.describe(names[declared], names[other]))


@conformance("variants.unweighted_output", AccuracyCase, _accuracy(UNWEIGHTED), skip_reason=_not_offered(UNWEIGHTED))
def test_unweighted_output(subject, case):
    b = case.batch
    x = subject.to_device(b.x())
    y = subject.call("forward_unweighted", x, b.eps)
    _assert_routed(subject, case, y, x, "forward_unweighted")
    ones = torch.ones(b.dim, dtype=torch.float32, device=x.device)
    assert_within(subject, case, actual=y, reference=reference_unweighted(x, b.eps), dim=b.dim,
                  correctly_rounded=_strict_oracle(subject, x, ones),
                  what=f"x / rms of {b.rows}x{b.dim} '{b.values}' rows is off the fp32 reference")


def _guarded(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy of ``t`` inside a buffer of GUARD elements each side: (the copy, the whole buffer)."""
    buffer = torch.full((t.numel() + 2 * GUARD,), 7.0, dtype=t.dtype, device=t.device)
    inner = buffer[GUARD: GUARD + t.numel()].view_as(t)
    inner.copy_(t)
    return inner, buffer


def _offers_any(subject) -> str | None:
    offered = [e for e in ENTRY_POINTS if _not_offered(e)(subject) is None]
    return None if offered else f"{subject.backend.name} offers none of " + ", ".join(e.method for e in ENTRY_POINTS)


@conformance("variants.purity", AccuracyCase, lambda s: strategies.accuracy_cases(dtype=s.dtype, max_elements=1 << 14),
             skip_reason=_offers_any)
def test_variant_purity(subject, case):
    """Inputs in guard buffers: only what a variant declares it writes may change; outputs alias no input.
    Calls go to the backend's own method, so an in-place fused add writes into the guarded x and residual."""
    b = case.batch
    impl = subject.backend.impl
    for entry in (e for e in ENTRY_POINTS if _not_offered(e)(subject) is None):
        rows_in, w = _inputs(subject, entry, b)
        (x, x_buf), (w_in, w_buf) = _guarded(rows_in[0]), _guarded(w)
        bufs = {"x": x_buf, "weight": w_buf}
        expected = {"x": x_buf.clone(), "weight": w_buf.clone()}
        if entry is FUSED_ADD:
            r, bufs["residual"] = _guarded(rows_in[1])
            expected["residual"] = bufs["residual"].clone()
            if subject.backend.fused_add_in_place:
                # What it declares it writes: y into x and residual_out into residual, in their dtypes.
                expected["x"][GUARD: GUARD + x.numel()] = _in_place_y(subject, x, r, w, b.eps).reshape(-1)
                expected["residual"][GUARD: GUARD + r.numel()] = (x.float() + r.float()).to(r.dtype).reshape(-1)
            with subject.isolated(entry.method):
                out = impl.fused_add(x, r, w_in, b.eps)
        elif entry is OFFSET:
            with subject.isolated(entry.method):
                out = impl.forward_offset(x, w_in, b.eps)
        else:
            with subject.isolated(entry.method):
                out = impl.forward_unweighted(x, b.eps)
        for name, buf in bufs.items():
            assert_bitwise(subject, case, actual=buf, expected=expected[name], dim=b.dim,
                           what=f"{entry.method}: {name}, or memory beside it, "
                                + ("is not what it declares it writes" if subject.backend.fused_add_in_place
                                   and entry is FUSED_ADD and name != "weight" else "changed during the call"))
        outs = out if isinstance(out, tuple | list) else () if out is None else (out,)
        storages = {b_.untyped_storage().data_ptr() for b_ in bufs.values()}
        aliased = [o for o in outs if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in storages]
        in_place = entry is FUSED_ADD and subject.backend.fused_add_in_place
        assert_holds(subject, case, ok=in_place or not aliased, dim=b.dim,
                     what=f"{entry.method} returned an output that shares storage with an input, without declaring "
                          "fused_add_in_place")


def _in_place_y(subject, x, r, w, eps) -> torch.Tensor:
    """What an in-place fused add must leave in x: the backend's own y for the same call, out of place."""
    y, _ = subject.call("fused_add", x, r, w, eps)
    return y.reshape(-1)


# --- mixed precision ---------------------------------------------------------------------------------------


def _mixed_only(subject) -> str | None:
    if subject.dtype == "float32":
        return "with float32 x an fp32 weight is in x's dtype: there is no rounding of it to ask about"
    if subject.weight_dtype != "float32":
        return f"{subject.backend.name} declares no fp32 weight with {subject.dtype} x"
    return None


@conformance("mixed_precision.fp32_weight", AccuracyCase,
             lambda s: strategies.accuracy_cases(dtype=s.dtype, max_elements=_budget(s), values="normal"),
             skip_reason=_mixed_only)
def test_fp32_weight(subject, case):
    """forward, and the fused add and offset where offered: the fp32 weight's bits, not its rounding's."""
    b = case.batch
    x, w = subject.inputs(b)
    rounded_w = w.to(x.dtype)
    outputs = {"forward": (subject.forward(x, w, b.eps), x, w, rounded_w)}
    if subject.backend.offers("fused_add"):
        r = subject.to_device(b.residual())
        y, residual_out = subject.call("fused_add", x, r, w, b.eps)
        outputs["fused_add"] = (y, residual_out.detach(), w, rounded_w)
    if subject.backend.offers("forward_offset"):
        declared = subject.backend.offset_dtype
        outputs["forward_offset"] = (subject.call("forward_offset", x, w, b.eps), x, offset_scale(w, declared),
                                     1.0 + rounded_w.float())
    for name, (out, rows, scale, rounded_scale) in outputs.items():
        mine = rounding_class_outputs(rows, scale.float(), b.eps, x.dtype)
        theirs = rounding_class_outputs(rows, rounded_scale.float(), b.eps, x.dtype)
        result = rounding.vote(out, list(mine.values()), list(theirs.values()))
        assert_holds(subject, case, ok=not result.breached, dim=b.dim,
                     what=f"{name} rounds the fp32 weight to {b.dtype} before the multiply: "
                          + result.describe("the fp32 weight", f"the weight rounded to {b.dtype}"))


# --- rounding class ----------------------------------------------------------------------------------------

# Fixed shapes, so that the report's shares compare across backends and runs: both target dims, one row and
# many, and an odd dim.
ROUNDING_SHAPES = ((1, 4096), (64, 4096), (256, 128), (7, 1000))


def _rounding_outputs(subject, batch: Batch) -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    """Entry point -> (its output, the output of each rounding class for the same inputs)."""
    backend, eps = subject.backend, batch.eps
    x, w = subject.inputs(batch)
    found = {"forward": (subject.forward(x, w, eps), rounding.forward_classes(x, w, eps))}
    if backend.offers("fused_add"):
        r = subject.to_device(batch.residual())
        y, residual_out = subject.call("fused_add", x, r, w, eps)
        found["fused_add"] = (y, rounding.fused_add_classes(x, r, residual_out.detach(), w, eps))
    if backend.offers("forward_offset"):
        found["forward_offset"] = (subject.call("forward_offset", x, w, eps),
                                   rounding.offset_classes(x, w, eps, backend.offset_dtype))
    if backend.offers("forward_unweighted") and subject.weight_dtype == subject.dtype:
        found["forward_unweighted"] = (subject.call("forward_unweighted", x, eps), rounding.unweighted_classes(x, eps))
    return found


def _claim_sides(entry: str, claimed: str, classes: dict[str, torch.Tensor]):
    """The claimed class's output against the other classes'; a fused add's with the stored residual (its rule)."""
    prefix = "stored_residual, " if entry == "fused_add" else ""
    others = [name for name in ROUNDING_CLASSES if name != claimed]
    return classes[prefix + claimed], [classes[prefix + name] for name in others], " or ".join(others)


@pytest.mark.conformance(rules=("variants.rounding_class",), case_types=("AccuracyCase",))
def test_rounding_class(subject):
    """Informational: for each entry point, the rows whose bits match each rounding class go to the report.
    A backend that declares its class is held to it (variants.rounding_class); one that declares none is
    skipped after its shares are recorded."""
    subject.rules = ("variants.rounding_class",)
    replayed = subject.replay_case
    batches = [replayed.batch] if isinstance(replayed, AccuracyCase) else [
        Batch(dim=dim, rows=rows, dtype=subject.dtype, weight="around_one", seed=seed,
              weight_dtype=subject.weight_dtype) for seed, (rows, dim) in enumerate(ROUNDING_SHAPES)]
    claims = subject.backend.rounding_classes
    for batch in batches:
        for entry, (out, classes) in _rounding_outputs(subject, batch).items():
            subject.collector.rounding.append({
                "backend": subject.backend.name, "device": str(subject.device), "dtype": subject.dtype_label,
                "variant": entry, "rows": out.numel() // max(batch.dim, 1), "declared": claims.get(entry, ""),
                "matches": rounding.row_matches(out, classes), "distinguishable": rounding.distinguishable(classes)})
            if entry in claims:
                mine, theirs, other = _claim_sides(entry, claims[entry], classes)
                result = rounding.vote(out, [mine], theirs)
                assert_holds(subject, AccuracyCase(batch), ok=not result.breached, dim=batch.dim,
                             what=f"{entry} declares rounding class {claims[entry]!r} but follows {other}: "
                                  + result.describe(claims[entry], other))
    if not any(e in claims for e in ROUNDED_ENTRY_POINTS):
        pytest.skip(f"{subject.backend.name} declares no rounding_class: the classes its bits match are in the "
                    "report, no claim was checked")
