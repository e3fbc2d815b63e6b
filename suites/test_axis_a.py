"""Axis-A: a row's output bits must not depend on what else is in the batch, in every dtype.

Each test is one variant of CONTRACT.md's Axis-A table; Hypothesis draws the configuration.
"""

from __future__ import annotations

import torch

from rmsnorm_conformance.harness import strategies
from rmsnorm_conformance.harness.cases import (
    BatchSizeCase,
    LeadingDimsCase,
    PaddingCase,
    PermutationCase,
    PositionCase,
    RepeatCase,
    SliceCase,
    StridedCase,
    make_pad,
)
from rmsnorm_conformance.harness.checks import assert_bitwise, conformance

REPEATS = 4  # reduction orders that vary per call agree on a single row about half the time


def _budget(subject):
    return {"dtype": subject.dtype, "max_elements": subject.max_elements}


@conformance("axis_a.batch_size", BatchSizeCase, lambda s: strategies.batch_size_cases(**_budget(s)))
def test_batch_size(subject, case):
    x, w = subject.inputs(case.batch)
    eps = case.batch.eps
    full = subject.forward(x, w, eps)
    alone = subject.forward(x[: case.length].clone(), w, eps)
    assert_bitwise(subject, case, actual=alone, expected=full[: case.length],
                   what=f"rows [0:{case.length}] alone differ from the same rows in a batch of "
                        f"{case.batch.rows}", dim=case.batch.dim)


@conformance("axis_a.slice_offset", SliceCase, lambda s: strategies.slice_cases(**_budget(s)))
def test_slice_offset(subject, case):
    x, w = subject.inputs(case.batch)
    eps = case.batch.eps
    full = subject.forward(x, w, eps)
    part = x[case.start: case.start + case.length]
    out = subject.forward(part if case.as_view else part.clone(), w, eps)
    kind = "view" if case.as_view else "copy"
    assert_bitwise(subject, case, actual=out,
                   expected=full[case.start: case.start + case.length],
                   what=f"rows [{case.start}:{case.start + case.length}] as a {kind} differ from the same "
                        f"rows of the whole batch", dim=case.batch.dim)


@conformance("axis_a.padding", PaddingCase, lambda s: strategies.padding_cases(**_budget(s)))
def test_padding(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    gen = b.generator(salt=7)
    before = make_pad(case.content, case.before, b.dim, b.dtype, gen)
    after = make_pad(case.content, case.after, b.dim, b.dtype, gen)
    padded = torch.cat([subject.to_device(before), x, subject.to_device(after)])
    alone = subject.forward(x, w, b.eps)
    out = subject.forward(padded, w, b.eps)[case.before: case.before + b.rows]
    assert_bitwise(subject, case, actual=out, expected=alone,
                   what=f"{b.rows} real rows between {case.before} and {case.after} pad rows of "
                        f"{case.content} differ from the real rows alone", dim=b.dim)


@conformance("axis_a.position", PositionCase, lambda s: strategies.position_cases(**_budget(s)))
def test_position(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    row, others = x[:1], x[1:]

    def placed(index):
        return torch.cat([others[:index], row, others[index:]])

    first = subject.forward(placed(case.first), w, b.eps)[case.first]
    second = subject.forward(placed(case.second), w, b.eps)[case.second]
    assert_bitwise(subject, case, actual=second, expected=first,
                   what=f"one row at index {case.second} differs from the same row at index {case.first} "
                        f"of a batch of {b.rows}", dim=b.dim)


@conformance("axis_a.permutation", PermutationCase, lambda s: strategies.permutation_cases(**_budget(s)))
def test_permutation(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    perm = torch.randperm(b.rows, generator=torch.Generator().manual_seed(case.perm_seed))
    perm = subject.to_device(perm)
    out = subject.forward(x[perm], w, b.eps)
    expected = subject.forward(x, w, b.eps)[perm]
    assert_bitwise(subject, case, actual=out, expected=expected,
                   what=f"permuting {b.rows} rows changed output bits", dim=b.dim)


@conformance("axis_a.leading_dims", LeadingDimsCase, lambda s: strategies.leading_dims_cases(**_budget(s)))
def test_leading_dims(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    flat = subject.forward(x, w, b.eps)
    shaped = subject.forward(x.view(*case.shape, b.dim), w, b.eps)
    assert_bitwise(subject, case, actual=shaped.reshape(-1, b.dim), expected=flat,
                   what=f"x viewed as {[*case.shape, b.dim]} differs from the flat [{b.rows}, {b.dim}]",
                   dim=b.dim)


def _strided_view(case, x):
    """x laid out as the case says; same values, other strides."""
    rows, dim = x.shape
    if case.layout == "row_stride":
        buffer = torch.zeros(rows, dim + case.extra, dtype=x.dtype, device=x.device)
        buffer[:, :dim] = x
        return buffer[:, :dim]
    if case.layout == "column_major":
        return x.t().contiguous().t()
    if case.layout == "fused_heads":
        # q of a fused projection: [T, (H + extra) * dim] sliced to [T, H * dim], viewed as [T, H, dim].
        tokens = rows // case.heads
        width = (case.heads + case.extra) * dim
        buffer = torch.zeros(tokens, width, dtype=x.dtype, device=x.device)
        buffer[:, : case.heads * dim] = x[: tokens * case.heads].reshape(tokens, case.heads * dim)
        return buffer[:, : case.heads * dim].view(tokens, case.heads, dim)
    raise ValueError(f"unknown layout {case.layout!r}")


@conformance("axis_a.strided_rows", StridedCase, lambda s: strategies.strided_cases(**_budget(s)))
def test_strided_rows(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    view = _strided_view(case, x)
    contiguous = view.contiguous()
    out = subject.forward(view, w, b.eps)
    expected = subject.forward(contiguous, w, b.eps)
    assert_bitwise(subject, case, actual=out, expected=expected,
                   what=f"{case.layout} layout with strides {tuple(view.stride())} differs from a "
                        f"contiguous copy", dim=b.dim)


@conformance("axis_a.repeat", RepeatCase, lambda s: strategies.repeat_cases(**_budget(s)))
def test_repeat(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    first = subject.forward(x, w, b.eps)
    other = subject.to_device(b.x(rows=max(1, b.rows // 2) + 1, salt=3))
    # Several repeats, with a different call before each: state left behind by one call must not leak into
    # the next, and a nondeterministic kernel that agrees half the time is still caught.
    for attempt in range(1, REPEATS + 1):
        subject.forward(other, w, b.eps)
        again = subject.forward(x, w, b.eps)
        assert_bitwise(subject, case, actual=again, expected=first,
                       what=f"repeat {attempt} of the same call gave different bits", dim=b.dim)
