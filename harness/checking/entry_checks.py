"""The checks every entry point is held to, written once over an EntryPoint description: each Axis-A variant of
CONTRACT.md's table, and NaN/Inf confinement. The suites generate their tests from this table for forward's
entry points and for each variant, as opcheck generates its tests, so no check exists in two drifting copies.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import strategies as st

from ...contract import rule as contract_rule
from ...contract.families import axis_a as axis_a_rules
from ...contract.families import semantics
from ..drawing import mode_sample, strategies, thresholds
from ..drawing.cases import (
    WEIGHT_LAYOUTS,
    BatchSizeCase,
    ExecutionModeCase,
    FirstCallCase,
    GradModeCase,
    LeadingDimsCase,
    NonfiniteCase,
    PaddingCase,
    PermutationCase,
    PositionCase,
    RepeatCase,
    SliceCase,
    StridedCase,
    drawing_device,
    lay_out_weight,
    pad_rows,
    strided_layout,
)
from ..running.backend import same_layout_copy
from ..running.entry_points import (
    FUSED_ADD,
    OFFSET,
    UNWEIGHTED,
    EntryPoint,
    call,
    entry_point,
    entry_points,
    missing_reason,
)
from ..running.fresh_process import (
    FreshCalls,
    first_call_plan,
    fresh_calls,
    interleaved,
    run_fresh,
)
from ..running.modes import (
    intra_op_threads,
    sample_backend,
    sample_modes,
    thread_counts,
)
from . import refusals
from .checks import (
    OOM_PAUSE_S,
    OOM_TRIES,
    Subject,
    assert_bitwise,
    assert_holds,
    assert_within,
    cap_examples,
    conformance,
)
from .plans import PlanMaker, explicit_cases

REPEATS = 4  # reduction orders that vary per call agree on a single row about half the time
PAD_SALT = 7  # pad rows of each row input come from their own generator
NONFINITE_SALT = 11  # which rows and columns get NaN or Inf: their own generator
# A variant's cases take an eighth of forward's element budget: a fused add holds twice the tensors, and
# forward's own tests already reach the largest batches (512K elements still give 128 rows at dim 4096 and 4096
# rows at dim 128 on the CPU).
VARIANT_BUDGET_SHARE = 8

Outputs = tuple[torch.Tensor, ...]


# --- calling an entry point as a case says ---------------------------------------------------------------------


def _entry(case: Any) -> EntryPoint:
    return entry_point(case.entry)


def _inputs(subject: Subject, case: Any, *, rows: int | None = None,
            salt: int = 0) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """The case's row inputs and weight (in the batch's layout) on the subject's device."""
    reason = missing_reason(subject.backend, case.entry)
    if reason:
        pytest.skip(reason)
    return _entry(case).inputs(case.batch, subject.device, rows=rows, salt=salt)


def _call(subject: Subject, case: Any, rows: Sequence[torch.Tensor], w: torch.Tensor | None, *,
          last: bool = False) -> Outputs:
    """The case's entry point on ``rows``, after one warm-up call for its (entry point, dim, dtypes): a kernel
    whose first call differs breaks axis_a.first_call (checked in a fresh process), and must not be blamed on
    whichever Axis-A variant happened to make that call. ``last``: the check compares these outputs before any
    other call, so they need no copy of their own (entry_points.call's ``fresh``)."""
    b = case.batch
    key = (case.entry, b.dim, b.dtype, b.weight_dtype, b.residual_dtype, str(subject.device))
    if key not in subject.warmed:
        subject.warmed.add(key)
        call(subject, case.entry, [t[..., :1, :] if t.dim() > 1 else t for t in rows], w, b.eps)
    return call(subject, case.entry, rows, w, b.eps, fresh=not last)


def _assert_same(subject: Subject, case: Any, *, actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor],
                 what: str) -> None:
    """Every output of the entry point bitwise equal, each named with the entry point."""
    __tracebackhide__ = True
    entry = _entry(case)
    for name, a, e in zip(entry.outputs, actual, expected, strict=True):
        label = entry.name if len(entry.outputs) == 1 else f"{entry.name} {name}"
        assert_bitwise(subject, case, actual=a, expected=e, what=f"{label}: {what}", dim=case.batch.dim)


