"""The parity gate (``--require-parity=A:B``, ``--modes=compile,cudagraph``): the same input bits through both
sides of a pair give the same output bits, under the inputs of every Axis-A variant and every entry point both
sides offer. This is the RL question: is the rollout kernel bitwise equal to the training kernel?
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from ..contract.families import parity
from ..harness import (
    BatchSizeCase,
    LeadingDimsCase,
    PaddingCase,
    SliceCase,
    StridedCase,
    assert_bitwise,
    conformance,
    make_pad,
    strategies,
)

# Entry points compared when both sides offer them: (method, whether it takes the weight).
ENTRY_POINTS = (("forward", True), ("forward_fp32", True))


def _cases(subject):
    budget = {"dtype": subject.dtype, "max_elements": subject.max_elements}
    return st.one_of(strategies.batch_size_cases(**budget), strategies.slice_cases(**budget),
                     strategies.padding_cases(**budget), strategies.strided_cases(**budget),
                     strategies.leading_dims_cases(**budget))


def _inputs(case) -> list[tuple[str, torch.Tensor]]:
    """The batches an Axis-A variant feeds a backend, made on the CPU: each side moves them to its device."""
    b = case.batch
    x = b.x()
    if isinstance(case, BatchSizeCase):
        return [("the whole batch", x), (f"rows [0:{case.length}] alone", x[: case.length].clone())]
    if isinstance(case, SliceCase):
        part = x[case.start: case.start + case.length]
        return [(f"rows [{case.start}:{case.start + case.length}]", part if case.as_view else part.clone())]
    if isinstance(case, PaddingCase):
        gen = b.generator(salt=7)
        before = make_pad(case.content, case.before, b.dim, b.dtype, gen)
        after = make_pad(case.content, case.after, b.dim, b.dtype, gen)
        return [(f"{b.rows} rows padded with {case.content}", torch.cat([before, x, after]))]
    if isinstance(case, StridedCase):
        wide = torch.zeros(b.rows, b.dim + case.extra, dtype=x.dtype)
        wide[:, : b.dim] = x
        return [("rows inside a wider buffer", wide[:, : b.dim]), ("column-major rows", x.t().contiguous().t())]
    if isinstance(case, LeadingDimsCase):
        return [(f"x viewed as {[*case.shape, b.dim]}", x.view(*case.shape, b.dim))]
    return [("the batch", x)]


def _same_layout(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device`` with its strides kept (``.to`` would make a strided view contiguous on a move)."""
    if t.device == device:
        return t
    storage = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=device)
    storage.copy_(t)
    return storage


@conformance(parity.BITWISE.id, (BatchSizeCase, SliceCase, PaddingCase, StridedCase, LeadingDimsCase), _cases)
def test_bitwise_parity(subject, case):
    left, right = subject, subject.other
    b = case.batch
    w = b.w()
    entries = [(m, takes_w) for m, takes_w in ENTRY_POINTS
               if all(callable(getattr(s.backend.impl, m, None)) for s in (left, right))]
    for method, _ in entries:
        for label, x in _inputs(case):
            out_left = left.call(method, _same_layout(x, left.device), w.to(left.device), b.eps)
            out_right = right.call(method, _same_layout(x, right.device), w.to(right.device), b.eps)
            assert_bitwise(subject, case, actual=out_right.detach().cpu(), expected=out_left.detach().cpu(),
                           dim=b.dim, nan_payloads=False, what=f"{right.backend.name} on {right.device} differs from "
                                           f"{left.backend.name} on {left.device} in {method} of {label}")
