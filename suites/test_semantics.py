"""Semantics and edge cases: eps inside the sqrt, plain weight, dtype routing, the shape guard, purity,
empty batches, dim 1, NaN/Inf confinement, and clear errors for bad input.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from ..contract import profile
from ..contract.families import interface, semantics
from ..contract.reference import seed_formula_fp32
from ..harness import (
    ENTRY_POINTS,
    FORWARD_GROUP,
    SEMANTIC_CHECKS,
    AccuracyCase,
    assert_bitwise,
    assert_holds,
    assert_within,
    compare_bitwise,
    conformance,
    exception_text,
    generate_tests,
    reference_fp32,
    strategies,
)

SMALL = 1 << 14  # elements: these checks are about behaviour, not scale


def _budget(subject):
    return {"dtype": subject.dtype, "max_elements": subject.max_elements}


def _small(subject):
    """Accuracy cases within SMALL elements."""
    return strategies.accuracy_cases(dtype=subject.dtype, max_elements=SMALL)


def _small_any(subject):
    """Batches of any value family within SMALL elements."""
    return st.builds(AccuracyCase, strategies.batches(dtype=subject.dtype, max_elements=SMALL))


@conformance(semantics.EPS_INSIDE_SQRT.id, AccuracyCase,
             lambda s: strategies.accuracy_cases(**_budget(s), values="near_eps"))
def test_eps_inside_sqrt(subject, case):
    """Rows whose mean square is comparable to eps: eps outside the sqrt is off by up to sqrt(2)."""
    b = case.batch
    x, w = subject.inputs(b)
    assert_within(subject, case, actual=subject.forward(x, w, b.eps),
                  reference=reference_fp32(x, w, b.eps), dim=b.dim,
                  what=f"rows with mean(x^2) near eps={b.eps:g} are off the reference")


@conformance(semantics.PLAIN_WEIGHT.id, AccuracyCase, lambda s: strategies.accuracy_cases(**_budget(s)))
def test_plain_weight(subject, case):
    """A zero weight zeroes the output; a `1 + weight` kernel returns the normalised rows instead."""
    b = case.batch
    x, w = subject.inputs(b)
    out = subject.forward(x, torch.zeros_like(w), b.eps)
    finite_rows = torch.isfinite(x).all(dim=-1, keepdim=True).expand_as(x)
    nonzero = int(((out != 0) & finite_rows).sum())
    assert_holds(subject, case, ok=nonzero == 0, dim=b.dim,
                 what=f"weight = 0 left {nonzero} of {out.numel()} outputs nonzero")


@conformance(semantics.INDEPENDENT_FORMULA.id, AccuracyCase,
             lambda s: strategies.accuracy_cases(**_budget(s), values="normal"))
def test_independent_formula(subject, case):
    """The seed's own formula in fp32 torch ops, held to the seed bound whatever the profile (its rounding
    differs from the reference's)."""
    b = case.batch
    x, w = subject.inputs(b)
    formula = seed_formula_fp32(x, w, b.eps)
    assert_within(subject, case, actual=subject.forward(x, w, b.eps),
                  reference=formula, bound=profile("seed").output_bound(b.dtype), dim=b.dim,
                  what="the output disagrees with x * rsqrt(mean(x^2) + eps) * w computed directly")


