"""RMSNorm fused with fp8 quantization (static scale, dynamic per-row scale, each with and without the fused add):
the fp8 bits and scales under the Axis-A variants, the 1-ULP output bound, the dynamic scale, and the declared fp8
rounding class.

A backend that offers none of an entry point is skipped for it, with that reason. A static scale is one value per
case, taken from the case's whole batch and its seed (so a replay rebuilds it): 2^-3 to 2^9 times the scale that
maps the batch's largest |y| to 448, so that some cases saturate and some quantize most of a row to fp8 subnormals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import event
from hypothesis import strategies as st

from ..contract import FP8_OUTPUT_BOUND, FP8_ROUNDING_CLASSES, FP8_SCALE_BOUND
from ..contract.families import fp8
from ..contract.fp8 import (
    E4M3_MAX,
    FP8_DTYPE,
    MIN_NORMAL,
    dynamic_scale,
    fp8_rounding_class_outputs,
)
from ..contract.reference import reference_fp32
from ..harness import (
    AccuracyCase,
    Batch,
    BatchSizeCase,
    LeadingDimsCase,
    PaddingCase,
    PositionCase,
    RepeatCase,
    SliceCase,
    assert_bitwise,
    assert_holds,
    assert_within,
    conformance,
    make_pad,
    rounding,
    run_check,
    strategies,
    ulp_distance,
)

REPEATS = 4  # as in Axis-A: a reduction order that varies per call agrees on one row about half the time
# A 32nd of forward's element budget (128K elements on the CPU: 32 rows of 4096, 1024 of 128): several calls and
# references per check, four entry points, and forward's own Axis-A tests already reach the largest batches.
BUDGET_SHARE = 32
# A static scale is 2^shift times the scale that maps the batch's largest |y| to 448, shift from the case's seed:
# -3 saturates the top of the batch, 9 puts most of a normal row among the fp8 subnormals.
SCALE_SHIFTS = tuple(range(-3, 10))


@dataclass(frozen=True)
class Fp8Entry:
    """An fp8 entry point as the suite calls it."""

    method: str
    short: str
    residual: bool  # takes a residual and returns residual_out
    dynamic: bool  # returns per-row scales instead of taking one

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("q",) + (("scale",) if self.dynamic else ()) + (("residual_out",) if self.residual else ())


STATIC = Fp8Entry("forward_fp8_static", "static", residual=False, dynamic=False)
DYNAMIC = Fp8Entry("forward_fp8_dynamic", "dynamic", residual=False, dynamic=True)
FUSED_STATIC = Fp8Entry("fused_add_fp8_static", "fused_add_static", residual=True, dynamic=False)
FUSED_DYNAMIC = Fp8Entry("fused_add_fp8_dynamic", "fused_add_dynamic", residual=True, dynamic=True)
ENTRIES = (STATIC, DYNAMIC, FUSED_STATIC, FUSED_DYNAMIC)


def _not_offered(entry: Fp8Entry) -> Callable:
    def reason(subject) -> str | None:
        if not subject.backend.offers(entry.method):
            return f"{subject.backend.name} does not offer {entry.method}"
        return None

    return reason


def _budget(subject) -> int:
    return max(1, subject.max_elements // BUDGET_SHARE)


def _cases(strategy: Callable) -> Callable:
    return lambda subject: strategy(dtype=subject.dtype, max_elements=_budget(subject))


def _inputs(subject, entry: Fp8Entry, b: Batch, *, salt: int = 0, rows: int | None = None):
    """The row tensors a call takes (x, and a fused add's residual) and the weight, on the subject's device."""
    x = subject.to_device(b.x(rows, salt))
    rows_in = [x, subject.to_device(b.residual(rows, salt))] if entry.residual else [x]
    return rows_in, subject.to_device(b.w())


def _normalized(entry: Fp8Entry, rows_in: list[torch.Tensor], w: torch.Tensor, eps: float) -> torch.Tensor:
    """The fp32 reference y of these rows (a fused add's: of x + residual rounded to the residual's dtype)."""
    rows = rows_in[0]
    if entry.residual:
        rows = (rows_in[0].float() + rows_in[1].float()).to(rows_in[1].dtype)
    return reference_fp32(rows, w, eps).detach()


def static_scale(batch: Batch, entry: Fp8Entry, rows_in: list[torch.Tensor], w: torch.Tensor) -> torch.Tensor | None:
    """The case's static scale (None for a dynamic entry), from its rows and seed: see ``SCALE_SHIFTS``."""
    if entry.dynamic:
        return None
    y32 = _normalized(entry, rows_in, w, batch.eps)
    finite = y32[torch.isfinite(y32)].abs()
    amax = float(finite.max()) if finite.numel() else 0.0
    shift = SCALE_SHIFTS[batch.seed % len(SCALE_SHIFTS)]
    value = (amax if amax > 0 else 1.0) / E4M3_MAX * 2.0**shift
    return torch.tensor([value], dtype=torch.float32, device=rows_in[0].device)


def _run(subject, entry: Fp8Entry, rows_in, w, eps, scale) -> tuple[torch.Tensor, ...]:
    """The entry point's outputs, called through the subject (isolated and watched like every backend call)."""
    args = [*rows_in, w, eps] + ([] if entry.dynamic else [scale])
    out = subject.call(entry.method, *args)
    return out if isinstance(out, tuple) else (out,)


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1]) if t.dim() else t


