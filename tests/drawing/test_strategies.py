"""The strategies: cases are valid and inside their budgets, reprs replay, tensors are reproducible."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rmsnorm_conformance.harness.drawing import strategies
from rmsnorm_conformance.harness.drawing.cases import (
    PAD_CONTENTS,
    VALUE_FAMILIES,
    WEIGHT_FAMILIES,
    WEIGHT_LAYOUTS,
    Batch,
    BatchSizeCase,
    SliceCase,
    make_pad,
    make_values,
    pad_rows,
)
from rmsnorm_conformance.harness.drawing.replay import parse_case

ALL = [strategies.batch_size_cases, strategies.slice_cases, strategies.padding_cases,
       strategies.position_cases, strategies.permutation_cases, strategies.leading_dims_cases,
       strategies.strided_cases, strategies.repeat_cases, strategies.grad_mode_cases, strategies.accuracy_cases,
       strategies.nonfinite_cases, strategies.gradient_cases]
# Axis-A strategies draw the entry point and the weight layout too.
AXIS_A = [strategies.batch_size_cases, strategies.slice_cases, strategies.padding_cases, strategies.position_cases,
          strategies.permutation_cases, strategies.leading_dims_cases, strategies.strided_cases,
          strategies.repeat_cases, strategies.grad_mode_cases]


@pytest.mark.parametrize("factory", ALL, ids=lambda f: f.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_cases_are_valid_and_replayable(factory, data):
    case = data.draw(factory(dtype="bfloat16", max_elements=1 << 16))
    b = case.batch
    assert 1 <= b.dim <= strategies.MAX_DIM
    assert b.rows >= 1 and b.eps > 0
    assert parse_case(repr(case)) == case
    if isinstance(case, BatchSizeCase):
        assert case.start == 0 and 1 <= case.length < b.rows
    if isinstance(case, SliceCase):
        assert case.start >= 1 and case.length >= 1 and case.start + case.length <= b.rows
    if hasattr(case, "shape"):
        assert int(torch.tensor(case.shape).prod()) == b.rows
    if hasattr(case, "first"):
        assert case.first != case.second and max(case.first, case.second) < b.rows


@settings(max_examples=200, deadline=None)
@given(strategies.batches(dtype="float16", max_elements=1 << 12))
def test_batches_respect_the_element_budget(batch):
    assert batch.rows * batch.dim <= max(1 << 12, batch.dim)


def test_batches_favour_target_dims_small_and_edge_row_counts():
    dims: list[int] = []
    rows: list[int] = []

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(strategies.batches(dtype="bfloat16"))
    def collect(b):
        dims.append(b.dim)
        rows.append(b.rows)

    collect()
    assert dims.count(4096) > 30 and dims.count(128) > 30
    assert any(d % 64 for d in dims), "no dim that is not a multiple of 64 was drawn"
    assert sum(n < 16 for n in rows) > 50
    assert sum(n in strategies.EDGE_ROWS and n >= 16 for n in rows) > 10
    assert max(rows) > 1000


@pytest.mark.parametrize("factory", AXIS_A, ids=lambda f: f.__name__)
def test_axis_a_cases_draw_every_entry_point_and_weight_layout(factory):
    entries = ("forward", "forward_fp32")
    seen: list = []

    @settings(max_examples=80, deadline=None, derandomize=True)
    @given(factory(dtype="float32", max_elements=1 << 14, entries=entries))
    def collect(case):
        seen.append((case.entry, case.batch.weight_layout))

    collect()
    assert {e for e, _ in seen} == set(entries)
    assert {w for _, w in seen} == set(WEIGHT_LAYOUTS)
    assert sum(w == "contiguous" for _, w in seen) > len(seen) // 4, "contiguous weights must stay common"


def test_weights_stay_contiguous_where_a_check_does_not_lay_them_out():
    @settings(max_examples=60, deadline=None)
    @given(strategies.accuracy_cases(dtype="float32", max_elements=1 << 12), strategies.gradient_cases(
        dtype="float32", max_elements=1 << 12))
    def check(accuracy, gradient):
        assert accuracy.batch.weight_layout == gradient.batch.weight_layout == "contiguous"

    check()


def test_fused_heads_cases_hold_a_whole_token_of_heads():
    @settings(max_examples=100, deadline=None)
    @given(strategies.strided_cases(dtype="bfloat16", max_elements=1 << 14))
    def check(case):
        assert case.batch.rows >= case.heads

    check()


def test_strategies_name_bad_arguments():
    with pytest.raises(ValueError, match="max_rows=0"):
        strategies.row_counts(max_rows=0)
    with pytest.raises(ValueError, match="min_rows=5 is larger than max_rows=2"):
        strategies.row_counts(min_rows=5, max_rows=2)
    with pytest.raises(ValueError, match=r"entries=\(\)"):
        strategies.entry_points(())


@pytest.mark.parametrize("family", VALUE_FAMILIES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_value_families_are_reproducible_and_in_domain(family, dtype):
    b = Batch(dim=300, rows=20, dtype=dtype, values=family, eps=1e-5, seed=3)
    x1, x2 = b.x(), b.x()
    assert torch.equal(x1, x2) and x1.dtype == getattr(torch, dtype)
    assert torch.isfinite(x1).all()
    assert torch.isfinite(x1.float().pow(2).sum(-1)).all(), "sum of squares must stay finite in fp32"
    assert not torch.equal(b.x(salt=1), x1) or family == "constant"
    # Drawing on a device names the generator's device; on the CPU it must give the very same rows, since replays
    # and cross-device parity rest on CPU draws.
    drawn_on = b.x(device="cpu")
    assert drawn_on.device.type == "cpu" and torch.equal(drawn_on.view(torch.int8), x1.view(torch.int8))


@pytest.mark.parametrize("family", WEIGHT_FAMILIES)
def test_weight_families(family):
    w = Batch(dim=64, rows=1, dtype="bfloat16", weight=family).w()
    assert w.shape == (64,) and w.dtype == torch.bfloat16


@pytest.mark.parametrize("content", PAD_CONTENTS)
def test_pad_contents(content):
    pad = make_pad(content, 3, 16, "float16", torch.Generator().manual_seed(0))
    assert pad.shape == (3, 16) and pad.dtype == torch.float16


def _concatenated_pads(content: str, t: torch.Tensor, before: int, after: int, gen: torch.Generator) -> torch.Tensor:
    """The padded batch as it was built before pad_rows: each pad made apart, then concatenated."""
    dtype = str(t.dtype).removeprefix("torch.")
    dt, dim = t.dtype, t.shape[-1]

    def pad(rows: int) -> torch.Tensor:
        if content == "zeros":
            return torch.zeros(rows, dim, dtype=dt)
        if content == "normal":
            return torch.randn(rows, dim, generator=gen).to(dt)
        if content == "huge":
            return (torch.randn(rows, dim, generator=gen).clamp(-3, 3) * {"float16": 2.0e4}.get(dtype, 1.0e15)).to(dt)
        fill = {"dtype_max": torch.finfo(dt).max, "nan": float("nan"), "inf": float("inf"), "neg_inf": -float("inf")}
        return torch.full((rows, dim), fill[content], dtype=dt)

    first = pad(before)
    return torch.cat([first, t, pad(after)])


@pytest.mark.parametrize("content", PAD_CONTENTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_pad_rows_are_the_concatenated_pads(content, dtype):
    """pad_rows writes the pads in place: the same bits, and the generator left where the old build left it."""
    t = torch.randn(5, 33).to(dtype)
    bits = {4: torch.int32, 2: torch.int16}[t.element_size()]
    for before, after in ((0, 3), (4, 0), (2, 7), (0, 0)):
        old_gen, new_gen = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        old = _concatenated_pads(content, t, before, after, old_gen)
        new = pad_rows(t, content, before, after, new_gen)
        assert torch.equal(new.view(bits), old.view(bits)), (before, after)
        assert torch.equal(new_gen.get_state(), old_gen.get_state())
        assert torch.equal(make_pad(content, before, 33, str(dtype).removeprefix("torch."),
                                    torch.Generator().manual_seed(3)).view(bits), old[:before].view(bits))


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match="'bogus'"):
        make_values("bogus", 1, 1, "float32", 1e-6, torch.Generator())
    with pytest.raises(ValueError, match="not a case type"):
        parse_case("__import__('os')")


def test_large_batches_bound_for_a_gpu_are_drawn_there():
    """Threshold batches of up to 2^28 elements are drawn by the GPU's generator (the host's draw was most of a
    threshold plan's time); smaller ones, and everything bound for the CPU, stay host-drawn, the same values on
    every device."""
    from rmsnorm_conformance.harness.drawing.cases import DEVICE_DRAW_ELEMENTS, drawing_device
    from rmsnorm_conformance.harness.running.entry_points import entry_point

    assert drawing_device(DEVICE_DRAW_ELEMENTS, "cuda:0") == torch.device("cuda:0")
    assert drawing_device(DEVICE_DRAW_ELEMENTS - 1, "cuda:0") == torch.device("cpu")
    assert drawing_device(DEVICE_DRAW_ELEMENTS * 64, "cpu") == torch.device("cpu")
    b = Batch(dim=4096, rows=DEVICE_DRAW_ELEMENTS // 4096, dtype="bfloat16", seed=5)
    (x, residual), _ = entry_point("fused_add").inputs(b, "cpu")
    assert torch.equal(x.view(torch.int16), b.x().view(torch.int16))
    assert torch.equal(residual.view(torch.int16), b.residual().view(torch.int16))
