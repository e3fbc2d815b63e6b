"""The ground truth itself: the canonical order pinned by hand and by an independent implementation,
invariant by construction, close to the fp64 oracle, differentiable."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.contract.canonical_order import GROUP, padded_width
from rmsnorm_conformance.contract.reference import (
    gradient_terms,
    oracle_fp64,
    sum_fixed_order,
    sum_of_squares_fixed_order,
)
from rmsnorm_conformance.harness.checking.comparison import compare_bitwise, ulp_distance

OP = NativeRMSNormOp()
TINY = 2.0**-24  # half an ulp of 1.0 in fp32: 1 + TINY rounds back to 1, 1 + 2 * TINY does not


# ------------------------------------------------------------------------------------------------------
# The canonical order, by hand.


def _row(dim: int, values: dict[int, float]) -> torch.Tensor:
    row = torch.zeros(1, dim)
    for index, value in values.items():
        row[0, index] = value
    return row


def test_one_group_is_halved_inside():
    """[a, b, c] pads to [a, b, c, 0, 0, 0, 0, 0]: (a + c) + b, not (a + b) + c nor a + (b + c)."""
    s = sum_fixed_order(_row(3, {0: 1.0, 1: TINY, 2: TINY}))
    assert s.item() == 1.0  # (1 + TINY) + TINY: each add rounds back to 1
    s = sum_fixed_order(_row(3, {0: TINY, 1: 1.0, 2: TINY}))
    assert s.item() == 1.0 + 2 * TINY  # (TINY + TINY) + 1 is exact


def test_groups_are_halved_across():
    """Four groups of 8 with sums g0..g3 reduce as (g0 + g2) + (g1 + g3), not in sequence."""
    s = sum_fixed_order(_row(32, {0: 1.0, 8: TINY, 16: TINY, 24: -1.0}))
    assert s.item() == TINY  # (1 + TINY) + (TINY - 1) = 1 + (-1 + TINY)
    one, tiny = np.float32(1.0), np.float32(TINY)
    assert ((one + tiny) + tiny) - one == 0.0  # the sequential order gives another answer


def test_element_order_inside_a_group_comes_before_the_groups():
    """Element 4 of group 0 meets element 0 of group 0 before group 1 is added."""
    s = sum_fixed_order(_row(16, {0: 1.0, 4: TINY, 8: TINY}))
    assert s.item() == 1.0  # (1 + TINY) + TINY
    s = sum_fixed_order(_row(16, {0: TINY, 4: TINY, 8: 1.0}))
    assert s.item() == 1.0 + 2 * TINY


@pytest.mark.parametrize(("size", "width"), [(1, 8), (7, 8), (8, 8), (9, 16), (128, 128), (129, 256),
                                             (4096, 4096), (4097, 8192)])
def test_padded_width(size, width):
    assert padded_width(size) == width


# ------------------------------------------------------------------------------------------------------
# The canonical order, against a straightforward implementation of its written steps in numpy float32.


def _canonical_sum(values: list) -> np.float32:
    """The written steps literally: pad with +0.0, halve each group of GROUP, halve the group sums."""
    width = padded_width(len(values))
    v = [np.float32(a) for a in values] + [np.float32(0.0)] * (width - len(values))
    sums = []
    for start in range(0, width, GROUP):
        group = v[start : start + GROUP]
        while len(group) > 1:
            half = len(group) // 2
            group = [group[i] + group[i + half] for i in range(half)]
        sums.append(group[0])
    while len(sums) > 1:
        half = len(sums) // 2
        sums = [sums[i] + sums[i + half] for i in range(half)]
    return sums[0]


def _canonical_forward(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    out = np.empty_like(x)
    d, e = np.float32(x.shape[1]), np.float32(eps)
    for r, row in enumerate(x):
        rms = np.sqrt(_canonical_sum([a * a for a in row]) / d + e)
        inv = np.float32(1.0) / rms
        out[r] = [(a * inv) * b for a, b in zip(row, w, strict=True)]
    return out


def _canonical_backward(x: np.ndarray, w: np.ndarray, g: np.ndarray, eps: float):
    d, e = np.float32(x.shape[1]), np.float32(eps)
    dx = np.empty_like(x)
    products = np.empty_like(x)
    for r, (row, grow) in enumerate(zip(x, g, strict=True)):
        rms = np.sqrt(_canonical_sum([a * a for a in row]) / d + e)
        inv = np.float32(1.0) / rms
        gw = [a * b for a, b in zip(grow, w, strict=True)]
        c = (_canonical_sum([a * b for a, b in zip(gw, row, strict=True)]) / d) / (rms * rms)
        dx[r] = [(a - b * c) * inv for a, b in zip(gw, row, strict=True)]
        products[r] = [a * (b * inv) for a, b in zip(grow, row, strict=True)]
    dw = np.array([_canonical_sum(list(col)) + np.float32(0.0) for col in products.T], dtype=np.float32)
    return dx, dw


def _value_classes(t: torch.Tensor) -> torch.Tensor:
    """Per element: 0 NaN, 1 +Inf, 2 -Inf, 3 +0.0, 4 -0.0, 5 finite positive, 6 finite negative."""
    cls = torch.where(t > 0, 5, 6)
    cls = torch.where(t == 0, torch.where(torch.signbit(t), 4, 3), cls)
    cls = torch.where(torch.isinf(t), torch.where(t > 0, 1, 2), cls)
    return torch.where(torch.isnan(t), 0, cls)


@pytest.mark.parametrize("eps", [1e-6, 1e-50])  # 1e-50 is +0.0 in fp32: rms can be 0
def test_reciprocal_puts_zeros_nans_and_infs_where_the_division_did(eps):
    """x * (1 / rms) against x / rms (contract/canonical_order.py, RECIPROCAL_NOTE): every element in the same
    class (NaN, +-Inf, signed zero, sign of a finite value), through the weight too, and the same bits on
    the rows whose quotients are all zeros, NaN or Inf."""
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([
        [nan, 1.0, -0.0, 2.0, 0.0, -3.0, 1e-30, 5.0],  # rms NaN
        [inf, -2.0, 0.0, -0.0, 1e30, -inf, 4.0, 1.0],  # rms +Inf
        [3e38, -3e38, -1.0, -0.0, 0.0, 2e-45, 1.0, 7.0],  # the sum of squares overflows: rms +Inf
        [0.0, -0.0, 0.0, 0.0, -0.0, 0.0, 0.0, 0.0],  # rms sqrt(eps), or 0 when eps is 0 in fp32
        [1e-30, -1e-30, 0.0, -0.0, 1e-38, -2e-45, 3e-30, 1e-31],  # the squares underflow
        [1e-20, -4e18, 0.5, -0.0, 0.0, 3.0, -1e-38, 2e-45],  # wide range, tiny quotients
        [1.0, -1.0, 2.0, -2.0, 4.0, -4.0, 0.5, 0.0],
    ])
    w = torch.tensor([1.0, -1.0, 0.5, 2.0, -0.0, 0.0, inf, 3.0])
    x32 = x.float()
    rms = torch.sqrt((sum_of_squares_fixed_order(x32) / torch.full((), 8.0)
                      + torch.full((), eps, dtype=torch.float32)).double()).float()
    divided = x32 / rms
    y = OP.forward_fp32(x, w, eps)
    assert torch.equal(_value_classes(y), _value_classes(divided * w))
    unit = OP.forward_fp32(x, torch.ones(8), eps)
    assert torch.equal(_value_classes(unit), _value_classes(divided))
    # rows whose quotients are all zeros, NaN or Inf keep the division's bits (NaN payloads aside)
    for r in (0, 1, 2, 3):
        both_nan = torch.isnan(unit[r]) & torch.isnan(divided[r])
        assert torch.equal(unit[r].view(torch.int32)[~both_nan], divided[r].view(torch.int32)[~both_nan]), r


def _spread_rows(rows: int, dim: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, dim, generator=gen) * torch.logspace(-4, 4, rows).unsqueeze(1)


@pytest.mark.parametrize("dim", [1, 3, 7, 8, 9, 127, 128, 129, 1000, 4096, 4097])
def test_forward_is_the_written_order_bit_for_bit(dim):
    x = _spread_rows(3, dim, dim)
    w = torch.randn(dim, generator=torch.Generator().manual_seed(dim + 1))
    expected = torch.from_numpy(_canonical_forward(x.numpy(), w.numpy(), 1e-6))
    assert compare_bitwise(OP.forward_fp32(x, w, 1e-6), expected).equal


@pytest.mark.parametrize(("rows", "dim"), [(1, 1), (5, 7), (9, 8), (17, 129), (3, 1000)])
def test_backward_is_the_written_order_bit_for_bit(rows, dim):
    x = _spread_rows(rows, dim, dim)
    gen = torch.Generator().manual_seed(rows)
    w, g = torch.randn(dim, generator=gen), torch.randn(rows, dim, generator=gen)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    OP.forward_fp32(xr, wr, 1e-5).backward(g)
    dx, dw = _canonical_backward(x.numpy(), w.numpy(), g.numpy(), 1e-5)
    assert compare_bitwise(xr.grad, torch.from_numpy(dx)).equal
    assert compare_bitwise(wr.grad, torch.from_numpy(dw)).equal


def test_a_zero_dw_is_positive_zero():
    """Eight zero rows under negative gradients: every product is -0.0, and their sum is +0.0."""
    x = torch.zeros(8, 16, requires_grad=True)
    w = torch.ones(16, requires_grad=True)
    OP.forward_fp32(x, w).backward(-torch.ones(8, 16))
    assert not torch.signbit(w.grad).any()


@pytest.mark.parametrize("dim", [1, 3, 128, 1000, 4096, 8193])
def test_tree_sum_matches_fp64(dim):
    x = torch.randn(5, dim, generator=torch.Generator().manual_seed(dim))
    s = sum_of_squares_fixed_order(x)
    assert s.shape == (5, 1)
    torch.testing.assert_close(s.double(), x.double().pow(2).sum(-1, keepdim=True), rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_invariant_where_torch_reductions_are_not(dtype):
    """Small slices of a large batch: the counts at which torch's reductions change their plan."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 4096, generator=g).to(dtype)
    w = torch.randn(4096, generator=g).to(dtype)
    full = OP.forward_fp32(x, w)
    for b in (1, 2, 3, 8, 15, 17, 255, 256, 257):
        assert compare_bitwise(OP.forward_fp32(x[:b].clone(), w), full[:b]).equal, b
    assert compare_bitwise(OP.forward_fp32(x.t().contiguous().t(), w), full).equal


