"""The fp8 part of the contract: the E4M3FN facts and references, fp8 bits in the comparisons, the backend protocol's
fp8 methods, and the planted fp8 defects of zoo/fp8.py caught on the CPU under the rule each breaks
(the native backend and a correct vLLM-order control passing)."""

from __future__ import annotations

import math
import re
from types import MappingProxyType

import pytest
import torch

from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.contract import ALL_RULES, FP8_RULES, FP8_VARIANTS, VARIANTS
from rmsnorm_conformance.contract.fp8 import (
    E4M3_MAX,
    FP8_DTYPE,
    MIN_NORMAL,
    MIN_SCALE,
    SUBNORMAL_SPACING,
    dynamic_scale,
    quantize,
    reference_fp8_dynamic,
    reference_fp8_fused_add_dynamic,
    reference_fp8_fused_add_static,
    reference_fp8_static,
    ulp,
)
from rmsnorm_conformance.contract.reference import reference_fp32
from rmsnorm_conformance.harness.checking.comparison import compare_bitwise, ulp_distance
from rmsnorm_conformance.harness.drawing.cases import Batch
from rmsnorm_conformance.harness.running.backend import Backend, BackendError, DeclarationError
from rmsnorm_conformance.suites.rule_index import rule_tests
from rmsnorm_conformance.suites.test_fp8 import SCALE_SHIFTS, STATIC, static_scale
from rmsnorm_conformance.zoo.fp8 import FP8_DEFECTS, VllmOrderFp8, unsaturated_cast


def _rows(dtype=torch.bfloat16, rows=4, dim=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, dim, generator=gen).to(dtype), torch.randn(dim, generator=gen).to(dtype)


# --- the format and the references ---------------------------------------------------------------------------


def test_e4m3fn_facts_match_torch():
    info = torch.finfo(FP8_DTYPE)
    assert info.max == E4M3_MAX and info.tiny == MIN_NORMAL
    smallest = torch.tensor([1], dtype=torch.uint8).view(FP8_DTYPE).float()
    assert float(smallest) == SUBNORMAL_SPACING
    assert MIN_SCALE == 1 / (448 * 512)
    assert [ulp(v) for v in (0.0, 0.01, MIN_NORMAL, 1.0, 1.9, 2.0, 448.0)] == [2**-9, 2**-9, 2**-9, 0.125, 0.125,
                                                                                 0.25, 32.0]
    with pytest.raises(ValueError, match="outside E4M3FN's finite range"):
        ulp(500.0)


def test_torch_cast_saturates_on_the_cpu_but_an_unsaturated_cast_gives_nan():
    """torch 2.13's CPU cast clamps out-of-range values (even Inf) to +-448; a kernel's non-saturating conversion
    gives NaN past 464, which the defect writes out, and the reference clamps before its one rounding."""
    values = torch.tensor([447.0, 464.0, 465.0, 1e6, -1e6])
    assert torch.tensor([1e6, math.inf]).to(FP8_DTYPE).float().tolist() == [448.0, 448.0]
    assert unsaturated_cast(values).float().isnan().tolist() == [False, False, True, True, True]
    assert quantize(values, torch.tensor(1.0)).float().tolist() == [448.0, 448.0, 448.0, 448.0, -448.0]
    # The one rounding is to nearest, ties to even, subnormals included: the contract's "correctly rounded".
    ties = torch.tensor([1.0625, 1.1875, 2.0**-10, 3 * 2.0**-11, -(2.0**-10)])
    assert quantize(ties, torch.tensor(1.0)).float().tolist() == [1.0, 1.25, 0.0, 2.0**-9, -0.0]