@conformance(semantics.DTYPE_ROUTING.id, AccuracyCase, _small)
def test_dtype_routing(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    x3 = x.view(1, *x.shape)
    out = subject.forward(x3, w, b.eps)
    got = (out.dtype, tuple(out.shape), out.device.type)
    want = (x.dtype, tuple(x3.shape), x.device.type)
    assert_holds(subject, case, ok=got == want, dim=b.dim,
                 what=f"forward returned (dtype, shape, device) {got}, but should be {want}")
    if subject.backend.has_forward_fp32:
        out32 = subject.forward_fp32(x3, w, b.eps)
        assert_holds(subject, case, ok=out32.dtype == torch.float32, dim=b.dim,
                     what=f"forward_fp32 returned {out32.dtype}, but should be torch.float32")


def _raises(subject, fn, expected: type[BaseException] | tuple[type[BaseException], ...]) -> tuple[bool, str]:
    """Does ``fn``, a call with input the contract says the backend must reject, raise ``expected``?"""
    want = _names(expected)
    try:
        with subject.judging_exceptions():
            fn()
    except expected as exc:
        return True, exception_text.message(exc)
    except Exception as exc:
        return False, f"raised {exception_text.described(exc)} (should be {want})"
    return False, f"raised nothing (should be {want})"


def _taken(subject, b):
    """The case's x and weight, after one valid call with them: a kernel that refuses the shape refuses it there
    (read as refused), so the errors a check then asks for are judged only where the kernel takes the shape."""
    x, w = subject.inputs(b)
    subject.forward(x, w, b.eps)
    return x, w


def _names(expected) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(t.__name__ for t in types)


def _shape_text(shape) -> str:
    return ", ".join(str(s) for s in shape)


def _wrong_weights(x):
    """Weights of a wrong shape, each of distinct values, so that reading them reshaped or in part shows."""
    dim = x.shape[-1]

    def ramp(*shape):
        return torch.linspace(0.5, 1.5, math.prod(shape), dtype=torch.float32).reshape(shape).to(x.device, x.dtype)

    return [ramp(dim + 1), ramp(1, dim), ramp(dim, 2)]


def _broadcasts_as_row(weight, x) -> bool:
    """Does ``weight`` broadcast against x exactly as a 1-D weight of x's last dim would ((1, D), (1, 1, D))?"""
    return (weight.dim() <= x.dim() and weight.shape[-1] == x.shape[-1]
            and all(size == 1 for size in weight.shape[:-1]))


@conformance(semantics.SHAPE_GUARD.id, AccuracyCase, _small)
def test_shape_guard(subject, case):
    """The essential guard, by harm: a wrong-shaped weight makes the call raise (any exception), or, where it
    broadcasts as the 1-D weight would, gives the 1-D weight's output; a weight read truncated, reshaped or out of
    bounds into other values or shapes fails. A call that does not raise warns under interface.shape_error."""
    b = case.batch
    x, _ = _taken(subject, b)
    for bad in _wrong_weights(x):
        shown = f"weight of shape {tuple(bad.shape)} with x of shape {tuple(x.shape)}"
        try:
            with subject.judging_exceptions():
                out = subject.forward(x, bad, b.eps)
        except Exception:
            assert_holds(subject, case, ok=True, dim=b.dim, what=f"{shown} raised")
            continue
        if not _broadcasts_as_row(bad, x):
            assert_holds(subject, case, ok=False, dim=b.dim,
                         what=f"{shown} did not raise: returned shape {tuple(out.shape)}, though it does not "
                              "broadcast as a 1-D weight")
            continue
        same_shape = tuple(out.shape) == tuple(x.shape) and out.dtype == x.dtype
        assert_holds(subject, case, ok=same_shape, dim=b.dim,
                     what=f"{shown} returned shape {tuple(out.shape)} and {out.dtype}, not x's")
        if same_shape:
            assert_within(subject, case, actual=out, reference=reference_fp32(x, bad.reshape(-1), b.eps),
                          dim=b.dim, what=f"{shown} gave other values than the 1-D weight it broadcasts as")


@conformance(interface.SHAPE_ERROR.id, AccuracyCase, _small)
def test_shape_error(subject, case):
    """The seed's wording: ValueError naming both shapes (an interface rule: a warning unless strict)."""
    b = case.batch
    x, _ = _taken(subject, b)
    for bad in _wrong_weights(x):
        ok, message = _raises(subject, lambda bad=bad: subject.forward(x, bad, b.eps), ValueError)
        named = _shape_text(x.shape) in message and _shape_text(bad.shape) in message
        assert_holds(subject, case, ok=ok and named, dim=b.dim,
                     what=f"weight of shape {tuple(bad.shape)} with x of shape {tuple(x.shape)}: "
                          + (message if not ok else f"ValueError {message!r} does not name both shapes"))


def _not_an_op(subject):
    return None if getattr(subject.backend.impl, "op", None) is not None else \
        f"{subject.backend.name} is not a torch.library op"


# torch.library.opcheck's checks that need no compilation; its test_aot_dispatch_dynamic compiles each call.
OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor")


@conformance(interface.OPCHECK.id, AccuracyCase,
             lambda s: strategies.accuracy_cases(dtype=s.dtype, max_elements=1 << 10), skip_reason=_not_an_op)
def test_opcheck(subject, case):
    """A torch.library op, as a kernel ships it, passes torch.library.opcheck on the case's inputs."""
    b = case.batch
    x, w = subject.inputs(b)
    impl = subject.backend.impl
    args = (x.requires_grad_(), w.requires_grad_()) + (() if impl.fixed_eps is not None else (b.eps,))
    try:
        torch.library.opcheck(impl.op, args, test_utils=OPCHECK_TESTS)
        ok, what = True, ""
    except Exception as exc:
        # opcheck's advice follows the first sentence
        first = (exception_text.message(exc).strip().splitlines() or [""])[0].split(". ")[0][:300]
        ok, what = False, f"torch.library.opcheck({impl.op}) failed: {type(exc).__name__}: {first}"
    assert_holds(subject, case, ok=ok, dim=b.dim, what=what or "opcheck passed")


@conformance(semantics.PURITY.id, AccuracyCase, lambda s: strategies.accuracy_cases(**_budget(s)))
def test_purity(subject, case):
    """Inputs live inside guard buffers; after the call every byte of both buffers must be unchanged."""
    b = case.batch
    x, w = subject.inputs(b)
    guard = 64
    x_buffer = torch.full((x.numel() + 2 * guard,), 7.0, dtype=x.dtype, device=x.device)
    w_buffer = torch.full((w.numel() + 2 * guard,), 7.0, dtype=w.dtype, device=w.device)
    x_in = x_buffer[guard: guard + x.numel()].view_as(x)
    w_in = w_buffer[guard: guard + w.numel()]
    x_in.copy_(x)
    w_in.copy_(w)
    x_before, w_before = x_buffer.clone(), w_buffer.clone()
    out = subject.forward(x_in, w_in, b.eps)
    assert_bitwise(subject, case, actual=x_buffer, expected=x_before, dim=b.dim,
                   what="x, or memory beside it, changed during the call")
    assert_bitwise(subject, case, actual=w_buffer, expected=w_before, dim=b.dim,
                   what="weight, or memory beside it, changed during the call")
    storage = out.untyped_storage().data_ptr()
    aliased = storage in (x_buffer.untyped_storage().data_ptr(), w_buffer.untyped_storage().data_ptr())
    assert_holds(subject, case, ok=not aliased, dim=b.dim,
                 what="the output shares storage with an input")


@conformance(semantics.EMPTY_BATCH.id, AccuracyCase, _small_any)
def test_empty_batch(subject, case):
    """Zero rows give an empty output. One row of the same dim first: a kernel that refuses the dim refuses it
    there too (read as refused), so only an exception its empty batch alone raises is this rule's breach."""
    b = case.batch
    x, w = subject.inputs(b, rows=1)
    subject.forward(x, w, b.eps)
    for shape in ((0, b.dim), (2, 0, b.dim), (0, 3, b.dim)):
        x = torch.empty(shape, dtype=w.dtype, device=w.device)
        try:
            with subject.judging_exceptions():
                out = subject.forward(x, w, b.eps)
            got = f"dtype {out.dtype}, shape {tuple(out.shape)}"
        except Exception as exc:
            got = f"raised {exception_text.described(exc)}"
        want = f"dtype {x.dtype}, shape {shape}"
        assert_holds(subject, case, ok=got == want, dim=b.dim,
                     what=f"x of shape {shape} gave {got}, but should give {want}")


@conformance(semantics.DIM_ONE.id, AccuracyCase,
             lambda s: st.builds(AccuracyCase, strategies.batches(dtype=s.dtype, dim=1, max_elements=s.max_elements)))
def test_dim_one(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    assert_within(subject, case, actual=subject.forward(x, w, b.eps),
                  reference=reference_fp32(x, w, b.eps), dim=b.dim, what="a last dim of 1 is off the reference")


# NaN/Inf confinement through forward and forward_fp32, from the check set every entry point shares
# (harness/checking/entry_checks.py); the variants' own are in test_variants.py.
globals().update(generate_tests(FORWARD_GROUP, __name__, SEMANTIC_CHECKS))


@conformance(interface.INPUT_ERRORS.id, AccuracyCase, _small)
def test_input_errors(subject, case):
    b = case.batch
    x, w = _taken(subject, b)
    other_device = "cpu" if x.device.type != "cpu" else "meta"
    calls = [
        ("x of dtype int32", TypeError, ("int32",),
         lambda: subject.forward(x.to(torch.int32), w, b.eps)),
        ("x of dtype float64", TypeError, ("float64",),
         lambda: subject.forward(x.double(), w.double(), b.eps)),
        (f"weight on {other_device} with x on {x.device}", ValueError, (other_device, x.device.type),
         lambda: subject.forward(x, w.to(other_device), b.eps)),
    ]
    # Every weight dtype the backend does not declare with x's dtype is a pair it must refuse.
    declared = subject.backend.weight_dtypes(x.dtype)
    for other_dtype in (d for d in (torch.float32, torch.bfloat16, torch.float16) if d not in declared):
        calls.append((f"weight of dtype {other_dtype} with x of {x.dtype} (a pair it does not declare)", TypeError,
                      (str(other_dtype).removeprefix("torch."), str(x.dtype).removeprefix("torch.")),
                      lambda other_dtype=other_dtype: subject.forward(x, w.to(other_dtype), b.eps)))
    for bad_eps in (-1e-6, 0.0, math.nan, math.inf):
        calls.append((f"eps={bad_eps!r}", ValueError, ("eps",),
                      lambda bad_eps=bad_eps: subject.forward(x, w, bad_eps)))
    # Not a number at all: Python's convention is TypeError; the seed said ValueError. Either is accepted.
    for bad_eps in ("1e-6", None):
        calls.append((f"eps={bad_eps!r}", (TypeError, ValueError), ("eps",),
                      lambda bad_eps=bad_eps: subject.forward(x, w, bad_eps)))
    for label, expected, names, call in calls:
        ok, message = _raises(subject, call, expected)
        named = all(n in message for n in names)
        assert_holds(subject, case, ok=ok and named, dim=b.dim,
                     what=f"{label}: " + (message if not ok else
                                          f"{_names(expected)} {message!r} does not name {', '.join(names)}"))


RING = 4  # output buffers a backend may cycle through that test_isolation still finds reused


@conformance((semantics.GLOBAL_STATE.id, semantics.FRESH_OUTPUT.id), AccuracyCase, _small)
def test_isolation(subject, case):
    """Every call of every test is watched for these two rules; this test makes the calls that show them most
    plainly, through every entry point the backend offers: a batch, then ``RING`` more of the same shape and one of
    another, then every output of the first compared with a copy taken when it was returned, and each call's effect
    on torch's global state. (Every other call is held to its last call's outputs alone: an output buffer kept per
    shape and reused by the next call shows there, but a ring of two (double buffering, as a CUDA-graph or
    inference engine keeps them) reuses a buffer only every other call, and passed.)"""
    b = case.batch
    for entry in ENTRY_POINTS.values():
        if not entry.offered_by(subject.backend):
            continue
        rows, w = entry.inputs(b, subject.device)
        first = subject.call(entry.name, *entry.args(rows, w, b.eps))
        first = tuple(first) if isinstance(first, tuple | list) else (first,)
        kept = [t.detach().clone() for t in first]
        # More batches of the same shape (a buffer kept per shape, or a ring of up to RING of them, is reused by
        # one of them), then one of another shape.
        for salt, rows in enumerate([b.rows] * RING + [b.rows + 1], start=13):
            other, _ = entry.inputs(b, subject.device, rows=rows, salt=salt)
            subject.call(entry.name, *entry.args(other, w, b.eps))
        for name, t, copy in zip(entry.outputs, first, kept, strict=True):
            assert_holds(subject, case, ok=compare_bitwise(t.detach(), copy).equal, rule=semantics.FRESH_OUTPUT.id,
                         dim=b.dim, what=f"{entry.name} {name} of the first call changed when a second batch went "
                                         "through the backend")
    changes = getattr(subject.backend, "import_changes", [])
    assert_holds(subject, case, ok=not changes, rule=semantics.GLOBAL_STATE.id, dim=b.dim,
                 what=f"importing {subject.backend.name} changed torch's global state (put back since): "
                      f"{'; '.join(changes)}" if changes else "torch's global state is watched around every call")