def test_reference_is_within_four_ulp_of_the_oracle():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 4096, generator=g) * torch.logspace(-3, 3, 256).unsqueeze(1)
    w = torch.randn(4096, generator=g)
    out = OP.forward_fp32(x, w)
    assert int(ulp_distance(out, oracle_fp64(x, w).float()).max()) <= 4


def test_forward_rounds_once_to_the_input_dtype():
    x = torch.randn(8, 128).bfloat16()
    w = torch.randn(128).bfloat16()
    assert torch.equal(OP.forward(x, w).view(torch.int16), OP.forward_fp32(x, w).bfloat16().view(torch.int16))
    assert OP(x, w).dtype == torch.bfloat16


def test_differentiable_against_torch_formula():
    x = torch.randn(4, 64, dtype=torch.float64).float().requires_grad_()
    w = torch.randn(64).requires_grad_()
    OP.forward_fp32(x, w, 1e-5).sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    (x2 * torch.rsqrt(x2.pow(2).mean(-1, keepdim=True) + 1e-5) * w2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-6)


def _fp64_gradients(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w).backward(g)
    return x.grad, w.grad


def test_gradient_terms_bound_the_gradients_and_are_their_terms_where_nothing_cancels():
    """dx and dw are sums of the terms gradient_terms sizes: never larger than them, and equal to them where every
    term has one sign (dw of a positive g and x; dx of a row whose dot product is zero)."""
    gen = torch.Generator().manual_seed(0)
    scales = torch.logspace(-3, 3, 64, dtype=torch.float64)[:, None]  # rows of small scale: inv in the hundreds
    x = torch.randn(64, 96, generator=gen, dtype=torch.float64) * scales
    w = torch.randn(96, generator=gen, dtype=torch.float64)
    g = torch.randn(64, 96, generator=gen, dtype=torch.float64)
    dx, dw = _fp64_gradients(x, w, g)
    dx_terms, dw_terms = gradient_terms(x, w, g, 1e-6)
    assert dx_terms.shape == x.shape and dw_terms.shape == w.shape
    assert bool((dx.abs() <= dx_terms * (1 + 1e-12)).all()) and bool((dw.abs() <= dw_terms * (1 + 1e-12)).all())
    _, dw = _fp64_gradients(x.abs(), w, g.abs())
    torch.testing.assert_close(gradient_terms(x.abs(), w, g.abs(), 1e-6)[1], dw.abs(), rtol=1e-12, atol=0)
    x = torch.zeros(1, 96, dtype=torch.float64)
    x[0, 0] = 2.0  # g w xhat sums to g w[0] xhat[0]; with w[0] = 0 the dot product is 0 and dx = inv * g w
    w[0] = 0.0
    g = torch.ones(1, 96, dtype=torch.float64)
    dx, _ = _fp64_gradients(x, w, g)
    torch.testing.assert_close(gradient_terms(x, w, g, 1e-6)[0], dx.abs(), rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    ("x", "w", "eps", "error", "words"),
    [
        (torch.ones(2, 4), torch.ones(5), 1e-6, ValueError, ["(2, 4)", "(5,)"]),
        (torch.ones(2, 4), torch.ones(1, 4), 1e-6, ValueError, ["(2, 4)", "(1, 4)"]),
        (torch.ones(2, 4, dtype=torch.float64), torch.ones(4, dtype=torch.float64), 1e-6, TypeError, ["float64"]),
        (torch.ones(2, 4), torch.ones(4).bfloat16(), 1e-6, TypeError, ["float32", "bfloat16"]),
        (torch.ones(2, 4), torch.ones(4, device="meta"), 1e-6, ValueError, ["cpu", "meta"]),
        (torch.ones(2, 4), torch.ones(4), -1.0, ValueError, ["eps=-1.0"]),
        (torch.ones(2, 4), torch.ones(4), float("nan"), ValueError, ["eps=nan"]),
        (torch.ones(2, 0), torch.ones(0), 1e-6, ValueError, ["(2, 0)"]),
    ],
)
def test_bad_input_is_named(x, w, eps, error, words):
    with pytest.raises(error) as info:
        OP.forward(x, w, eps)
    for word in words:
        assert word in str(info.value)


