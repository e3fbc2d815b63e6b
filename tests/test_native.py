"""The ground truth itself: invariant by construction, close to the fp64 oracle, differentiable."""

from __future__ import annotations

import pytest
import torch

from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.contract.reference import oracle_fp64, sum_of_squares_fixed_order
from rmsnorm_conformance.harness.comparison import compare_bitwise, ulp_distance

OP = NativeRMSNormOp()


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