def _whole(subject: Subject, case: Any, memo: dict) -> tuple[list[torch.Tensor], torch.Tensor | None, Outputs]:
    """Row inputs, weight and outputs of ``case.batch`` whole: computed once per batch and entry point, so a
    threshold plan compares many sub-batches against one large batch."""
    key = (case.batch, case.entry)
    if memo.get("whole", (None,))[0] != key:
        memo.pop("whole", None)  # free the previous batch first: threshold batches fill the budget
        if memo.get("drawn", (None,))[0] != key:
            # Kept apart from the outputs: a backend that refuses the whole batch is asked again by the next
            # case, and must not cost a fresh draw of up to the whole budget each time.
            memo.pop("drawn", None)
            memo["drawn"] = (key, _inputs(subject, case))
        rows, w = memo["drawn"][1]
        memo["whole"] = (key, (rows, w, _call(subject, case, rows, w)))
    return memo["whole"][1]


# --- Axis-A: one check per variant ---------------------------------------------------------------------------


def check_batch_size(subject: Subject, case: BatchSizeCase, memo: dict) -> None:
    rows, w, full = _whole(subject, case, memo)
    a, n = case.start, case.length
    alone = _call(subject, case, [t[a: a + n].clone() for t in rows], w, last=True)
    _assert_same(subject, case, actual=alone, expected=[o[a: a + n] for o in full],
                 what=f"rows [{a}:{a + n}] alone differ from the same rows in a batch of {case.batch.rows}")


def check_slice_offset(subject: Subject, case: SliceCase, memo: dict) -> None:
    rows, w, full = _whole(subject, case, memo)
    a, n = case.start, case.length
    part = [t[a: a + n] if case.as_view else t[a: a + n].clone() for t in rows]
    kind = "view" if case.as_view else "copy"
    _assert_same(subject, case, actual=_call(subject, case, part, w, last=True), expected=[o[a: a + n] for o in full],
                 what=f"rows [{a}:{a + n}] as a {kind} differ from the same rows of the whole batch")


def check_padding(subject: Subject, case: PaddingCase, memo: dict) -> None:
    b = case.batch
    rows, w = _inputs(subject, case)
    gen = b.generator(salt=PAD_SALT, device=drawing_device((case.before + case.after) * b.dim, subject.device))
    padded = [pad_rows(t, case.content, case.before, case.after, gen) for t in rows]
    alone = _call(subject, case, rows, w)
    out = _call(subject, case, padded, w, last=True)
    _assert_same(subject, case, actual=[o[case.before: case.before + b.rows] for o in out], expected=alone,
                 what=f"{b.rows} real rows between {case.before} and {case.after} pad rows of {case.content} "
                      "differ from the real rows alone")


def check_position(subject: Subject, case: PositionCase, memo: dict) -> None:
    """Row 0 moved from index ``first`` to ``second``: it, and each row between that moves by one index with it,
    must keep its bits. Every row is compared, back in the order drawn: compared alone, the moved row let a kernel
    whose bits follow the index's parity pass the ci sweep, where the two indices drawn had one parity or the row
    rounded alike in both orders (the rows between always change their parity)."""
    b = case.batch
    rows, w = _inputs(subject, case)

    def placed(index: int) -> list[torch.Tensor]:
        return [torch.cat([t[1:][:index], t[:1], t[1:][index:]]) for t in rows]

    def drawn_order(out: torch.Tensor, index: int) -> torch.Tensor:
        return torch.cat([out[index: index + 1], out[:index], out[index + 1:]])

    first = [drawn_order(o, case.first) for o in _call(subject, case, placed(case.first), w)]
    second = [drawn_order(o, case.second) for o in _call(subject, case, placed(case.second), w)]
    lo, hi = sorted((case.first, case.second))
    _assert_same(subject, case, actual=second, expected=first,
                 what=f"rows placed at other indices differ: one row moved from index {case.first} to "
                      f"{case.second} of a batch of {b.rows}, the rows between (indices {lo}-{hi}) by one")


def check_permutation(subject: Subject, case: PermutationCase, memo: dict) -> None:
    b = case.batch
    rows, w = _inputs(subject, case)
    perm = subject.to_device(torch.randperm(b.rows, generator=torch.Generator().manual_seed(case.perm_seed)))
    out = _call(subject, case, [t[perm] for t in rows], w)
    expected = [o[perm] for o in _call(subject, case, rows, w)]
    _assert_same(subject, case, actual=out, expected=expected, what=f"permuting {b.rows} rows changed output bits")


