"""The variants engines ship (fused residual add, weight offset ``1 + weight``, no weight), held to every Axis-A
variant and NaN/Inf confinement of ``forward`` (the same check set, harness/checking/entry_checks.py) and to
their own rules; the fp32-weight rule of mixed precision; and the rounding class each backend's bits follow,
for the report.

A backend that does not offer a variant is skipped for it, with that reason. Each Axis-A check transforms a
fused add's residual exactly as it transforms x (the same rows sliced, padded, placed, viewed or strided).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import strategies as st

from ..contract import FUSED_ADD_INPUTS, ROUNDING_CLASSES
from ..contract.families import interface, variants
from ..contract.reference import (
    offset_scale,
    oracle_fp64,
    reference_offset,
    reference_unweighted,
    rounding_class_outputs,
)
from ..harness import (
    FUSED_ADD,
    OFFSET,
    ROUNDED_ENTRY_POINTS,
    UNWEIGHTED,
    VARIANT_BUDGET_SHARE,
    VARIANT_GROUPS,
    AccuracyCase,
    Batch,
    EntryPoint,
    assert_bitwise,
    assert_holds,
    assert_within,
    conformance,
    generate_tests,
    missing_reason,
    reference_fp32,
    rounding,
    run_check,
    same_layout_copy,
    strategies,
    variant_group,
)

GUARD = 64  # elements of guard buffer on each side of an input, for purity


ENTRY_POINTS = (FUSED_ADD, OFFSET, UNWEIGHTED)


def _not_offered(entry: EntryPoint) -> Callable:
    def reason(subject) -> str | None:
        return missing_reason(subject.backend, entry.name)

    return reason


def _residual_dtypes(subject) -> tuple[str, ...]:
    fp32 = subject.backend.fused_add_fp32_residual and subject.dtype != "float32"
    return (subject.dtype, "float32") if fp32 else (subject.dtype,)


def _budget(subject) -> int:
    return max(1, subject.max_elements // VARIANT_BUDGET_SHARE)


def _inputs(subject, entry: EntryPoint, b: Batch):
    """The row tensors a call takes (x, and a fused add's residual) and the weight in the batch's layout, on the
    subject's device."""
    return entry.inputs(b, subject.device)


# --- Axis-A and NaN/Inf confinement, for each variant: the check set forward's tests come from -------------------

for _entry, _prefix in VARIANT_GROUPS:
    globals().update(generate_tests(variant_group(_entry, _prefix), __name__))


# --- each variant's own rules ------------------------------------------------------------------------------


def _accuracy(entry: EntryPoint, **pinned) -> Callable:
    """Accuracy cases within the variants' budget share, the weight in any layout, and a fused add's residual in
    x's dtype or, where the backend takes it, fp32."""

    def cases(subject) -> st.SearchStrategy:
        drawn = strategies.accuracy_cases(dtype=subject.dtype, max_elements=_budget(subject), any_weight_layout=True,
                                          **pinned)
        return strategies.with_residual_dtypes(drawn, _residual_dtypes(subject)) if "residual" in entry.rows else drawn

    return cases


def _strict_oracle(subject, x, scale, eps):
    """The fp64 oracle of (x / rms) * scale, with the case's eps, for ULP bounds; None outside the strict
    profile."""
    if subject.profile.name != "strict":
        return None
    ones = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
    return oracle_fp64(x.float(), ones, eps) * scale.double()


def _assert_routed(subject, case, y, x, what: str) -> None:
    """y in x's dtype and shape: a bound check alone would let an fp32 y through."""
    got, want = (y.dtype, tuple(y.shape)), (x.dtype, tuple(x.shape))
    assert_holds(subject, case, ok=got == want, dim=case.batch.dim,
                 what=f"{what} returned (dtype, shape) {got}, but should be {want}")


def _same_tensor(a, b: torch.Tensor) -> bool:
    """Is ``a`` the tensor ``b`` (or a view of exactly its elements)?"""
    return (isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
            and a.storage_offset() == b.storage_offset() and a.shape == b.shape and a.stride() == b.stride())


@conformance(variants.FUSED_ADD_RESIDUAL.id, AccuracyCase, _accuracy(FUSED_ADD), skip_reason=_not_offered(FUSED_ADD))
def test_fused_add_residual(subject, case):
    b = case.batch
    (x, r), w = _inputs(subject, FUSED_ADD, b)
    _, residual_out = subject.call("fused_add", x, r, w, b.eps)
    where = " (written into residual)" if subject.backend.fused_add_in_place else ""
    assert_bitwise(subject, case, actual=residual_out, expected=(x.float() + r.float()).to(r.dtype), dim=b.dim,
                   what=f"fused_add residual_out{where} is not x + residual rounded once to {b.residual_dtype}")
    if subject.backend.fused_add_in_place:
        # What an in-place fused add returns: nothing, or the very tensors it wrote, (x, residual).
        x_io, r_io = same_layout_copy(x), same_layout_copy(r)
        with subject.isolated("fused_add"):
            out = subject.backend.impl.fused_add(x_io, r_io, w, b.eps)
        ok = out is None or (isinstance(out, tuple | list) and len(out) == 2
                             and _same_tensor(out[0], x_io) and _same_tensor(out[1], r_io))
        got = "None" if out is None else f"{type(out).__name__} of {len(out) if isinstance(out, tuple | list) else 1}"
        assert_holds(subject, case, ok=ok, dim=b.dim,
                     what=f"the in-place fused_add returned {got} that is not (x, residual), the tensors it wrote")


@conformance(variants.FUSED_ADD_OUTPUT.id, AccuracyCase, _accuracy(FUSED_ADD), skip_reason=_not_offered(FUSED_ADD))
def test_fused_add_output(subject, case):
    b = case.batch
    (x, r), w = _inputs(subject, FUSED_ADD, b)
    y, residual_out = subject.call("fused_add", x, r, w, b.eps)
    _assert_routed(subject, case, y, x, "fused_add's y")
    stored = residual_out.detach()
    assert_within(subject, case, actual=y, reference=reference_fp32(stored, w, b.eps), dim=b.dim,
                  correctly_rounded=_strict_oracle(subject, stored, w.float(), b.eps),
                  what=f"fused_add y of {b.rows}x{b.dim} '{b.values}' rows ({b.weight_layout} weight) is off the fp32 "
                       "reference of residual_out as stored")


@conformance(variants.FUSED_ADD_STORED_RESIDUAL.id, AccuracyCase, _accuracy(FUSED_ADD, values="normal"),
             skip_reason=_not_offered(FUSED_ADD))
def test_fused_add_stored_residual(subject, case):
    """The rms and the normalized row both come from residual_out as stored: y is held against each other
    choice of the two in turn, so a kernel that mixes them cannot win a count taken over all of them at once."""
    b = case.batch
    (x, r), w = _inputs(subject, FUSED_ADD, b)
    y, residual_out = subject.call("fused_add", x, r, w, b.eps)
    alternatives = rounding.fused_add_alternatives(x, r, residual_out.detach(), w, b.eps)
    stored = alternatives.pop("stored_residual")
    # Within the backend's rounding class (declared, else the one its bits follow): two choices a class apart
    # would differ on more elements than the choices themselves make differ.
    cls = subject.backend.rounding_classes.get("fused_add") or rounding.closest_class(y, stored)
    for name, other in alternatives.items():
        result = rounding.vote(y, [stored[cls]], [other[cls]])
        assert_holds(subject, case, ok=not result.breached, dim=b.dim,
                     what=f"fused_add y takes {FUSED_ADD_INPUTS[name]}, not both the rms and the row from "
                          f"residual_out as stored ({cls} class): "
                          + result.describe("the stored residual", name))


def _residual_in_x_dtype(subject) -> st.SearchStrategy:
    """Accuracy cases as the fused add's own rules draw them, the residual in x's dtype only: an fp32 residual's
    residual_out (fused_add_fp32_residual) is normalized as stored, in fp32, which forward in x's dtype does not
    take, and rounding it to x's dtype first would hold y to a row it is not normalized from."""
    return strategies.accuracy_cases(dtype=subject.dtype, max_elements=_budget(subject), any_weight_layout=True)


@conformance(variants.FUSED_ADD_AS_FORWARD.id, AccuracyCase, _residual_in_x_dtype, skip_reason=_not_offered(FUSED_ADD))
def test_fused_add_as_forward(subject, case):
    """The fused and the unfused path of one backend agree: y is bitwise the backend's own forward of residual_out
    as stored, with the same weight and eps, as an RL sampler's fused add+norm and a trainer's add then norm
    must. Both calls go through the subject (an in-place fused add writes into copies of x and residual)."""
    b = case.batch
    if b.residual_dtype != b.dtype:  # only a case replayed from another rule's failure carries one
        pytest.skip(f"a {b.residual_dtype} residual is normalized as stored, in {b.residual_dtype}: forward takes "
                    f"{b.dtype} rows, so there is no unfused path of the same row to compare with")
    (x, r), w = _inputs(subject, FUSED_ADD, b)
    y, residual_out = subject.call("fused_add", x, r, w, b.eps)
    stored = residual_out.detach()
    unfused = subject.forward(stored, w, b.eps)
    fused_class, forward_class = (subject.backend.rounding_classes.get(e) for e in ("fused_add", "forward"))
    declared = (f" (it declares rounding class {fused_class!r} for fused_add, {forward_class!r} for forward)"
                if fused_class and forward_class and fused_class != forward_class else "")
    assert_bitwise(subject, case, actual=y, expected=unfused, dim=b.dim, nan_payloads=False,
                   what=f"fused_add y of {b.rows}x{b.dim} '{b.values}' rows ({b.weight_layout} weight) is not the "
                        f"backend's own forward of residual_out as stored: the fused add and an add then forward "
                        f"give the same row other bits{declared}")


@conformance(variants.OFFSET_OUTPUT.id, AccuracyCase, _accuracy(OFFSET), skip_reason=_not_offered(OFFSET))
def test_offset_output(subject, case):
    b = case.batch
    (x,), w = _inputs(subject, OFFSET, b)
    y = subject.call("forward_offset", x, w, b.eps)
    _assert_routed(subject, case, y, x, "forward_offset")
    offset_dtype = subject.backend.offset_dtype
    assert_within(subject, case, actual=y, reference=reference_offset(x, w, b.eps, offset_dtype), dim=b.dim,
                  correctly_rounded=_strict_oracle(subject, x, offset_scale(w, offset_dtype), b.eps),
                  what=f"forward_offset (x / rms) * (1 + weight) of {b.rows}x{b.dim} '{b.values}' rows "
                       f"({b.weight_layout} weight), 1 + weight formed as offset_dtype={offset_dtype!r}, is off the "
                       "fp32 reference")


def _offset_discriminates(subject) -> str | None:
    reason = _not_offered(OFFSET)(subject)
    if reason is None and subject.weight_dtype == "float32":
        return "with an fp32 weight, 1 + weight is the same formed in fp32 or in the weight's dtype"
    return reason


@conformance(variants.OFFSET_DTYPE.id, AccuracyCase, _accuracy(OFFSET, values="normal"),
             skip_reason=_offset_discriminates)
def test_offset_dtype(subject, case):
    b = case.batch
    (x,), w = _inputs(subject, OFFSET, b)
    y = subject.call("forward_offset", x, w, b.eps)
    declared = subject.backend.offset_dtype
    other = "weight" if declared == "float32" else "float32"
    result = rounding.vote(y, list(rounding.offset_classes(x, w, b.eps, declared).values()),
                           list(rounding.offset_classes(x, w, b.eps, other).values()))
    names = {"float32": "1 + weight in fp32", "weight": f"1 + weight in {b.weight_dtype}"}
    assert_holds(subject, case, ok=not result.breached, dim=b.dim,
                 what=f"forward_offset declares offset_dtype={declared!r} but forms 1 + weight as {other!r}: "
                      + result.describe(names[declared], names[other]))


@conformance(variants.UNWEIGHTED_OUTPUT.id, AccuracyCase, _accuracy(UNWEIGHTED), skip_reason=_not_offered(UNWEIGHTED))
def test_unweighted_output(subject, case):
    b = case.batch
    (x,), _ = _inputs(subject, UNWEIGHTED, b)
    y = subject.call("forward_unweighted", x, b.eps)
    _assert_routed(subject, case, y, x, "forward_unweighted")
    ones = torch.ones(b.dim, dtype=torch.float32, device=x.device)
    assert_within(subject, case, actual=y, reference=reference_unweighted(x, b.eps), dim=b.dim,
                  correctly_rounded=_strict_oracle(subject, x, ones, b.eps),
                  what=f"forward_unweighted x / rms of {b.rows}x{b.dim} '{b.values}' rows is off the fp32 reference")


def _guarded(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy of ``t`` inside a buffer of GUARD elements each side: (the copy, the whole buffer)."""
    buffer = torch.full((t.numel() + 2 * GUARD,), 7.0, dtype=t.dtype, device=t.device)
    inner = buffer[GUARD: GUARD + t.numel()].view_as(t)
    inner.copy_(t)
    return inner, buffer


def _offers_any(subject) -> str | None:
    offered = [e for e in ENTRY_POINTS if _not_offered(e)(subject) is None]
    return None if offered else f"{subject.backend.name} offers none of " + ", ".join(e.name for e in ENTRY_POINTS)


@conformance(variants.PURITY.id, AccuracyCase, lambda s: strategies.accuracy_cases(dtype=s.dtype, max_elements=1 << 14),
             skip_reason=_offers_any)
def test_variant_purity(subject, case):
    """Inputs in guard buffers: only what a variant declares it writes may change; outputs alias no input.
    Calls go to the backend's own method, so an in-place fused add writes into the guarded x and residual."""
    b = case.batch
    impl = subject.backend.impl
    for entry in (e for e in ENTRY_POINTS if _not_offered(e)(subject) is None):
        rows_in, w = _inputs(subject, entry, b)
        guarded = dict(zip(entry.rows, (_guarded(t) for t in rows_in), strict=True))
        if entry.weighted:
            guarded["weight"] = _guarded(w)
        bufs = {name: buf for name, (_, buf) in guarded.items()}
        expected = {name: buf.clone() for name, buf in bufs.items()}
        in_place = entry.writes_in_place(subject.backend)
        if in_place:
            # What it declares it writes: each output into the row input it replaces, in that input's dtype.
            written = subject.call(entry.name, *entry.args(rows_in, w, b.eps))
            for name, out in zip(entry.rows, written, strict=True):
                expected[name][GUARD: GUARD + out.numel()] = out.detach().reshape(-1)
        args = entry.args([guarded[name][0] for name in entry.rows], guarded["weight"][0] if entry.weighted else None,
                          b.eps)
        try:
            with subject.isolated(entry.name):
                out = getattr(impl, entry.name)(*args)
        except Exception:
            # The same call on plain tensors, through subject.call: a clean refusal of the input (quack's odd dims)
            # raises there too and reads as refused, not as impure; one that raises on the guarded copies alone
            # stays this rule's failure.
            subject.call(entry.name, *entry.args(rows_in, w, b.eps))
            raise
        for name, buf in bufs.items():
            assert_bitwise(subject, case, actual=buf, expected=expected[name], dim=b.dim,
                           what=f"{entry.name}: {name}, or memory beside it, "
                                + ("is not what it declares it writes" if in_place and name != "weight"
                                   else "changed during the call"))
        outs = out if isinstance(out, tuple | list) else () if out is None else (out,)
        storages = {b_.untyped_storage().data_ptr() for b_ in bufs.values()}
        aliased = [o for o in outs if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in storages]
        assert_holds(subject, case, ok=in_place or not aliased, dim=b.dim,
                     what=f"{entry.name} returned an output that shares storage with an input, without declaring "
                          "fused_add_in_place")


def _declares_in_place(subject) -> str | None:
    missing = _not_offered(FUSED_ADD)(subject)
    if missing is not None:
        return missing
    return None if FUSED_ADD.writes_in_place(subject.backend) else \
        f"{subject.backend.name} does not declare fused_add_in_place"


@conformance(interface.IN_PLACE_VERSION.id, AccuracyCase,
             lambda s: strategies.accuracy_cases(dtype=s.dtype, max_elements=1 << 12), skip_reason=_declares_in_place)
def test_in_place_version(subject, case):
    """An in-place fused add moves x's and residual's version counters: autograd then refuses a graph that saved
    either before the write. A C++ operator registered without an ADInplaceOrView kernel, or a kernel that writes
    through data pointers, leaves them where they were (this project's CUDA backend did, on an H200)."""
    b = case.batch
    rows_in, w = _inputs(subject, FUSED_ADD, b)
    before = [t._version for t in rows_in]
    try:  # the backend's own method, on the caller's tensors (subject.call hands an in-place backend copies)
        with subject.isolated(FUSED_ADD.name):
            subject.backend.impl.fused_add(*FUSED_ADD.args(rows_in, w, b.eps))
    except Exception:
        # The same call through subject.call: a clean refusal of the input raises there too and reads as refused.
        subject.call(FUSED_ADD.name, *FUSED_ADD.args(*_inputs(subject, FUSED_ADD, b), b.eps))
        raise
    unmoved = [f"{name} (version {v})" for name, t, v in zip(FUSED_ADD.rows, rows_in, before, strict=True)
               if t._version == v]
    assert_holds(subject, case, ok=not unmoved, dim=b.dim,
                 what=f"fused_add wrote into {' and '.join(unmoved)} without moving a version counter, so autograd "
                      "cannot see the write: a graph that saved either before it would run its backward on the "
                      "overwritten values")


# --- mixed precision ---------------------------------------------------------------------------------------


def _mixed_only(subject) -> str | None:
    if subject.dtype == "float32":
        return "with float32 x an fp32 weight is in x's dtype: there is no rounding of it to ask about"
    if subject.weight_dtype != "float32":
        return f"{subject.backend.name} declares no fp32 weight with {subject.dtype} x"
    return None


@conformance(variants.MIXED_PRECISION_FP32_WEIGHT.id, AccuracyCase,
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
    """The claimed class's output, and each other class's; a fused add's with the stored residual (its rule)."""
    prefix = "stored_residual, " if entry == "fused_add" else ""
    return classes[prefix + claimed], {name: classes[prefix + name] for name in ROUNDING_CLASSES if name != claimed}


@pytest.mark.conformance(rules=(variants.ROUNDING_CLASS.id,), case_types=("AccuracyCase",))
def test_rounding_class(subject):
    """Informational: for each entry point, the rows whose bits match each rounding class go to the report.
    A backend that declares its class is held to it (variants.rounding_class); one that declares none is
    skipped after its shares are recorded."""
    subject.rules = (variants.ROUNDING_CLASS.id,)
    replayed = subject.replay_case
    batches = [replayed.batch] if isinstance(replayed, AccuracyCase) else [
        Batch(dim=dim, rows=rows, dtype=subject.dtype, weight="around_one", seed=seed,
              weight_dtype=subject.weight_dtype) for seed, (rows, dim) in enumerate(ROUNDING_SHAPES)]
    claims = subject.backend.rounding_classes
    ran: list[Batch] = []

    def check(batch: Batch) -> None:
        found = _rounding_outputs(subject, batch)
        ran.append(batch)
        for entry, (out, classes) in found.items():
            subject.collector.rounding.append({
                "backend": subject.backend.name, "device": str(subject.device), "dtype": subject.dtype_label,
                "variant": entry, "rows": out.numel() // max(batch.dim, 1), "declared": claims.get(entry, ""),
                "matches": rounding.row_matches(out, classes), "distinguishable": rounding.distinguishable(classes)})
            if entry in claims:
                # Against each other class in turn: classes that coincide somewhere cannot outvote each other.
                mine, others = _claim_sides(entry, claims[entry], classes)
                for other, theirs in others.items():
                    result = rounding.vote(out, [mine], [theirs])
                    assert_holds(subject, AccuracyCase(batch), ok=not result.breached, dim=batch.dim,
                                 what=f"{entry} declares rounding class {claims[entry]!r} but follows {other}: "
                                      + result.describe(claims[entry], other))

    # Each shape as every check runs a case: outside the declared limits not run, a clear refusal recorded as one.
    for batch in batches:
        run_check(subject, (variants.ROUNDING_CLASS.id,), AccuracyCase(batch), lambda batch=batch: check(batch))
    if not ran:
        pytest.skip(f"no shape of the rounding-class test ran for {subject.backend.name}: each was outside its "
                    "declared limits or refused")
    if not any(e in claims for e in ROUNDED_ENTRY_POINTS):
        pytest.skip(f"{subject.backend.name} declares no rounding_class: the classes its bits match are in the "
                    "report, no claim was checked")