def test_the_static_reference_quantizes_the_fp32_row_once_and_saturates():
    x, w = _rows()
    y32 = reference_fp32(x, w, 1e-6)
    scale = torch.tensor([float(y32.abs().max()) / 448 / 4])  # the top quarter of the range saturates
    q = reference_fp8_static(x, w, 1e-6, scale)
    assert q.dtype == FP8_DTYPE and q.shape == x.shape
    assert torch.equal(q.view(torch.uint8), (y32 / scale).clamp(-448, 448).to(FP8_DTYPE).view(torch.uint8))
    assert bool((q.float().abs() == 448).any())
    with pytest.raises(ValueError, match="one float32 scale"):
        reference_fp8_static(x, w, 1e-6, torch.tensor([1.0, 2.0]))


def test_the_dynamic_reference_takes_each_rows_own_scale_and_floors_a_zero_row():
    x, w = _rows(rows=3)
    x[1] = 0
    q, scale = reference_fp8_dynamic(x, w, 1e-6)
    y32 = reference_fp32(x, w, 1e-6)
    assert scale.shape == (3, 1) and scale.dtype == torch.float32
    assert float(scale[1]) == pytest.approx(MIN_SCALE) and not bool(q[1].float().any())
    assert float(scale[0]) == float(y32[0].abs().max() / 448)
    assert float(q[0].float().abs().max()) == 448  # the row's largest |y| maps to 448 exactly
    three_d, scale3 = reference_fp8_dynamic(x.view(1, 3, 64), w, 1e-6)
    assert scale3.shape == (1, 3, 1) and torch.equal(three_d.view(3, 64).view(torch.uint8), q.view(torch.uint8))
    assert torch.isnan(dynamic_scale(torch.tensor([[1.0, math.nan]]))).all()


def test_the_fused_add_references_quantize_the_stored_residual():
    x, w = _rows()
    residual, _ = _rows(seed=1)
    stored = (x.float() + residual.float()).to(x.dtype)
    scale = torch.tensor([0.01])
    q, residual_out = reference_fp8_fused_add_static(x, residual, w, 1e-6, scale)
    assert torch.equal(residual_out, stored)
    assert torch.equal(q.view(torch.uint8), reference_fp8_static(stored, w, 1e-6, scale).view(torch.uint8))
    q, s, residual_out = reference_fp8_fused_add_dynamic(x, residual, w, 1e-6)
    q_alone, s_alone = reference_fp8_dynamic(stored, w, 1e-6)
    assert torch.equal(q.view(torch.uint8), q_alone.view(torch.uint8)) and torch.equal(s, s_alone)


def test_fp8_bits_compare_and_count_ulps():
    a = torch.tensor([1.0, -2.0, 0.0, 448.0]).to(FP8_DTYPE)
    b = torch.tensor([1.125, -2.0, -0.0, 416.0]).to(FP8_DTYPE)
    assert compare_bitwise(a, a).equal
    result = compare_bitwise(a, b)
    assert result.mismatches == 3 and result.actual_bits == "0x38" and result.expected_bits == "0x39"
    assert ulp_distance(a, b).tolist() == [1, 0, 0, 1]  # -0 and +0 are one value apart by order: zero


def test_static_scales_saturate_at_the_low_shift_and_reach_subnormals_at_the_high_one():
    batch = Batch(dim=4096, rows=4, dtype="bfloat16")
    x, w = batch.x(), batch.w()
    y32 = reference_fp32(x, w, batch.eps)
    low = static_scale(Batch(dim=4096, rows=4, dtype="bfloat16", seed=0), STATIC, [x], w)
    high = static_scale(Batch(dim=4096, rows=4, dtype="bfloat16", seed=len(SCALE_SHIFTS) - 1), STATIC, [x], w)
    assert SCALE_SHIFTS[0] < 0 < SCALE_SHIFTS[-1]
    assert int(((y32 / low).abs() > 448).sum()) > 0
    assert int(((y32 / high).abs() < MIN_NORMAL).sum()) > 0


# --- the protocol ----------------------------------------------------------------------------------------------