def check_leading_dims(subject: Subject, case: LeadingDimsCase, memo: dict) -> None:
    b = case.batch
    rows, w = _inputs(subject, case)
    flat = _call(subject, case, rows, w)
    shaped = _call(subject, case, [t.view(*case.shape, b.dim) for t in rows], w)
    _assert_same(subject, case, actual=[o.reshape(-1, b.dim) for o in shaped], expected=flat,
                 what=f"inputs viewed as {[*case.shape, b.dim]} differ from the flat [{b.rows}, {b.dim}]")


def check_strided_rows(subject: Subject, case: StridedCase, memo: dict) -> None:
    b = case.batch
    rows, w = _inputs(subject, case)
    views = [strided_layout(case, t) for t in rows]
    contiguous = [v.contiguous() for v in views]
    w_contiguous = w.contiguous() if w is not None else None
    expected = _call(subject, case, contiguous, w_contiguous)
    _assert_same(subject, case, actual=_call(subject, case, views, w), expected=expected,
                 what=f"{case.layout} layout with strides {tuple(views[0].stride())} and a {b.weight_layout} "
                      "weight differs from contiguous copies")
    if w_contiguous is None:
        return
    # Every weight layout, on every case: the layout of the weight is this variant's too.
    for layout in WEIGHT_LAYOUTS[1:]:
        laid_out = lay_out_weight(w_contiguous, layout)
        _assert_same(subject, case, actual=_call(subject, case, contiguous, laid_out), expected=expected,
                     what=f"a {layout} weight (strides {laid_out.stride()}, storage offset "
                          f"{laid_out.storage_offset()}) differs from a contiguous one")


