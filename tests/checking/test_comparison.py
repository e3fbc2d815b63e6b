"""The comparison module: bit patterns, signed zeros, NaN payloads, ULP counting, margins, placement."""

from __future__ import annotations

import math

import pytest
import torch

from rmsnorm_conformance.contract import Tolerance, UlpBound
from rmsnorm_conformance.harness.checking.comparison import (
    bits,
    compare_bitwise,
    compare_within,
    same_bits,
    ulp_distance,
)


def test_bitwise_equal_tensors():
    t = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    result = compare_bitwise(t, t.clone())
    assert result.equal and result.mismatches == 0 and result.total == 32


def test_negative_zero_is_not_bitwise_equal_to_zero():
    a, b = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, -0.0]])
    assert torch.equal(a, b)  # torch says equal...
    result = compare_bitwise(a, b)
    assert not result.equal  # ...the contract does not
    assert result.first_index == (0, 1)
    assert (result.actual_bits, result.expected_bits) == ("0x00000000", "0x80000000")
    assert "1 / 2 elements" in result.describe()


def test_nan_payloads_count():
    quiet = torch.tensor([math.nan])
    other = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert torch.isnan(other).all()
    assert compare_bitwise(quiet, quiet.clone()).equal
    assert not compare_bitwise(quiet, other).equal


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_parity_ignores_nan_sign_and_payload_but_not_nan_places(dtype):
    # The patterns seen in the wild: a positive quiet NaN on the CPU, all bits set from Triton's interpreter.
    ints = {torch.float32: torch.int32}.get(dtype, torch.int16)
    all_ones = torch.tensor([-1, 0], dtype=ints).view(dtype)  # 0xffff... is a NaN, then +0.0
    quiet = torch.tensor([math.nan, 0.0], dtype=dtype)
    assert torch.isnan(all_ones[0])
    assert not compare_bitwise(all_ones, quiet).equal
    assert compare_bitwise(all_ones, quiet, nan_payloads=False).equal
    moved = torch.tensor([0.0, math.nan], dtype=dtype)
    assert not compare_bitwise(moved, quiet, nan_payloads=False).equal
    signed_zero = torch.tensor([math.nan, -0.0], dtype=dtype)
    assert not compare_bitwise(signed_zero, quiet, nan_payloads=False).equal


@pytest.mark.parametrize(("dtype", "width"), [(torch.bfloat16, 16), (torch.float16, 16), (torch.float32, 32)])
def test_bits_are_unsigned_patterns(dtype, width):
    t = torch.tensor([-1.0, 1.0], dtype=dtype)
    b = bits(t)
    assert int(b[0]) >> (width - 1) == 1 and int(b[1]) >> (width - 1) == 0


def test_dtype_and_shape_mismatch_are_reported():
    assert "dtype" in compare_bitwise(torch.zeros(2), torch.zeros(2, dtype=torch.float16)).describe()
    assert "shape" in compare_bitwise(torch.zeros(2), torch.zeros(3)).describe()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_ulp_distance_counts_representable_values(dtype):
    one = torch.tensor([1.0], dtype=dtype)
    up = torch.nextafter(one.float(), torch.tensor([2.0])).to(dtype) if dtype == torch.float32 else None
    if up is None:
        up = (bits(one) + 1).to(torch.int16).view(dtype)
    assert int(ulp_distance(up, one)) == 1
    assert int(ulp_distance(torch.tensor([0.0], dtype=dtype), torch.tensor([-0.0], dtype=dtype))) == 0
    # Across zero: the smallest positive and negative subnormals are 2 ULP apart.
    tiny = torch.tensor([1], dtype=torch.int16 if dtype != torch.float32 else torch.int32).view(dtype)
    assert int(ulp_distance(tiny, -tiny)) == 2


def test_tolerance_margin_and_worst_location():
    ref = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    actual = ref.clone()
    actual[1, 0] = 3.1  # error 0.1 where 0.01 + 0.01 * 3 = 0.04 is allowed
    r = compare_within(actual, ref, Tolerance(0.01, 0.01, ""))
    assert not r.passed and r.mismatches == 1
    assert r.worst_index == (1, 0)
    assert r.margin == pytest.approx(0.1 / 0.04, rel=1e-5)
    assert r.max_abs == pytest.approx(0.1, rel=1e-5)
    passing = compare_within(ref, ref, Tolerance(0.0, 0.0, ""))
    assert passing.passed and passing.margin == 0.0