def test_backward_is_batch_invariant_and_deterministic_by_construction():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(300, 4096, generator=g)
    w = torch.randn(4096, generator=g)
    dy = torch.randn(300, 4096, generator=g)

    def grads(rows):
        xr = x[:rows].clone().requires_grad_()
        wr = w.clone().requires_grad_()
        OP.forward_fp32(xr, wr).backward(dy[:rows])
        return xr.grad, wr.grad

    dx_full, dw_full = grads(300)
    for b in (1, 2, 3, 15, 17, 256):
        assert compare_bitwise(grads(b)[0], dx_full[:b]).equal, b
    assert compare_bitwise(grads(300)[1], dw_full).equal


def test_empty_batch_backward():
    x = torch.zeros(0, 8, requires_grad=True)
    w = torch.ones(8, requires_grad=True)
    OP.forward_fp32(x, w).sum().backward()
    assert x.grad.shape == (0, 8) and torch.equal(w.grad, torch.zeros(8))


# --- Under torch.compile ------------------------------------------------------------------------------------------

def _args(method: str, dtype: torch.dtype) -> tuple:
    gen = torch.Generator().manual_seed(3)
    x, r = (torch.randn(5, 100, generator=gen).to(dtype) for _ in range(2))
    w = torch.randn(100, generator=gen).to(dtype)
    return {"fused_add": (x, r, w, 1e-6), "forward_unweighted": (x, 1e-6)}.get(method, (x, w, 1e-6))


