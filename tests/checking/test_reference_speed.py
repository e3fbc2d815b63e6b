"""The reference's fast implementation against the one it replaced, kept here verbatim: the same bits (NaN payloads
and signed zeros included) for every entry point the reference serves, over the dims, dtype pairs, eps values
and edge-case rows where a changed order or a skipped step would show. The last test perturbs the order and
checks that this comparison sees it, so that it can fail."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.contract import fp8, reference
from rmsnorm_conformance.contract.canonical_order import GROUP, padded_width
from rmsnorm_conformance.contract.inputs import CONTRACT_DTYPE_PAIRS

# --- the implementation before the vectorised layout, verbatim but for its input checks -------------------------


def _old_halve(t: torch.Tensor, width: int) -> torch.Tensor:
    while width > 1:
        width //= 2
        t = t[..., :width] + t[..., width:]
    return t


def old_sum_fixed_order(t: torch.Tensor) -> torch.Tensor:
    size = t.shape[-1]
    width = padded_width(size)
    if width != size:
        t = F.pad(t, (0, width - size))
    groups = _old_halve(t.unflatten(-1, (width // GROUP, GROUP)), GROUP).squeeze(-1)
    return _old_halve(groups, width // GROUP)


def old_sum_of_squares_fixed_order(x32: torch.Tensor) -> torch.Tensor:
    return old_sum_fixed_order(x32 * x32)


def _scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    return torch.full((), value, dtype=torch.float32, device=like.device)


def _old_rms(x32: torch.Tensor, eps: float) -> torch.Tensor:
    mean = old_sum_of_squares_fixed_order(x32) / _scalar(x32.shape[-1], x32)
    return torch.sqrt((mean + _scalar(eps, x32)).double()).float()


def _old_reciprocal(rms: torch.Tensor) -> torch.Tensor:
    return _scalar(1.0, rms) / rms


class _OldFixedOrderRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x32: torch.Tensor, w32: torch.Tensor, eps: float) -> torch.Tensor:
        rms = _old_rms(x32, eps)
        inv = _old_reciprocal(rms)
        ctx.save_for_backward(x32, w32, rms, inv)
        return (x32 * inv) * w32

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        x32, w32, rms, inv = ctx.saved_tensors
        grad = grad.float()
        gw = grad * w32
        mean_gwx = old_sum_fixed_order(gw * x32) / _scalar(x32.shape[-1], x32)
        dx = (gw - x32 * (mean_gwx / (rms * rms))) * inv
        per_row = (grad * (x32 * inv)).reshape(-1, x32.shape[-1])
        dw = old_sum_fixed_order(per_row.t()).reshape(-1) + 0.0 if per_row.shape[0] else torch.zeros_like(w32)
        return dx, dw, None


def old_reference_fp32(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return _OldFixedOrderRMSNorm.apply(x.float(), weight.float(), float(eps))


def _old_normalize_fp32(x32: torch.Tensor, scale32: torch.Tensor, eps: float) -> torch.Tensor:
    return _OldFixedOrderRMSNorm.apply(x32, scale32, float(eps))


def old_reference_fused_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                            eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    residual_out = (x.float() + residual.float()).to(residual.dtype)
    return _old_normalize_fp32(residual_out.float(), weight.float(), eps), residual_out


def old_reference_offset(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                         offset_dtype: str = "float32") -> torch.Tensor:
    return _old_normalize_fp32(x.float(), reference.offset_scale(weight, offset_dtype), eps)


def old_reference_unweighted(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return _old_normalize_fp32(x.float(), torch.ones(x.shape[-1], dtype=torch.float32, device=x.device), eps)


def old_rounding_class_outputs(x: torch.Tensor, scale32: torch.Tensor, eps: float,
                               out_dtype: torch.dtype, rms_of: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    x32 = x.float()
    inv = _old_reciprocal(_old_rms(x32 if rms_of is None else rms_of.float(), eps))
    ones = torch.ones(x32.shape[-1], dtype=torch.float32, device=x32.device)
    normalized = (x32 * inv) * ones
    by_rounded_inverse = (x32 * inv.to(out_dtype).float()).to(out_dtype).float()
    return {
        "product_fp32": (normalized * scale32).to(out_dtype),
        "normalized_rounded": (normalized.to(out_dtype).float() * scale32).to(out_dtype),
        "inverse_rounded": (by_rounded_inverse * scale32).to(out_dtype),
    }


# --- inputs ---------------------------------------------------------------------------------------------------

DIMS = (1, 2, 3, 7, 127, 128, 129, 4095, 4096, 4097, 5120, 8192)
EPS_VALUES = (1e-6, 0.25, 1e-50)  # 1e-50 is +0.0 in fp32: a zero row's rms is 0
_INT = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
# NaNs of several signs and payloads (fp32 bits; the 16-bit dtypes take the top half): which payload a sum keeps
# depends on which operands meet, so they show a changed pairing as well as a changed operand order.
NAN_BITS = (0x7FC00000, 0x7FC12345, 0xFFC0BEEF, 0x7FE00001, 0xFFD55555)


def _nan(dtype: torch.dtype, k: int) -> torch.Tensor:
    pattern = NAN_BITS[k % len(NAN_BITS)]
    if dtype == torch.float32:
        return torch.tensor(pattern - (1 << 32) if pattern >= 1 << 31 else pattern, dtype=torch.int32).view(dtype)
    high = pattern >> 16
    if dtype == torch.float16:  # an fp16 NaN: exponent all ones, the payload's low bits kept
        high = (high & 0x8000) | 0x7E00 | (high & 0x1FF)
    return torch.tensor(high - (1 << 16) if high >= 1 << 15 else high, dtype=torch.int16).view(dtype)


def edge_rows(dim: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Rows of every value family the reference must keep its bits on: normal, mixed scales, tiny (the squares
    underflow), huge (the sum overflows), zeros of both signs, constant, NaN (several payloads) and +-Inf rows, then
    fourteen rows of scales from 1e-3 to 1e3 (about a third of such rows' sums differ between two pairwise trees)."""
    gen = torch.Generator().manual_seed(seed)
    finfo = torch.finfo(dtype)
    rows = [
        torch.randn(dim, generator=gen),
        torch.randn(dim, generator=gen) * torch.logspace(-6, 6, dim),
        torch.randn(dim, generator=gen) * min(1e-30, finfo.tiny * 64) if dtype == torch.float32
        else torch.randn(dim, generator=gen) * finfo.tiny,
        torch.randn(dim, generator=gen) * finfo.max / 4,
        torch.zeros(dim),
        -torch.zeros(dim),
        torch.full((dim,), 3.0),
        torch.randn(dim, generator=gen),
        torch.randn(dim, generator=gen),
        torch.randn(dim, generator=gen),
    ]
    rows += list(torch.randn(14, dim, generator=gen) * torch.logspace(-3, 3, 14).unsqueeze(1))
    x = torch.stack(rows).to(dtype)
    picks = torch.randint(0, dim, (6,), generator=gen).tolist()
    for k, col in enumerate(picks[:3]):  # several NaNs in row 7, different payloads
        x[7, col] = _nan(dtype, k)
    x[8, picks[3]] = math.inf
    x[8, picks[4]] = -math.inf
    x[9, picks[5]] = -math.inf
    return x