def test_a_bound_with_terms_allows_roundings_of_the_terms_and_no_more():
    # dx = 0.0768 as the difference of terms near 400 in one element, of terms near 0.1 in the other: an order off
    # by 1.28e-4 is past atol and rtol in both, within 256 fp32 roundings of the terms only in the first.
    ref = torch.tensor([0.0768, 0.0768])
    actual = ref + 1.28e-4
    terms = torch.tensor([400.0, 0.1], dtype=torch.float64)
    bound = Tolerance(1e-4, 1e-4, "", term_roundings=256)
    r = compare_within(actual, ref, bound, terms=terms)
    assert not r.passed and r.mismatches == 1 and r.worst_index == (1,)
    err = float((actual - ref)[1])
    assert r.margin == pytest.approx(err / bound.allowed(0.0768, 0.1), rel=1e-4)
    assert bound.allowed(0.0768, 400.0) == pytest.approx(1e-4 + 1e-4 * 0.0768 + 256 * 2.0**-24 * 400)
    assert compare_within(actual[:1], ref[:1], bound, terms=terms[:1]).passed
    assert not compare_within(actual[:1], ref[:1], Tolerance(1e-4, 1e-4, "")).passed
    assert "256 fp32 roundings of the terms" in bound.describe()


def test_a_bound_with_terms_is_never_applied_without_them():
    ref = torch.ones(3)
    bound = Tolerance(1e-4, 1e-4, "", term_roundings=256)
    with pytest.raises(ValueError, match="no terms were given"):
        compare_within(ref, ref, bound)
    with pytest.raises(ValueError, match=r"terms of shape \(2,\) for a reference of shape \(3,\)"):
        compare_within(ref, ref, bound, terms=torch.ones(2))


def test_nonfinite_placement_is_checked():
    ref = torch.tensor([math.nan, 1.0, math.inf])
    assert compare_within(ref.clone(), ref, Tolerance(1, 1, "")).passed
    moved = torch.tensor([1.0, math.nan, math.inf])
    r = compare_within(moved, ref, Tolerance(1, 1, ""))
    assert not r.passed and r.nonfinite_mismatches == 2 and r.first_nonfinite_index == (0,)
    sign = compare_within(torch.tensor([math.nan, 1.0, -math.inf]), ref, Tolerance(1, 1, ""))
    assert not sign.passed


def test_ulp_bound_against_correctly_rounded_value():
    oracle = torch.tensor([1.0 + 2**-9], dtype=torch.float64)  # between two bf16 values
    near = torch.tensor([1.0], dtype=torch.bfloat16)
    far = torch.tensor([1.0 + 2**-6], dtype=torch.bfloat16)
    assert compare_within(near, oracle, UlpBound(1, ""), correctly_rounded=oracle).passed
    r = compare_within(far, oracle, UlpBound(1, ""), correctly_rounded=oracle)
    assert not r.passed and r.max_ulp >= 2


def test_reference_beyond_the_output_range_expects_inf():
    """An fp16 output can only be Inf where the true value exceeds 65504: that is correct, not a breach."""
    reference = torch.tensor([70000.0, -1.0e6, 1.0])
    actual = torch.tensor([math.inf, -math.inf, 1.0], dtype=torch.float16)
    assert compare_within(actual, reference, Tolerance(1e-3, 1e-3, "")).passed
    finite_but_wrong = torch.tensor([65504.0, -math.inf, 1.0], dtype=torch.float16)
    assert not compare_within(finite_but_wrong, reference, Tolerance(1e-3, 1e-3, "")).passed



@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("layout", ["whole", "rows_from_one", "odd_width", "column_slice", "transposed"])
def test_same_bits_sees_one_flipped_bit_anywhere(dtype, layout):
    """same_bits (whole 64-bit words where sizes and offsets allow, the dtype's own integer view elsewhere)
    against one flipped bit at every element of the view, and -0.0 against +0.0."""
    base = torch.randn(6, 12, generator=torch.Generator().manual_seed(0)).to(dtype)
    view = {"whole": lambda t: t, "rows_from_one": lambda t: t[1:], "odd_width": lambda t: t[:, :5],
            "column_slice": lambda t: t[:, 3:], "transposed": lambda t: t.t()}[layout]
    a = view(base)
    assert same_bits(a, view(base.clone()))
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}[base.element_size()]
    for index in range(a.numel()):
        target = view(base.clone())
        position = tuple(int(i) for i in torch.unravel_index(torch.tensor(index), target.shape))
        target.view(ints)[position] ^= 1
        assert not same_bits(a, target), index
    zeros = torch.zeros(8, dtype=dtype)
    assert not same_bits(zeros, -zeros)
    assert not same_bits(a, a.to(torch.float32 if dtype == torch.float64 else torch.float64))