def _assert_outputs(subject, case, entry: Fp8Entry, actual, expected, what: str) -> None:
    # The values are checked first, with the outputs they are computed from (the scale, the residual) at hand: where
    # one of those differs too, the breach's diagnosis names its stage, not the values'.
    upstream = {name: (_as_rows(a), _as_rows(e)) for name, a, e in zip(entry.outputs, actual, expected, strict=True)
                if name != "q"}
    for name, a, e in zip(entry.outputs, actual, expected, strict=True):
        assert_bitwise(subject, case, actual=_as_rows(a), expected=_as_rows(e), dim=case.batch.dim,
                       what=f"{entry.method} {name}: {what}", upstream=upstream if name == "q" else None)


# --- Axis-A -------------------------------------------------------------------------------------------------


def check_batch_size(subject, entry: Fp8Entry, case: BatchSizeCase) -> None:
    b, n = case.batch, case.length
    rows_in, w = _inputs(subject, entry, b)
    scale = static_scale(b, entry, rows_in, w)
    full = _run(subject, entry, rows_in, w, b.eps, scale)
    alone = _run(subject, entry, [t[:n].clone() for t in rows_in], w, b.eps, scale)
    _assert_outputs(subject, case, entry, alone, [o[:n] for o in full],
                    f"rows [0:{n}] alone differ from the same rows in a batch of {b.rows}")


def check_slice_offset(subject, entry: Fp8Entry, case: SliceCase) -> None:
    b, lo, hi = case.batch, case.start, case.start + case.length
    rows_in, w = _inputs(subject, entry, b)
    scale = static_scale(b, entry, rows_in, w)
    full = _run(subject, entry, rows_in, w, b.eps, scale)
    part = [t[lo:hi] if case.as_view else t[lo:hi].clone() for t in rows_in]
    kind = "view" if case.as_view else "copy"
    _assert_outputs(subject, case, entry, _run(subject, entry, part, w, b.eps, scale), [o[lo:hi] for o in full],
                    f"rows [{lo}:{hi}] as a {kind} differ from the same rows of the whole batch")


def check_padding(subject, entry: Fp8Entry, case: PaddingCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)
    scale = static_scale(b, entry, rows_in, w)
    gen = b.generator(salt=7)
    padded = []
    for t in rows_in:
        dtype = str(t.dtype).removeprefix("torch.")
        before = make_pad(case.content, case.before, b.dim, dtype, gen)
        after = make_pad(case.content, case.after, b.dim, dtype, gen)
        padded.append(torch.cat([subject.to_device(before), t, subject.to_device(after)]))
    alone = _run(subject, entry, rows_in, w, b.eps, scale)
    out = _run(subject, entry, padded, w, b.eps, scale)
    _assert_outputs(subject, case, entry, [o[case.before: case.before + b.rows] for o in out], alone,
                    f"{b.rows} real rows between {case.before} and {case.after} pad rows of {case.content} "
                    f"differ from the real rows alone")