def _weight(dim: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    w = torch.randn(dim, generator=torch.Generator().manual_seed(seed)).to(dtype)
    w[0] = -0.0
    return w


def assert_same_bits(new: torch.Tensor, old: torch.Tensor, what: str) -> None:
    __tracebackhide__ = True
    assert new.dtype == old.dtype and new.shape == old.shape, f"{what}: {new.dtype}{tuple(new.shape)} " \
                                                              f"against {old.dtype}{tuple(old.shape)}"
    if new.dtype in _INT:
        new, old = new.detach().view(_INT[new.dtype]), old.detach().view(_INT[old.dtype])
    elif new.dtype == fp8.FP8_DTYPE:
        new, old = new.view(torch.uint8), old.view(torch.uint8)
    differ = (new != old).flatten()
    assert not bool(differ.any()), (f"{what}: {int(differ.sum())} of {differ.numel()} elements differ, first at "
                                    f"flat index {int(differ.nonzero()[0])}")


# --- the comparisons -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", DIMS)
def test_sums_are_the_old_sums(dim):
    """sum_fixed_order and sum_of_squares_fixed_order, over rows (any leading dims) and over dim 0 (dw's sum)."""
    x = edge_rows(dim, torch.float32, dim)
    assert_same_bits(reference.sum_of_squares_fixed_order(x), old_sum_of_squares_fixed_order(x), "sum of squares")
    assert_same_bits(reference.sum_fixed_order(x), old_sum_fixed_order(x), "sum")
    assert_same_bits(reference.sum_fixed_order(x.view(4, 6, dim)), old_sum_fixed_order(x.view(4, 6, dim)), "3-D")
    assert_same_bits(reference.sum_fixed_order(x.t(), dim=0).reshape(-1), old_sum_fixed_order(x).reshape(-1),
                     "over dim 0")
    assert_same_bits(reference.sum_fixed_order(x[:, ::2]), old_sum_fixed_order(x[:, ::2]), "strided")
    half = x.bfloat16()  # a 16-bit input sums in its own dtype, as before
    assert_same_bits(reference.sum_fixed_order(half), old_sum_fixed_order(half), "bf16 sum")
    assert_same_bits(reference.sum_of_squares_fixed_order(half), old_sum_of_squares_fixed_order(half), "bf16 squares")


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize(("dtype", "weight_dtype"), CONTRACT_DTYPE_PAIRS, ids=lambda d: str(d).removeprefix("torch."))
def test_forward_entry_points_are_the_old_ones(dim, dtype, weight_dtype):
    """forward_fp32, forward, the fused add (residual in x's dtype and fp32), the offset (formed in fp32 and in the
    weight's dtype), no weight, and the rounding classes, at every eps."""
    x = edge_rows(dim, dtype, dim)
    w = _weight(dim, weight_dtype, dim + 1)
    residual = edge_rows(dim, dtype, dim + 2).flip(0)
    native = NativeRMSNormOp()
    for eps in EPS_VALUES:
        old = old_reference_fp32(x, w, eps)
        assert_same_bits(reference.reference_fp32(x, w, eps), old, f"reference_fp32 eps={eps}")
        assert_same_bits(native.forward(x, w, eps), old.to(dtype), f"native forward eps={eps}")
        for r in {residual, residual.float()}:
            new_y, new_r = reference.reference_fused_add(x, r, w, eps)
            old_y, old_r = old_reference_fused_add(x, r, w, eps)
            assert_same_bits(new_r, old_r, f"fused add residual_out ({r.dtype}) eps={eps}")
            assert_same_bits(new_y, old_y, f"fused add y ({r.dtype}) eps={eps}")
        for offset_dtype in ("float32", "weight"):
            assert_same_bits(reference.reference_offset(x, w, eps, offset_dtype),
                             old_reference_offset(x, w, eps, offset_dtype), f"offset ({offset_dtype}) eps={eps}")
        assert_same_bits(reference.reference_unweighted(x, eps), old_reference_unweighted(x, eps),
                         f"unweighted eps={eps}")
        scale32 = w.float()
        for rms_of in (None, residual):
            new = reference.rounding_class_outputs(x, scale32, eps, dtype, rms_of=rms_of)
            old_classes = old_rounding_class_outputs(x, scale32, eps, dtype, rms_of=rms_of)
            for name in old_classes:
                assert_same_bits(new[name], old_classes[name], f"rounding class {name} eps={eps}")


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize(("dtype", "weight_dtype"), CONTRACT_DTYPE_PAIRS, ids=lambda d: str(d).removeprefix("torch."))
def test_backward_is_the_old_backward(dim, dtype, weight_dtype):
    """dx and dw through forward (any leading dims), the fused add, the offset and no weight: gradients into x, the
    residual and the weight, including rows of NaN and Inf and a row count that is not a power of two."""
    x = edge_rows(dim, dtype, dim).view(4, 6, dim)
    w = _weight(dim, weight_dtype, dim + 1)
    g = torch.randn(4, 6, dim, generator=torch.Generator().manual_seed(dim + 3))
    residual = edge_rows(dim, dtype, dim + 2).flip(0).view(4, 6, dim)

    def grads(fn: Any, *inputs: torch.Tensor) -> list[torch.Tensor]:
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        out = fn(*leaves)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(g)
        return [out.detach(), *(t.grad for t in leaves)]

    eps = 1e-5
    pairs = [
        ("forward", lambda a, b: reference.reference_fp32(a, b, eps), lambda a, b: old_reference_fp32(a, b, eps),
         (x, w)),
        ("fused add", lambda a, r, b: reference.reference_fused_add(a, r, b, eps),
         lambda a, r, b: old_reference_fused_add(a, r, b, eps), (x, residual, w)),
        ("offset", lambda a, b: reference.reference_offset(a, b, eps), lambda a, b: old_reference_offset(a, b, eps),
         (x, w)),
        ("unweighted", lambda a: reference.reference_unweighted(a, eps), lambda a: old_reference_unweighted(a, eps),
         (x,)),
    ]
    for name, new_fn, old_fn, inputs in pairs:
        for k, (new, old) in enumerate(zip(grads(new_fn, *inputs), grads(old_fn, *inputs), strict=True)):
            assert_same_bits(new, old, f"{name}: {'output' if k == 0 else f'gradient of input {k}'}")


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 9, 17, 23])
@pytest.mark.parametrize("dim", [1, 7, 129])
def test_dw_sums_any_row_count_as_before(rows, dim):
    """dw sums over the rows in the canonical order with rows in place of elements: row counts that fill a group
    partly, one group, several, with NaN and Inf rows among them."""
    order = [10, 7, 11, 8, 12, 9, *range(13, 24), *range(7)]  # normal rows and the NaN / Inf rows alternate first
    x = edge_rows(dim, torch.float32, rows)[order[:rows]]
    w = _weight(dim, torch.float32, rows + 1)
    g = torch.randn(rows, dim, generator=torch.Generator().manual_seed(rows))
    results = []
    for fn in (reference.reference_fp32, old_reference_fp32):
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        fn(xr, wr, 1e-6).backward(g)
        results.append((xr.grad, wr.grad))
    assert_same_bits(results[0][0], results[1][0], "dx")
    assert_same_bits(results[0][1], results[1][1], "dw")


