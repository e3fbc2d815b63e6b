"""Declared capabilities, the variants' references and the rounding-class vote: the harness's own checks of what
backends declare (dtype pairs, in-place fused add, offset dtype, rounding class) and of the references the
variant suites hold them to."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from rmsnorm_conformance.contract import ROUNDING_CLASSES
from rmsnorm_conformance.contract.inputs import check_in_place, check_inputs, check_residual
from rmsnorm_conformance.contract.reference import (
    offset_scale,
    reference_fp32,
    reference_fused_add,
    reference_offset,
    reference_unweighted,
    rounding_class_outputs,
)
from rmsnorm_conformance.harness.checking import rounding
from rmsnorm_conformance.harness.drawing.cases import Batch
from rmsnorm_conformance.harness.drawing.replay import parse_case
from rmsnorm_conformance.harness.reporting.render import render_markdown
from rmsnorm_conformance.harness.running.backend import Backend, BackendError, same_layout_copy
from rmsnorm_conformance.harness.vocabulary.records import Collector
from rmsnorm_conformance.zoo import EngineStyleRMSNorm

# What these runs check needs no large batch: the threshold plans and sweeps at a CPU budget's 1/32.
SMALL = "--max-elements=262144"
ROOT = Path(__file__).resolve().parents[2]
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32


def _rows(dtype=BF16, rows=8, dim=256, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, dim, generator=gen).to(dtype), torch.randn(dim, generator=gen)


# --- inputs and references ---------------------------------------------------------------------------------


def test_the_reference_takes_the_contract_pairs_and_refuses_the_others():
    x, w = _rows()
    reference_fp32(x, w, 1e-6)  # bf16 x with an fp32 weight: a pair the contract defines
    with pytest.raises(TypeError, match=r"float32.*bfloat16|bfloat16.*float32"):
        reference_fp32(x.float(), w.to(BF16), 1e-6)  # fp32 x with a bf16 weight: not in the contract
    with pytest.raises(TypeError, match="takes weight of dtype bfloat16 with x of dtype bfloat16"):
        check_inputs(x, w, 1e-6, dtype_pairs=((BF16, BF16),))


def test_mixed_precision_reference_multiplies_the_fp32_weight_and_rounds_once():
    x, w = _rows()
    y = reference_fp32(x, w, 1e-6).to(BF16)
    rounded_first = reference_fp32(x, w.to(BF16), 1e-6).to(BF16)
    assert not torch.equal(y, rounded_first), "the fp32 weight must not be rounded to bf16 first"
    x64 = x.double()
    exact = x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w.double()
    assert (y.double() - exact).abs().max() <= 2 ** -8 * exact.abs().max()


def test_fused_add_reference_rounds_the_residual_once_and_normalizes_it_as_stored():
    x, _ = _rows(seed=1)
    residual, w = _rows(seed=2)
    y32, residual_out = reference_fused_add(x, residual, w.to(BF16))
    assert residual_out.dtype == BF16
    assert torch.equal(residual_out, (x.float() + residual.float()).to(BF16))
    assert torch.equal(y32, reference_fp32(residual_out, w.to(BF16)))
    _, kept = reference_fused_add(x, residual.float(), w.to(BF16))  # an fp32 residual stays fp32
    assert kept.dtype == F32 and torch.equal(kept, x.float() + residual.float())


def test_residual_checks_name_what_is_wrong():
    x, _ = _rows()
    with pytest.raises(ValueError, match=r"\(8, 256\).*\(8, 255\)"):
        check_residual(x, x[:, :255])
    with pytest.raises(TypeError, match="float16"):
        check_residual(x, x.to(F16))
    with pytest.raises(TypeError, match="float32"):
        check_residual(x, x.float())  # fp32 only where the backend declares it
    check_residual(x, x.float(), fp32_residual=True)


def test_in_place_checks_refuse_shared_memory_and_nothing_else():
    """fused_add_ writes into x and residual: a location written twice (an expanded tensor, x and residual
    overlapping) is refused with its name; separate tensors, interleaved views of one buffer included, are taken."""
    buf = torch.randn(16, 256)
    check_in_place(buf[:8], buf[8:])  # adjacent rows of one buffer: no element shared
    check_in_place(buf[:8], buf[:8].clone())
    check_in_place(buf[:0], buf[:0])  # nothing to write
    with pytest.raises(ValueError, match="x and residual, which overlap in memory"):
        check_in_place(buf[:8], buf[:8])
    with pytest.raises(ValueError, match="overlap in memory"):
        check_in_place(buf[:9], buf[8:])
    with pytest.raises(ValueError, match="overlap in memory"):
        check_in_place(buf[:8].t(), buf[7:15].t())  # transposed views meet in row 7
    with pytest.raises(ValueError, match=r"writes into residual, whose elements share memory \(strides \(0, 1\)"):
        check_in_place(buf[:8], buf[8].expand(8, 256))


def test_offset_reference_forms_one_plus_weight_where_declared():
    x, w = _rows()
    w16 = w.to(BF16)
    fp32_offset = reference_offset(x, w16, 1e-6, "float32")
    assert torch.equal(fp32_offset, reference_fp32(x.float(), 1.0 + w16.float()))
    weight_offset = reference_offset(x, w16, 1e-6, "weight")
    assert torch.equal(weight_offset, reference_fp32(x.float(), (1 + w16).float()))
    assert not torch.equal(fp32_offset.to(BF16), weight_offset.to(BF16))
    assert torch.equal(offset_scale(w, "weight"), offset_scale(w, "float32")), "an fp32 weight: the same either way"
    with pytest.raises(ValueError, match="offset_dtype"):
        offset_scale(w, "bfloat16")


def test_unweighted_reference_is_the_plain_normalization():
    x, _ = _rows()
    ones = torch.ones(x.shape[-1], dtype=BF16)
    assert torch.equal(reference_unweighted(x), reference_fp32(x, ones))


def test_rounding_classes_are_the_reference_and_the_hugging_face_order():
    x, w = _rows()
    classes = rounding_class_outputs(x, w.to(BF16).float(), 1e-6, BF16)
    assert set(classes) == set(ROUNDING_CLASSES)
    assert torch.equal(classes["product_fp32"], reference_fp32(x, w.to(BF16)).to(BF16))
    ones = torch.ones_like(w).to(BF16)
    hf = (w.to(BF16) * reference_fp32(x, ones).to(BF16))  # Hugging Face: weight * hidden.to(input_dtype)
    assert torch.equal(classes["normalized_rounded"], hf)
    same = rounding_class_outputs(x.float(), w, 1e-6, F32)
    assert torch.equal(same["product_fp32"], same["normalized_rounded"]), "fp32 output: one class"


# --- the vote ----------------------------------------------------------------------------------------------


def test_vote_counts_only_the_elements_that_tell_the_conventions_apart():
    mine = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=BF16)
    theirs = torch.tensor([1.0, 2.5, 3.5, 4.5], dtype=BF16)
    assert rounding.vote(mine, [mine], [theirs]) == rounding.Vote(3, 3, 0)
    assert rounding.vote(theirs, [mine], [theirs]).breached
    one_stray = torch.tensor([1.0, 2.5, 3.0, 4.0], dtype=BF16)
    assert not rounding.vote(one_stray, [mine], [theirs]).breached, "one element is within a correct kernel's noise"
    assert rounding.vote(mine, [mine], [mine]) == rounding.Vote(0, 0, 0)


def test_a_different_reduction_order_keeps_its_class_but_the_other_order_does_not():
    """The reason the vote works: another reduction order moves bits on a few elements, another rounding order
    on many of those the classes disagree on."""
    from rmsnorm_conformance.zoo import sum_of_squares_by_lanes

    x, w = _rows(rows=64, dim=4096)
    w16 = w.to(BF16)
    classes = rounding.forward_classes(x, w16, 1e-6)
    x32 = x.float()
    other_order = ((x32 / torch.sqrt(sum_of_squares_by_lanes(x32) / 4096 + 1e-6)) * w16.float()).to(BF16)
    kept = rounding.vote(other_order, [classes["product_fp32"]], [classes["normalized_rounded"]])
    assert kept.discriminating > 1000 and kept.other <= 1 and not kept.breached
    swapped = rounding.vote(classes["normalized_rounded"], [classes["product_fp32"]], [classes["normalized_rounded"]])
    assert swapped.breached


def test_row_matches_and_distinguishable():
    x, w = _rows()
    classes = rounding.forward_classes(x, w.to(BF16), 1e-6)
    counts = rounding.row_matches(classes["product_fp32"], classes)
    assert counts["product_fp32"] == 8 and counts["normalized_rounded"] < 8
    assert rounding.distinguishable(classes)
    # With no weight the classes that round once coincide; only rounding 1/rms first stands apart.
    unweighted = rounding.unweighted_classes(x, 1e-6)
    assert not rounding.distinguishable({k: unweighted[k] for k in ("product_fp32", "normalized_rounded")})
    assert rounding.distinguishable(unweighted)


# --- declarations ------------------------------------------------------------------------------------------


class _Minimal:
    name = "minimal"

    def forward(self, x, weight, eps=1e-6):
        return x


def _declaring(**attributes):
    return type("Declaring", (_Minimal,), attributes)()


def test_default_declarations():
    b = Backend(_Minimal())
    assert b.dtype_pairs == ((F32, F32), (BF16, BF16), (F16, F16))
    assert not b.fused_add_in_place and b.offset_dtype == "float32" and b.rounding_classes == {}
    assert not any(b.offers(v) for v in ("fused_add", "forward_offset", "forward_unweighted"))


def test_declared_pairs_give_the_dtypes_and_the_primary_weight_first():
    b = Backend(_declaring(dtype_pairs=[(BF16, F32), (BF16, BF16)]))
    assert b.dtypes == (BF16,)
    assert b.weight_dtypes(BF16) == (BF16, F32)
    only_fp32 = Backend(_declaring(dtype_pairs=[(F16, F32)]))
    assert only_fp32.weight_dtypes(F16) == (F32,)


@pytest.mark.parametrize(("attribute", "value"), [
    ("dtype_pairs", [(F32, BF16)]),        # not a pair the contract defines
    ("dtype_pairs", [BF16]),               # not a pair at all
    ("dtype_pairs", 3),
    ("fused_add_in_place", "yes"),
    ("fused_add_fp32_residual", 1),
    ("offset_dtype", "bfloat16"),
    ("rounding_class", "round_twice"),
    ("rounding_class", {"backward": "product_fp32"}),
])
def test_malformed_declarations_name_the_attribute(attribute, value):
    with pytest.raises(ValueError, match=rf"backend 'minimal': {attribute}=.* is malformed"):
        Backend(_declaring(**{attribute: value}))


def test_declared_dtypes_narrow_the_pairs():
    """A subclass that declares fewer dtypes than the pairs it inherits takes only the pairs of those dtypes."""
    narrowed = Backend(_declaring(dtypes=(BF16,), dtype_pairs=[(BF16, BF16), (BF16, F32), (F16, F32)]))
    assert narrowed.dtype_pairs == ((BF16, BF16), (BF16, F32)) and narrowed.dtypes == (BF16,)


def test_a_rounding_class_is_one_class_or_a_mapping():
    assert Backend(_declaring(rounding_class="normalized_rounded")).rounding_classes == dict.fromkeys(
        ("forward", "fused_add", "forward_offset", "forward_unweighted"), "normalized_rounded")
    claims = Backend(_declaring(rounding_class={"forward_offset": "product_fp32"})).rounding_classes
    assert claims == {"forward_offset": "product_fp32"}


def test_in_place_fused_add_is_read_from_copies_laid_out_as_the_inputs():
    backend = Backend(EngineStyleRMSNorm())
    x, w = _rows()
    residual, _ = _rows(seed=3)
    wide = torch.zeros(8, 300, dtype=BF16)
    wide[:, 7:263] = x
    view = wide[:, 7:263]
    before_x, before_r = view.clone(), residual.clone()
    y, residual_out = backend.fused_add(view, residual, w.to(BF16), 1e-6)
    assert torch.equal(view, before_x) and torch.equal(residual, before_r), "the caller's tensors stay as they were"
    assert y.stride() == view.stride() and y.storage_offset() == view.storage_offset()
    assert torch.equal(residual_out, (x.float() + residual.float()).to(BF16))


def test_same_layout_copy_keeps_strides_offset_and_values():
    t = torch.arange(40.0).view(5, 8)[1:, 2:6]
    c = same_layout_copy(t)
    assert (c.stride(), c.storage_offset(), c.untyped_storage().nbytes()) == (
        t.stride(), t.storage_offset(), t.untyped_storage().nbytes())
    assert torch.equal(c, t) and c.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()


def test_a_fused_add_that_returns_nothing_must_declare_in_place():
    class Silent(_Minimal):
        def fused_add(self, x, residual, weight, eps=1e-6):
            residual.add_(x)

    x, w = _rows()
    # A protocol breach of the backend (BackendError), never a TypeError that could read as a refused input.
    with pytest.raises(BackendError, match="fused_add_in_place"):
        Backend(Silent()).fused_add(x, x.clone(), w, 1e-6)


# --- cases, parametrization and the report ---------------------------------------------------------------


def test_batch_dtypes_default_to_x_and_survive_replay():
    plain = Batch(dim=8, rows=2, dtype="bfloat16")
    assert "weight_dtype" not in repr(plain) and plain.weight_dtype == plain.residual_dtype == "bfloat16"
    mixed = Batch(dim=8, rows=2, dtype="bfloat16", weight_dtype="float32", residual_dtype="float32")
    assert parse_case(repr(mixed)) == mixed
    assert mixed.w().dtype == F32 and mixed.residual().dtype == F32 and mixed.x().dtype == BF16
    with pytest.raises(ValueError, match="weight_dtype='int8' is unknown"):
        parse_case("AccuracyCase(batch=Batch(dim=8, rows=2, dtype='bfloat16', weight_dtype='int8'))")


def test_rounding_table_folds_shapes_and_says_indistinguishable_in_fp32():
    c = Collector()
    for dtype, distinct, matches in (("bfloat16", True, {"product_fp32": 3, "normalized_rounded": 1}),
                                     ("bfloat16", True, {"product_fp32": 1, "normalized_rounded": 0}),
                                     ("float32", False, {"product_fp32": 4, "normalized_rounded": 4})):
        c.rounding.append({"backend": "b", "device": "cpu", "dtype": dtype, "variant": "forward", "rows": 4,
                           "declared": "", "matches": matches, "distinguishable": distinct})
    md = render_markdown(Collector.from_json(c.to_json()))
    assert re.search(r"\| b +\| cpu +\| bfloat16 +\| forward +\| +8 +\| product_fp32 50%; normalized_rounded 12% "
                     r"+\| product_fp32 ", md)
    assert re.search(r"\| float32 +\| forward +\| +4 +\| .* \| indistinguishable ", md)


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return lambda *args: pytester.runpytest_subprocess("--sweep=ci", SMALL, "-p", "no:cacheprovider", *args)


def test_a_malformed_declaration_is_a_usage_error_naming_it(run, pytester):
    pytester.makepyfile(mine="""
        import torch
        class Mine:
            name = "mine"
            dtype_pairs = [(torch.float32, torch.bfloat16)]
            def forward(self, x, weight, eps=1e-6):
                return x
    """)
    result = run("--pyargs", "rmsnorm_conformance.suites", "--backend=mine:Mine", "--device=cpu")
    assert result.ret == 4
    assert "dtype_pairs=" in result.stderr.str() and "is malformed" in result.stderr.str()


def test_declared_pairs_are_swept_and_named_in_ids_and_reports(run, pytester):
    result = run(str(ROOT / "suites" / "test_axis_b.py"), "--backend=native", "--device=cpu", "--dtype=bfloat16",
                 "-k", "test_output", "-v", "--report=r.json")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*test_output?native-cpu-bfloat16? PASSED*",
                                 "*test_output?native-cpu-bfloat16-w_float32? PASSED*"])
    md = render_markdown(Collector.from_json(json.loads((pytester.path / "r.json").read_text())))
    assert "bfloat16-w_float32" in md


def test_a_variant_the_backend_does_not_offer_is_skipped_with_its_reason(run):
    result = run(str(ROOT / "suites" / "test_variants.py"), "--backend=rmsnorm_conformance.zoo:CudaOnly",
                 "--device=cpu")
    assert result.ret == 5  # CudaOnly cannot run here at all: nothing ran, the run does not pass
    result = run(str(ROOT / "suites" / "test_variants.py"), "--backend=torch_rms_norm", "--device=cpu",
                 "--dtype=float32", "-k", "fused_add_residual or offset_output")
    assert result.ret == 5, "skips alone never pass"
    out = result.stdout.str()  # the reasons are summed up, one line each, in no promised order
    assert "torch_rms_norm does not offer fused_add" in out and "torch_rms_norm does not offer forward_offset" in out