def check_position(subject, entry: Fp8Entry, case: PositionCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)
    scale = static_scale(b, entry, rows_in, w)

    def placed(index: int) -> list[torch.Tensor]:
        return [torch.cat([t[1:][:index], t[:1], t[1:][index:]]) for t in rows_in]

    first = [o[case.first] for o in _run(subject, entry, placed(case.first), w, b.eps, scale)]
    second = [o[case.second] for o in _run(subject, entry, placed(case.second), w, b.eps, scale)]
    _assert_outputs(subject, case, entry, second, first,
                    f"one row at index {case.second} differs from the same row at index {case.first} of a batch "
                    f"of {b.rows}")


def check_leading_dims(subject, entry: Fp8Entry, case: LeadingDimsCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)
    scale = static_scale(b, entry, rows_in, w)
    flat = _run(subject, entry, rows_in, w, b.eps, scale)
    shaped = _run(subject, entry, [t.view(*case.shape, b.dim) for t in rows_in], w, b.eps, scale)
    _assert_outputs(subject, case, entry, shaped, flat,
                    f"inputs viewed as {[*case.shape, b.dim]} differ from the flat [{b.rows}, {b.dim}]")


def check_repeat(subject, entry: Fp8Entry, case: RepeatCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)
    scale = static_scale(b, entry, rows_in, w)
    first = _run(subject, entry, rows_in, w, b.eps, scale)
    other, _ = _inputs(subject, entry, b, salt=3, rows=max(1, b.rows // 2) + 1)
    for attempt in range(1, REPEATS + 1):
        _run(subject, entry, other, w, b.eps, scale)
        again = _run(subject, entry, rows_in, w, b.eps, scale)
        _assert_outputs(subject, case, entry, again, first, f"repeat {attempt} of the same call gave different bits")


AXIS_A_CHECKS = (
    ("batch_size", BatchSizeCase, strategies.batch_size_cases, check_batch_size),
    ("slice_offset", SliceCase, strategies.slice_cases, check_slice_offset),
    ("padding", PaddingCase, strategies.padding_cases, check_padding),
    ("position", PositionCase, strategies.position_cases, check_position),
    ("leading_dims", LeadingDimsCase, strategies.leading_dims_cases, check_leading_dims),
    ("repeat", RepeatCase, strategies.repeat_cases, check_repeat),
)


def _axis_a_test(entry: Fp8Entry, variant: str, case_type: type, strategy: Callable, check: Callable) -> Callable:
    def test(subject, case):
        check(subject, entry, case)

    test.__name__ = test.__qualname__ = f"test_fp8_{entry.short}_{variant}"
    test.__doc__ = f"axis_a.fp8 for {entry.method}: the {variant.replace('_', ' ')} variant."
    return conformance(fp8.AXIS_A_FP8.id, case_type, _cases(strategy), skip_reason=_not_offered(entry))(test)


# One test per (entry point, Axis-A variant): test_fp8_static_batch_size, ..., test_fp8_fused_add_dynamic_repeat.
for _entry in ENTRIES:
    for _variant, _case_type, _strategy, _check in AXIS_A_CHECKS:
        _test = _axis_a_test(_entry, _variant, _case_type, _strategy, _check)
        globals()[_test.__name__] = _test
del _entry, _variant, _case_type, _strategy, _check, _test


# --- the output bound, the dynamic scale --------------------------------------------------------------------


def _accuracy(subject) -> st.SearchStrategy:
    """Accuracy cases; rows of mixed scales a third of the time, so that one static scale both saturates some rows
    and puts others among the fp8 subnormals."""
    budget = _budget(subject)
    return st.one_of(strategies.accuracy_cases(dtype=subject.dtype, max_elements=budget, values="mixed_rows"),
                     strategies.accuracy_cases(dtype=subject.dtype, max_elements=budget),
                     strategies.accuracy_cases(dtype=subject.dtype, max_elements=budget))


def _kernel_scale(subject, case, entry: Fp8Entry, outs, x: torch.Tensor, rule: str) -> torch.Tensor:
    """The kernel's dynamic scale as fp32 of shape x.shape[:-1] + (1,), or a failure of ``rule`` saying what it
    returned instead."""
    scale = outs[1]
    want = (*x.shape[:-1], 1)
    ok = scale.dtype == torch.float32 and tuple(scale.shape) == want
    assert_holds(subject, case, ok=ok, dim=case.batch.dim, rule=rule,
                 what=f"{entry.method} returned a scale of (dtype, shape) {(scale.dtype, tuple(scale.shape))}, but "
                      f"should be {(torch.float32, want)}")
    return scale.detach()


def nearest_target(q: torch.Tensor, targets: list[torch.Tensor]) -> torch.Tensor:
    """Element by element, the target nearest ``q`` in fp8 ULPs: the correctly rounded fp8 value of either fp8
    rounding class, so that the bound is 1 ULP from the class a kernel follows."""
    q = q.detach().cpu()
    best = targets[0].cpu()
    distance = ulp_distance(q, best)
    for t in targets[1:]:
        t = t.cpu()
        closer = ulp_distance(q, t) < distance
        best = torch.where(closer, t, best)
        distance = torch.where(closer, ulp_distance(q, t), distance)
    return best


def check_output(subject, entry: Fp8Entry, case: AccuracyCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)
    scale = static_scale(b, entry, rows_in, w)
    outs = _run(subject, entry, rows_in, w, b.eps, scale)
    x, q = rows_in[0], outs[0]
    got, want = (q.dtype, tuple(q.shape)), (FP8_DTYPE, tuple(x.shape))
    assert_holds(subject, case, ok=got == want, dim=b.dim,
                 what=f"{entry.method} returned (dtype, shape) {got}, but should be {want}")
    # y32 from the residual the kernel stored (its own rule checks that one), as a fused add's y is.
    rows = outs[-1].detach() if entry.residual else x
    y32 = reference_fp32(rows, w, b.eps).detach()
    used = _kernel_scale(subject, case, entry, outs, x, fp8.FP8_OUTPUT.id) if entry.dynamic else scale
    scaled = (y32 / used).clamp(-E4M3_MAX, E4M3_MAX)
    saturated = int((scaled.abs() == E4M3_MAX).sum())
    subnormal = int(((scaled.abs() < MIN_NORMAL) & (scaled != 0)).sum())
    event("fp8 output saturates" if saturated else "fp8 output within range")
    event("fp8 output has subnormals" if subnormal else "fp8 output has no subnormals")
    how = "its own per-row scales" if entry.dynamic else f"scale {float(scale):.6g}"
    classes = fp8_rounding_class_outputs(rows, w, b.eps, x.dtype, used)
    assert_within(subject, case, actual=q, reference=scaled, bound=FP8_OUTPUT_BOUND, dim=b.dim,
                  correctly_rounded=nearest_target(q, [t for side in classes.values() for t in side]),
                  what=f"{entry.method} of {b.rows}x{b.dim} '{b.values}' rows at {how} ({saturated} elements "
                       f"saturated, {subnormal} subnormal) is off the correctly rounded fp8 reference")


def check_scale(subject, entry: Fp8Entry, case: AccuracyCase) -> None:
    b = case.batch
    rows_in, w = _inputs(subject, entry, b)
    outs = _run(subject, entry, rows_in, w, b.eps, None)
    x = rows_in[0]
    scale = _kernel_scale(subject, case, entry, outs, x, fp8.FP8_SCALE.id)
    rows = outs[-1].detach() if entry.residual else x
    assert_within(subject, case, actual=scale, reference=dynamic_scale(reference_fp32(rows, w, b.eps).detach()),
                  bound=FP8_SCALE_BOUND, dim=b.dim,
                  what=f"{entry.method}'s per-row scales of {b.rows}x{b.dim} '{b.values}' rows are not each row's "
                       "own max |y| / 448")


def _rule_test(rule: str, entry: Fp8Entry, name: str, check: Callable) -> Callable:
    def test(subject, case):
        check(subject, entry, case)

    test.__name__ = test.__qualname__ = f"test_fp8_{entry.short}_{name}"
    test.__doc__ = f"{rule} for {entry.method}."
    return conformance(rule, AccuracyCase, _accuracy, skip_reason=_not_offered(entry))(test)


for _entry in ENTRIES:
    _test = _rule_test(fp8.FP8_OUTPUT.id, _entry, "output", check_output)
    globals()[_test.__name__] = _test
    if _entry.dynamic:
        _test = _rule_test(fp8.FP8_SCALE.id, _entry, "scale", check_scale)
        globals()[_test.__name__] = _test
del _entry, _test


# --- the declared fp8 rounding class -------------------------------------------------------------------------

# Fixed shapes, as for the rounding class of forward: both target dims, one row and many, an odd dim.
ROUNDING_SHAPES = ((1, 4096), (64, 4096), (256, 128), (7, 1000))


def _rounding_sides(subject, entry: Fp8Entry, batch: Batch) -> tuple[torch.Tensor, dict[str, list[torch.Tensor]]]:
    """The entry's q and each fp8 rounding class's q for the same rows and scale (the kernel's own, if dynamic)."""
    rows_in, w = _inputs(subject, entry, batch)
    scale = static_scale(batch, entry, rows_in, w)
    outs = _run(subject, entry, rows_in, w, batch.eps, scale)
    rows = outs[-1].detach() if entry.residual else rows_in[0]
    used = outs[1].detach().reshape(*rows.shape[:-1], 1) if entry.dynamic else scale.reshape(())
    return outs[0], fp8_rounding_class_outputs(rows, w, batch.eps, rows_in[0].dtype, used)


@pytest.mark.conformance(rules=(fp8.FP8_ROUNDING_CLASS.id,), case_types=("AccuracyCase",))
def test_fp8_rounding_class(subject):
    """A backend that declares an fp8 rounding class is held to it on every fp8 entry point it declares it for;
    one that declares none is skipped."""
    subject.rules = (fp8.FP8_ROUNDING_CLASS.id,)
    claims = subject.backend.fp8_rounding_classes
    offered = [e for e in ENTRIES if subject.backend.offers(e.method) and e.method in claims]
    if not offered:
        pytest.skip(f"{subject.backend.name} declares no fp8_rounding_class for an fp8 entry point it offers")
    replayed = subject.replay_case
    batches = [replayed.batch] if isinstance(replayed, AccuracyCase) else [
        Batch(dim=dim, rows=rows, dtype=subject.dtype, weight="around_one", seed=seed,
              weight_dtype=subject.weight_dtype) for seed, (rows, dim) in enumerate(ROUNDING_SHAPES)]
    ran: list[Batch] = []

    def check(batch: Batch, entry: Fp8Entry) -> None:
        q, classes = _rounding_sides(subject, entry, batch)
        ran.append(batch)
        claimed = claims[entry.method]
        others = [name for name in FP8_ROUNDING_CLASSES if name != claimed]
        result = rounding.vote(q, classes[claimed], [t for name in others for t in classes[name]])
        other = " or ".join(others)
        assert_holds(subject, AccuracyCase(batch), ok=not result.breached, dim=batch.dim,
                     what=f"{entry.method} declares fp8 rounding class {claimed!r} but follows {other}: "
                          + result.describe(claimed, other))

    # Each shape as every check runs a case: outside the declared limits not run, a clear refusal recorded as one.
    for batch in batches:
        for entry in offered:
            run_check(subject, (fp8.FP8_ROUNDING_CLASS.id,), AccuracyCase(batch),
                      lambda batch=batch, entry=entry: check(batch, entry))
    if not ran:
        pytest.skip(f"no shape of the fp8 rounding-class test ran for {subject.backend.name}: each was outside its "
                    "declared limits or refused")