@pytest.mark.parametrize("dim", [7, 128, 4096])
def test_fp8_references_are_the_old_ones(dim, monkeypatch):
    """The fp8 references (static and dynamic scale, plain and fused add) and the fp8 rounding classes."""
    x = edge_rows(dim, torch.bfloat16, dim)
    w = _weight(dim, torch.bfloat16, dim + 1)
    residual = edge_rows(dim, torch.bfloat16, dim + 2).flip(0)
    scale = torch.tensor([0.01])

    def outputs() -> list[torch.Tensor]:
        return [fp8.reference_fp8_static(x, w, 1e-6, scale), *fp8.reference_fp8_dynamic(x, w, 1e-6),
                *fp8.reference_fp8_fused_add_static(x, residual, w, 1e-6, scale),
                *fp8.reference_fp8_fused_add_dynamic(x, residual, w, 1e-6),
                *(t for ts in fp8.fp8_rounding_class_outputs(x, w, 1e-6, x.dtype, scale).values() for t in ts)]

    new = outputs()
    monkeypatch.setattr(fp8, "reference_fp32", old_reference_fp32)
    monkeypatch.setattr(fp8, "reference_fused_add", old_reference_fused_add)
    monkeypatch.setattr(fp8, "rounding_class_outputs", old_rounding_class_outputs)
    for k, (a, b) in enumerate(zip(new, outputs(), strict=True)):
        assert_same_bits(a, b, f"fp8 output {k}")