def check_repeat(subject: Subject, case: RepeatCase, memo: dict) -> None:
    b = case.batch
    rows, w = _inputs(subject, case)
    first = _call(subject, case, rows, w)
    other, _ = _inputs(subject, case, rows=max(1, b.rows // 2) + 1, salt=3)
    # Several repeats, with a different call before each: state left behind by one call must not leak into
    # the next, and a nondeterministic kernel that agrees half the time is still caught.
    for attempt in range(1, REPEATS + 1):
        _call(subject, case, other, w)
        _assert_same(subject, case, actual=_call(subject, case, rows, w), expected=first,
                     what=f"repeat {attempt} of the same call gave different bits")


def _requiring_grad(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def _requiring_grad_weight(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else _requiring_grad(t)


def _clone(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.clone()


def check_grad_mode(subject: Subject, case: GradModeCase, memo: dict) -> None:
    """Training calls the norm on inputs that require grad, sampling under inference_mode (or no_grad): the
    same rows must give the same bits in each. Which inputs require grad is tried each way a trainer has them: a
    kernel that branches on ``ctx.needs_input_grad`` (a frozen weight under LoRA) changed its bits in training
    there alone, and passed while both inputs were made to require grad together."""
    b = case.batch
    rows, w = _inputs(subject, case)
    plain = _call(subject, case, rows, w)
    found: list[tuple[str, Outputs]] = []
    with torch.enable_grad():
        found.append(("inputs that require grad",
                      _call(subject, case, [_requiring_grad(t) for t in rows], _requiring_grad_weight(w))))
        if w is not None:
            found.append(("x requiring grad and the weight frozen (LoRA)",
                          _call(subject, case, [_requiring_grad(t) for t in rows], _same_layout(w))))
            found.append(("the weight requiring grad and x not", _call(subject, case, _same_layouts(rows),
                                                                       _requiring_grad_weight(w))))
            found.append(("the weight an nn.Parameter", _call(subject, case, [_requiring_grad(t) for t in rows],
                                                              torch.nn.Parameter(same_layout_copy(w.detach())))))
    with torch.no_grad():
        found.append(("torch.no_grad()", _call(subject, case, [_requiring_grad(t) for t in rows],
                                               _requiring_grad_weight(w))))
    with torch.inference_mode():
        found.append(("torch.inference_mode()", _call(subject, case, [t.clone() for t in rows], _clone(w))))
    for mode, out in found:
        _assert_same(subject, case, actual=out, expected=plain,
                     what=f"{b.rows} rows with {mode} differ from the same rows with plain inputs")


def _same_layout(t: torch.Tensor | None) -> torch.Tensor | None:
    """A copy with ``t``'s strides (``clone`` would make a strided weight contiguous), made in the current mode."""
    return None if t is None else same_layout_copy(t.detach())


def _same_layouts(rows: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Copies of an entry point's row inputs, each with its own strides."""
    return [same_layout_copy(t.detach()) for t in rows]


def check_execution_mode(subject: Subject, case: ExecutionModeCase, memo: dict) -> None:
    """An engine runs the kernel compiled, captured in a CUDA graph and replayed, under no_grad or inference_mode;
    a trainer runs it eagerly, often under deterministic algorithms, with whatever thread count its machine has.
    Each must give eager's bits, through every entry point."""
    if not subject.mode_sample:
        pytest.skip("the execution-mode sample is off (--modes=none)")
    if subject.weight_dtype != subject.dtype:
        pytest.skip("the execution-mode sample runs with the weight in x's dtype (each compiled dtype pair costs "
                    "its own traces); --modes compiles forward and forward_fp32 in every pair over the full sweep")
    b = case.batch
    rows, w = _inputs(subject, case)
    eager = _call(subject, case, rows, w)
    found: list[tuple[str, Outputs]] = []
    for label, grad_mode in (("torch.no_grad()", torch.no_grad), ("torch.inference_mode()", torch.inference_mode)):
        with grad_mode():
            found.append((label, call(subject, case.entry, _same_layouts(rows), _same_layout(w), b.eps)))
    if subject.device.type == "cpu":
        # A CPU kernel may split a row's reduction over its threads (where rows are fewer than threads): under
        # pytest-xdist each worker runs one thread a core it was dealt, and the other counts' paths never ran.
        threads = torch.get_num_threads()
        for count in thread_counts():
            if count != threads:
                with intra_op_threads(count):
                    found.append((f"{count} intra-op threads (not {threads})",
                                  call(subject, case.entry, _same_layouts(rows), _same_layout(w), b.eps)))
    for mode in sample_modes(subject.device):
        moded = dataclasses.replace(subject, backend=sample_backend(subject.backend, mode, subject.device),
                                    record_as=subject.record_as or (subject.backend.name, str(subject.device)))
        # A clear exception under the mode is a refusal, as in eager: Subject.call raises it as one.
        found.append((MODE_LABELS[mode], call(moded, case.entry, _same_layouts(rows), _same_layout(w), b.eps)))
    for label, out in found:
        _assert_same(subject, case, actual=out, expected=eager,
                     what=f"{b.rows} rows under {label} differ from the same rows run eagerly")


def _first_calls_together(subject: Subject, memo: dict) -> list[FirstCallCase]:
    """Every first-call case of this subject's entry points (the plain norm's and each variant's it offers), in
    the order one fresh process makes them; the asking test's own plan where the others cannot be made here."""
    make = memo.get("plan_for")
    if make is None:
        return list(memo["plan"])
    plans = []
    for group in (FORWARD_GROUP, *(variant_group(e, prefix) for e, prefix in VARIANT_GROUPS)):
        entries = group.entries(subject.backend)
        if entries and group.skip_reason(subject) is None and not any(
                missing_reason(subject.backend, e) for e in entries):
            plans.append(make(entries, group.budget_share))
    return interleaved(plans)


# How a report names each execution mode of the sample.
MODE_LABELS = {"compile": "torch.compile", "cudagraph": "CUDA-graph capture and replay",
               "deterministic": "torch.use_deterministic_algorithms(True)"}


def _within_limits(subject: Subject, cases: Sequence[FirstCallCase]) -> list[FirstCallCase]:
    """The cases whose dim the backend declares it takes: a fresh process makes no call outside its limits (a
    kernel may crash there, and with it every first call of the process)."""
    return [c for c in cases if subject.backend.limits.dim_outside(c.batch.dim) is None]


def _with_memory(subject: Subject, fresh: FreshCalls) -> FreshCalls:
    """``fresh`` with the cases whose call ran out of memory made again, in a fresh process of their own (a first
    call cannot be tried again in the process that made it), as ``run_check`` tries a case again: workers share a
    GPU, and one's peak can leave another's process short. Short on every try, the error stays, saying so."""
    for attempt in range(1, OOM_TRIES):
        short = [c for c in fresh.case_errors if c in fresh.out_of_memory]
        if fresh.error is not None or not short:
            break
        if attempt == 1:
            subject.collector.add_retried(subject.backend.name, str(subject.device), subject.dtype_label,
                                          axis_a_rules.FIRST_CALL.id, count=len(short))
        time.sleep(OOM_PAUSE_S * attempt)
        again = run_fresh(subject.backend.spec, subject.device, short)
        fresh.out_of_memory.clear()
        fresh.out_of_memory.update(again.out_of_memory)
        for c in short:
            if c in again.outputs:
                fresh.outputs[c] = again.outputs[c]
                del fresh.case_errors[c]
            else:
                fresh.case_errors[c] = (f"{again.case_errors.get(c) or again.error} (in {attempt + 1} fresh "
                                        "processes, each out of memory or failing)")
    return fresh


def check_first_call(subject: Subject, case: FirstCallCase, memo: dict) -> None:
    """Each threshold dim's first call through each entry point in a fresh process, against later calls."""
    refusals.check_dim_limits(subject.backend, case.entry, case.batch.dim)  # outside its declared limits: not run
    if "fresh" not in memo:
        for c in memo["plan"]:
            reason = missing_reason(subject.backend, c.entry)
            if reason:
                pytest.skip(reason)
        memo["fresh"] = _with_memory(subject, fresh_calls(
            subject.backend.spec, subject.device, _within_limits(subject, memo["plan"]),
            _within_limits(subject, _first_calls_together(subject, memo))))
    fresh = memo["fresh"]
    b = case.batch
    # The same call in this process first: a clean refusal of the input raises here as one (Subject.call), so a
    # first call that raised the same way is refused, not a first call that failed.
    rows, w = _inputs(subject, case)
    warm = call(subject, case.entry, rows, w, b.eps)
    assert_holds(subject, case, ok=fresh.error is None, dim=b.dim,
                 what=f"the first calls could not be made in a fresh process: {fresh.error}")
    assert_holds(subject, case, ok=case not in fresh.case_errors, dim=b.dim,
                 what=f"{case.entry} for dim {b.dim}, {subject.dtype_label} in a fresh process: "
                      f"{fresh.case_errors.get(case)}")
    first, second = ([subject.to_device(t) for t in outs] for outs in fresh.outputs[case])
    where = f"dim {b.dim}, {subject.dtype_label}"
    _assert_same(subject, case, actual=first, expected=second,
                 what=f"the first call for {where} in a fresh process differs from its second call")
    _assert_same(subject, case, actual=first, expected=warm,
                 what=f"the first call for {where} in a fresh process differs from the same call in the "
                      "long-running test process")


# --- NaN and Inf inside checked rows ------------------------------------------------------------------------


# Hit rows whose columns are set at once: a bound on the index tensor that planting the values takes.
_NONFINITE_CHUNK = 1 << 22


def _with_nonfinite(case: NonfiniteCase, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` with ``case.value`` in ``case.count`` distinct columns of each of ``case.rows_hit`` distinct rows (the
    same columns rotated by a drawn shift a row), and the mask of the hit rows; built on x's device in a few tensor
    operations. One randperm and one indexed store a hit row took 26 s for one case drawn on the H200 machine (a
    cold Triton run's last test) and 2.4 s on the CPU for 200,000 hit rows."""
    b = case.batch
    gen = b.generator(salt=NONFINITE_SALT)
    rows = torch.randperm(b.rows, generator=gen)[: case.rows_hit]
    cols = torch.randperm(b.dim, generator=gen)[: case.count]
    shifts = torch.randint(0, b.dim, (rows.numel(),), generator=gen)
    value = {"nan": math.nan, "inf": math.inf, "neg_inf": -math.inf}[case.value]
    dirty = x.clone()
    cols, shifts, rows = cols.to(x.device), shifts.to(x.device), rows.to(x.device)
    step = max(1, _NONFINITE_CHUNK // max(1, cols.numel()))
    for start in range(0, rows.numel(), step):
        where = (cols[None, :] + shifts[start:start + step, None]) % b.dim
        dirty[rows[start:start + step, None], where] = value
    hit = torch.zeros(b.rows, dtype=torch.bool, device=x.device)
    hit[rows] = True
    return dirty, hit


def check_nonfinite_confined(subject: Subject, case: NonfiniteCase, memo: dict) -> None:
    """NaN or Inf in some rows of x: every other row keeps its bits, and every output of the hit rows matches
    the reference's NaN/Inf placement."""
    rows, w = _inputs(subject, case)
    dirty, hit = _with_nonfinite(case, rows[0])
    dirty_rows = [dirty, *rows[1:]]
    clean_out = _call(subject, case, rows, w)
    dirty_out = _call(subject, case, dirty_rows, w)
    _assert_same(subject, case, actual=[o[~hit] for o in dirty_out], expected=[o[~hit] for o in clean_out],
                 what=f"{case.value} in {case.rows_hit} row(s) changed the bits of other rows")
    entry = _entry(case)
    references = entry.reference(subject.backend, dirty_rows, w, case.batch.eps)
    for name, out, ref in zip(entry.outputs, dirty_out, references, strict=True):
        assert_within(subject, case, actual=out[hit], reference=ref.float()[hit], dim=case.batch.dim,
                      what=f"{entry.name} {name}: rows holding {case.value} do not match the reference's NaN/Inf "
                           "placement")


# --- the table, and the tests generated from it -----------------------------------------------------------------


@dataclass(frozen=True)
class EntryCheck:
    """One check of the table: its rule, the case type it takes, the strategy that draws its sweep (None: no
    sweep) and the explicit plans run beside it, as (test name suffix, plan, is the replay run there)."""

    name: str
    rule: str
    case_type: type
    check: Callable[[Subject, Any, dict], None]
    strategy: Callable[..., st.SearchStrategy] | None = None
    plans: tuple[tuple[str, PlanMaker, bool], ...] = ()
    max_examples: int | None = None  # a sample, not a sweep: at most this many drawn examples, whatever --sweep

    @property
    def axis_a(self) -> bool:
        return self.rule.startswith("axis_a.")

    @property
    def per_entry_rule(self) -> bool:
        """Is the check recorded under an entry point's own Axis-A rule where it has one? Axis-A's variants
        are; a first call keeps its own rule for every entry point, so that a kernel wrong only on its first
        call is named for that, whichever entry point it is."""
        return self.axis_a and self.rule != axis_a_rules.FIRST_CALL.id


ENTRY_CHECKS: tuple[EntryCheck, ...] = (
    EntryCheck("batch_size", axis_a_rules.BATCH_SIZE.id, BatchSizeCase, check_batch_size, strategies.batch_size_cases,
               (("_at_thresholds", thresholds.batch_size_plan, False),)),
    EntryCheck("slice_offset", axis_a_rules.SLICE_OFFSET.id, SliceCase, check_slice_offset, strategies.slice_cases,
               (("_at_thresholds", thresholds.slice_plan, False),)),
    EntryCheck("padding", axis_a_rules.PADDING.id, PaddingCase, check_padding, strategies.padding_cases,
               (("_at_thresholds", thresholds.padding_plan, False),)),
    EntryCheck("position", axis_a_rules.POSITION.id, PositionCase, check_position, strategies.position_cases),
    EntryCheck("permutation", axis_a_rules.PERMUTATION.id, PermutationCase, check_permutation,
               strategies.permutation_cases),
    EntryCheck("leading_dims", axis_a_rules.LEADING_DIMS.id, LeadingDimsCase, check_leading_dims,
               strategies.leading_dims_cases, (("_qk_norm", thresholds.qk_leading_dims_plan, False),)),
    EntryCheck("strided_rows", axis_a_rules.STRIDED_ROWS.id, StridedCase, check_strided_rows, strategies.strided_cases,
               (("_qk_norm", thresholds.qk_fused_heads_plan, False), ("_3d_views", thresholds.strided_3d_plan, False))),
    EntryCheck("repeat", axis_a_rules.REPEAT.id, RepeatCase, check_repeat, strategies.repeat_cases),
    EntryCheck("grad_mode", axis_a_rules.GRAD_MODE.id, GradModeCase, check_grad_mode, strategies.grad_mode_cases),
    EntryCheck("execution_mode", axis_a_rules.EXECUTION_MODE.id, ExecutionModeCase, check_execution_mode,
               mode_sample.execution_mode_cases, (("_at_thresholds", mode_sample.execution_mode_plan, False),),
               max_examples=mode_sample.SAMPLE_EXAMPLES),
    EntryCheck("first_call", axis_a_rules.FIRST_CALL.id, FirstCallCase, check_first_call,
               plans=(("", first_call_plan, True),)),
    EntryCheck("nonfinite_confined", semantics.NONFINITE_CONFINED.id, NonfiniteCase, check_nonfinite_confined,
               strategies.nonfinite_cases),
)
for _c in ENTRY_CHECKS:
    contract_rule(_c.rule)  # an unknown id fails at import
AXIS_A_CHECKS: tuple[EntryCheck, ...] = tuple(c for c in ENTRY_CHECKS if c.axis_a)
SEMANTIC_CHECKS: tuple[EntryCheck, ...] = tuple(c for c in ENTRY_CHECKS if not c.axis_a)


@dataclass(frozen=True)
class EntryGroup:
    """The entry points one set of generated tests calls: forward's (``forward`` and ``forward_fp32``, drawn per
    case) or one variant's. ``prefix`` starts its test names; ``budget_share`` divides the element budget (a
    variant's calls hold more tensors and its reference runs beside it)."""

    prefix: str
    entries: Callable[[Any], tuple[str, ...]]
    entry: str = "forward"
    rule: str | None = None
    budget_share: int = 1
    residual: bool = False

    def skip_reason(self, subject: Subject) -> str | None:
        offered = self.entries(subject.backend)
        return None if offered else missing_reason(subject.backend, self.entry)

    def cases(self, strategy: Callable[..., st.SearchStrategy]) -> Callable[[Subject], st.SearchStrategy]:
        def drawn(subject: Subject) -> st.SearchStrategy:
            cases = strategy(dtype=subject.dtype, max_elements=max(1, subject.max_elements // self.budget_share),
                             entries=self.entries(subject.backend) or ("forward",), model_dims=subject.model_dims)
            if self.residual:
                fp32 = subject.backend.fused_add_fp32_residual and subject.dtype != "float32"
                cases = strategies.with_residual_dtypes(cases, (subject.dtype, "float32") if fp32
                                                        else (subject.dtype,))
            return cases

        return drawn


FORWARD_GROUP = EntryGroup("", entry_points)
# The variants whose entry points get the whole check set (suites/test_variants.py), with their tests' prefixes.
VARIANT_GROUPS: tuple[tuple[EntryPoint, str], ...] = ((FUSED_ADD, "fused_add_"), (OFFSET, "offset_"),
                                                      (UNWEIGHTED, "unweighted_"))


def variant_group(entry: EntryPoint, prefix: str) -> EntryGroup:
    """The group of one variant: its own entry point alone, under its own Axis-A rule, with a share of the
    budget."""

    def entries(backend: Any) -> tuple[str, ...]:
        return (entry.name,) if entry.offered_by(backend) else ()

    return EntryGroup(prefix, entries, entry=entry.name, rule=entry.rule, budget_share=VARIANT_BUDGET_SHARE,
                      residual="residual" in entry.rows)


def generate_tests(group: EntryGroup, module: str, checks: Sequence[EntryCheck] = ENTRY_CHECKS
                   ) -> dict[str, Callable[..., None]]:
    """``test_<prefix><check>`` (a sweep) and ``test_<prefix><check><suffix>`` (each explicit plan) for every
    check of the table, as conformance tests of ``module``: assign them into its globals."""
    tests: dict[str, Callable[..., None]] = {}
    for c in checks:
        rule_id = group.rule if c.per_entry_rule and group.rule else c.rule
        if c.strategy is not None:
            name = f"test_{group.prefix}{c.name}"
            tests[name] = conformance(rule_id, c.case_type, group.cases(c.strategy),
                                      skip_reason=group.skip_reason)(_named(_sweep(c.check), name, module, c))
            if c.max_examples is not None:
                cap_examples(tests[name], c.max_examples)
        for suffix, plan, replayed_here in c.plans:
            name = f"test_{group.prefix}{c.name}{suffix}"
            tests[name] = explicit_cases(rule_id, c.case_type, plan, replayed_here=replayed_here,
                                         entries=group.entries, budget_share=group.budget_share,
                                         skip_reason=group.skip_reason)(_named(c.check, name, module, c))
    return tests


def _sweep(check: Callable[[Subject, Any, dict], None]) -> Callable[[Subject, Any], None]:
    def test(subject: Subject, case: Any) -> None:
        check(subject, case, {})

    return test


def _named(fn: Callable, name: str, module: str, c: EntryCheck) -> Callable:
    """A copy of ``fn`` that pytest and reports see as ``module.name``."""

    def test(*args: Any) -> None:
        fn(*args)

    test.__name__ = test.__qualname__ = name
    test.__module__ = module
    test.__doc__ = c.check.__doc__ or f"{contract_rule(c.rule).statement}"
    return test