@pytest.mark.parametrize("method", ["forward", "forward_fp32", "forward_offset", "forward_unweighted", "fused_add"])
def test_compiled_entry_points_run_the_reference_as_one_opaque_operator(method):
    """Inductor's code for the reference's elementwise ops did not keep their bits on an H200, so under
    torch.compile every entry point is one custom operator whose implementation is the eager reference: the traced
    graph holds it (and no arithmetic of the reference's own), and the bits are eager's."""
    graphs = []

    def capture(gm: torch.fx.GraphModule, inputs: list) -> object:
        graphs.append(gm.graph)
        return gm.forward

    torch._dynamo.reset()
    for dtype in (torch.float32, torch.bfloat16):
        args = _args(method, dtype)
        eager = getattr(OP, method)(*args)
        got = torch.compile(getattr(OP, method), backend=capture, fullgraph=True)(*args)
        for e, g in zip(*(t if isinstance(t, tuple) else (t,) for t in (eager, got)), strict=True):
            assert e.dtype == g.dtype and torch.equal(e.view(torch.int8), g.view(torch.int8)), method
    targets = [str(n.target) for graph in graphs for n in graph.nodes if n.op == "call_function"]
    ours = [t for t in targets if "rmsnorm_conformance.native" in t]
    assert ours and len(ours) == len(graphs), targets
    assert not any(t.endswith(("add_", "mul_", "sqrt")) for t in targets), targets


def test_gradients_through_the_compiled_operator_are_eager_ones():
    """The operator's autograd recomputes the row statistics and runs the reference's fixed-order backward: dx and
    dw equal autograd through the eager reference, bit for bit, plain and offset."""
    gen = torch.Generator().manual_seed(4)
    for method in ("forward", "forward_offset"):
        x = torch.randn(7, 100, generator=gen).bfloat16().requires_grad_()
        w = torch.randn(100, generator=gen).bfloat16().requires_grad_()
        g = torch.randn(7, 100, generator=gen).bfloat16()
        eager = torch.autograd.grad(getattr(OP, method)(x, w), (x, w), g)
        torch._dynamo.reset()
        compiled = torch.compile(getattr(OP, method), backend="aot_eager", fullgraph=True)
        got = torch.autograd.grad(compiled(x, w), (x, w), g)
        for e, c in zip(eager, got, strict=True):
            assert torch.equal(e.view(torch.int16), c.view(torch.int16)), method