def test_grad_mode_and_inference_mode_give_the_same_bits():
    """The straight path (no gradient wanted) and the autograd function give the same output."""
    x = edge_rows(4097, torch.bfloat16, 5)
    w = _weight(4097, torch.float32, 6)
    plain = reference.reference_fp32(x, w)
    with torch.inference_mode():
        assert_same_bits(reference.reference_fp32(x, w), plain, "inference mode")
    assert_same_bits(reference.reference_fp32(x, w.clone().requires_grad_()).detach(), plain, "with autograd")


def _adjacent_pairs(laid_out: torch.Tensor, dim: int) -> torch.Tensor:
    """Another order: neighbours in the layout first (a sequential-looking tree)."""
    t, dim = laid_out, dim % laid_out.dim()
    while t.shape[dim] > 1:
        t = t.unflatten(dim, (t.shape[dim] // 2, 2))
        t = t.select(dim + 1, 0) + t.select(dim + 1, 1)
    return t


def test_a_changed_order_is_seen(monkeypatch):
    """Meta-test: with another pairing the comparisons above fail (so they can)."""
    x = edge_rows(4096, torch.float32, 1)
    w = _weight(4096, torch.float32, 2)
    monkeypatch.setattr(reference, "_halve_in_place", _adjacent_pairs)
    with pytest.raises(AssertionError, match="elements differ"):
        assert_same_bits(reference.sum_of_squares_fixed_order(x), old_sum_of_squares_fixed_order(x), "perturbed")
    with pytest.raises(AssertionError, match="elements differ"):
        assert_same_bits(reference.reference_fp32(x, w), old_reference_fp32(x, w), "perturbed")