def test_the_fp8_methods_are_variants_and_native_offers_them_all():
    assert set(FP8_VARIANTS) <= set(VARIANTS) and set(FP8_RULES) <= set(ALL_RULES)
    backend = Backend(NativeRMSNormOp())
    assert all(backend.offers(m) for m in FP8_VARIANTS)
    assert backend.fp8_rounding_classes == dict.fromkeys(FP8_VARIANTS, "fp32_once")


def test_a_malformed_fp8_rounding_class_is_a_declaration_error():
    class Typo(NativeRMSNormOp):
        fp8_rounding_class = "fp32"

    class WrongEntry(NativeRMSNormOp):
        fp8_rounding_class = MappingProxyType({"forward": "fp32_once"})  # forward has no fp8 output

    for impl in (Typo(), WrongEntry()):
        with pytest.raises(DeclarationError, match="fp8_rounding_class"):
            Backend(impl)


def test_a_dynamic_entry_point_returning_one_tensor_is_a_backend_error():
    class OneOutput(NativeRMSNormOp):
        def forward_fp8_dynamic(self, x, weight, eps=1e-6):
            return reference_fp8_dynamic(x, weight, eps)[0]

    x, w = _rows()
    with pytest.raises(BackendError, match=r"not \(q, scale\)"):
        Backend(OneOutput()).forward_fp8_dynamic(x, w, 1e-6)


# --- the planted defects, caught on the CPU ----------------------------------------------------------------


def test_the_fp8_defects_are_documented_and_name_real_rules():
    index = rule_tests()
    assert {r.id for r in FP8_RULES} <= set(index), "every fp8 rule needs a suite test"
    for defect in FP8_DEFECTS:
        for rule_id in (defect.breaks, *getattr(defect, "also_breaks", ())):
            assert rule_id in index, f"{defect.__name__} breaks an unknown rule {rule_id!r}"
        doc = defect.__doc__ or ""
        assert doc.startswith(f"Breaks {defect.breaks}:"), f"{defect.__name__}'s docstring must name its rule first"
        assert len(doc.split()) >= 25, f"{defect.__name__}'s docstring must say which real kernel bug it imitates"


# Each defect's own rule is held by tests/detection/test_detection.py, as for the whole zoo; here the rules it also
# breaks.
CAUGHT = [(d, r) for d in FP8_DEFECTS for r in getattr(d, "also_breaks", ())]


@pytest.mark.parametrize(("defect", "rule_id"), CAUGHT, ids=lambda v: getattr(v, "__name__", v))
def test_fp8_defect_is_caught_in_the_rule_it_breaks(run, defect, rule_id):
    """The fp8 suite's tests of the rule fail for the defect under the ci sweep in bf16, naming that rule only."""
    result = run("--pyargs", "rmsnorm_conformance.suites", f"--rule={rule_id}",
                 f"--backend=rmsnorm_conformance.zoo.fp8:{defect.__name__}", "--device=cpu", "--dtype=bfloat16",
                 "--sweep=ci", "-x")
    out = result.stdout.str()
    assert result.ret == 1, f"{defect.__name__} was not caught by {rule_id}:\n{out[-3000:]}"
    assert set(re.findall(r"contract rule (\S+) \(", out)) == {rule_id}, out[-3000:]
    assert re.search(rf"^FAILED \S*test_fp8\.py::test_fp8_\w+\[{defect.name}-cpu-bfloat16\]", out, re.M), out[-3000:]


def test_native_and_a_vllm_order_kernel_pass_the_fp8_bounds(run):
    """The ground truth, and a kernel that quantizes through x's dtype as vLLM's do (declaring that class), meet the
    output bound, the scale bound and their declared rounding class: the bounds do not fail correct kernels."""
    result = run("--pyargs", "rmsnorm_conformance.suites.test_fp8",
                 f"--backend=native,rmsnorm_conformance.zoo.fp8:{VllmOrderFp8.__name__}", "--device=cpu",
                 "--dtype=bfloat16,float16", "--sweep=ci", "--max-examples=6", "-k", "output or scale or rounding")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["RMSNorm conformance: PASS*"])
