"""Refused inputs end to end: a kernel that raises a clear ValueError on a strided weight reads as refused (its own
table, its limits in "Pick a kernel"), passes the default gate and fails under --strict-interface; the same kernel
declaring ``layouts=("contiguous",)`` has those cases not run, with the reason; a kernel that returns wrong bits on
a strided weight stays a numerics failure."""

from __future__ import annotations

import json

import pytest
import torch

from rmsnorm_conformance.harness.running.adapters import adapt, rmsnorm_backend
from rmsnorm_conformance.harness.running.backend import Backend, DeclarationError
from rmsnorm_conformance.harness.running.limits import NOT_RUN_PREFIX, InputLimits, layout_of
from rmsnorm_conformance.harness.vocabulary.records import Check, Collector
from rmsnorm_conformance.zoo import DeclaresMaxDim4096

# What these runs check needs no large batch: the threshold plans and sweeps at a CPU budget's 1/32.
SMALL = "--max-elements=262144"
# test_bounds calls every entry point with a strided weight in every case; test_output draws contiguous weights
# too, so the kernel also runs checks it passes.
TESTS = ["rmsnorm_conformance.suites.test_bounds::test_bounds", "rmsnorm_conformance.suites.test_axis_b::test_output"]
ARGS = ["--pyargs", *TESTS, "--device=cpu", "--dtype=float32", "--sweep=ci", "--max-examples=3", SMALL]
STRIDED_CASE = ("AccuracyCase(batch=Batch(dim=64, rows=4, dtype='float32', values='normal', weight='normal', "
                "eps=1e-06, seed=0, weight_layout='strided'))")


def test_a_refused_strided_weight_reads_refused_and_gates_only_when_strict(run, pytester):
    backend = "--backend=rmsnorm_conformance.zoo:RefusesStridedWeight"
    lenient = run(*ARGS, backend, "--report=lenient.json", "--report=lenient.md")
    assert lenient.ret == 0, lenient.stdout.str()[-3000:]
    report = json.loads((pytester.path / "lenient.json").read_text())
    assert report["verdict"] == "PASS" and report["totals"]["failed_checks"] == 0
    refused = report["refused"]
    assert refused and {e["feature"] for e in refused} == {"strided weight"}
    assert all(e["exception"].startswith("ValueError: weights must be contiguous") and not e["gating"]
               for e in refused)
    assert all("weight [64] float32 strided" in e["input"] or "strided (stride 2)" in e["input"] for e in refused)
    # Not a breach of the rule the case checked, and not a passed check either: no summary holds a failure.
    assert not any(s["failures"] or s["warnings"] for s in report["summaries"])
    (row,) = report["pick"]["rows"]
    assert row["verdict"] == "PASS" and row["limits"] == "refused: strided weight (ValueError)"
    markdown = (pytester.path / "lenient.md").read_text()
    assert "## Refused inputs" in markdown and "refused: strided weight (ValueError)" in markdown
    lenient.stdout.fnmatch_lines(["RMSNorm conformance: PASS*refused inputs*", "Interface warnings and refused inputs*",
                                  "refuses_strided_weight*refused:*"])

    strict = run(*ARGS, backend, "--strict-interface", "--report=strict.json")
    assert strict.ret == 1
    report = json.loads((pytester.path / "strict.json").read_text())
    assert report["verdict"] == "FAIL" and all(e["gating"] for e in report["refused"])
    assert {o["rule"] for o in report["outcomes"].values() if o["outcome"] == "failed"} == {"refused"}
    assert not any(s["failures"] for s in report["summaries"])  # still no numerics or interface breach
    strict.stdout.fnmatch_lines(["*refused input (fails under --strict-interface)*ValueError*"])


def test_declared_layouts_are_not_run_with_the_reason(run, pytester):
    result = run(*ARGS, "--backend=rmsnorm_conformance.zoo:DeclaresContiguousLayouts", "--report=declared.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    report = json.loads((pytester.path / "declared.json").read_text())
    assert report["verdict"] == "PASS" and report["refused"] == []
    # Declared limits are the backend's scope, not a selection: they do not make the run partial.
    assert not any("declared limits" in line for line in report["selection"]["full_gate_adds"])
    skipped = [e for e in report["not_run"] if e["reason"].startswith(NOT_RUN_PREFIX)]
    assert skipped and all(e["limits"] == "layouts contiguous" for e in skipped)
    assert any("weight strided" in e["reason"] for e in skipped)
    # The layouts it takes are still checked: guard zones held on every call it was given.
    assert sum(s["checks"] for s in report["summaries"] if s["rule"] == "semantics.bounds") > 0
    (row,) = report["pick"]["rows"]
    assert row["limits"] == "declares layouts contiguous"


def test_a_declared_max_dim_holds_in_fresh_processes_and_in_the_cross_backend_table(run, pytester):
    """The first calls at the threshold dims past a declared max_dim are not run (a fresh process makes none of
    them), and the cross-backend table compares a kernel only at the shapes it takes; it failed both before (a
    first call raising past the limit; the table's 64x8192 raising for the whole test)."""
    result = run("--pyargs", "rmsnorm_conformance.suites.test_axis_a::test_first_call",
                 "rmsnorm_conformance.suites.test_parity", "--device=cpu", "--dtype=float32", SMALL,
                 "--backend=native,rmsnorm_conformance.zoo:DeclaresMaxDim4096", "--report=max_dim.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    report = json.loads((pytester.path / "max_dim.json").read_text())
    assert report["verdict"] == "PASS" and report["refused"] == []
    skipped = [e for e in report["not_run"] if e["reason"].startswith(NOT_RUN_PREFIX)]
    assert skipped and all("max_dim=4096" in e["reason"] and e["limits"] == "dim 1–4096"
                           for e in skipped)
    assert {e["backend"] for e in skipped} == {"declares_max_dim_4096"}
    # The first calls it takes were made and compared: 4096, 128 and 1000, each entry point.
    first = [s for s in report["summaries"] if s["rule"] == "axis_a.first_call" and s["backend"] ==
             "declares_max_dim_4096"]
    assert first and all(s["checks"] and not s["failures"] for s in first)
    pairs = [p for p in report["parity"] if p["pair"] == "native / declares_max_dim_4096"]
    assert pairs and {p["dim"] for p in pairs} == {4096, 128, 1000}
    assert all(p["equal"] == p["total"] for p in pairs)


class UndeclaredMaxDim(DeclaresMaxDim4096):
    """The same kernel without the declaration: past 4096 it raises where the table asks it."""

    name = "undeclared_max_dim"
    max_dim = None


def test_a_correct_kernel_that_refuses_wide_rows_passes_with_its_refusals_named(run, pytester):
    """The kernel of issue 65: correct, a clean ValueError past 4096 and no max_dim declared. Its first calls past
    4096 and the cross-backend table's 64x8192 are refused (before, its first calls failed and the whole table failed
    naming it); both target dims were checked, so it passes, exit 0, its refusals listed as its limits."""
    result = run("--pyargs", "rmsnorm_conformance.suites.test_axis_a::test_first_call",
                 "rmsnorm_conformance.suites.test_parity", "--device=cpu", "--dtype=float32", SMALL,
                 "--backend=native,tests.checking.test_refused:UndeclaredMaxDim", "--report=wide.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    report = json.loads((pytester.path / "wide.json").read_text())
    assert report["verdict"] == "PASS" and report["verdict_label"] == "PASS (partial)"
    assert not [o for o in report["outcomes"].values() if o["outcome"] in ("failed", "error")]
    # Folded by kind (entry point, dim, exception type): the table's 8192 with the first calls' of forward.
    refused = {(e["entry"], e["feature"]): e["count"] for e in report["refused"]
               if e["backend"] == "undeclared_max_dim"}
    assert {("forward", "dim 5120"), ("forward_fp32", "dim 8192")} <= set(refused), refused
    assert all(int(feature.split()[1]) > 4096 for _, feature in refused) and refused["forward", "dim 8192"] == 2
    assert all(e["exception"].startswith("ValueError: rows of") for e in report["refused"])
    dims = {p["dim"] for p in report["parity"] if p["pair"] == "native / undeclared_max_dim"}
    assert dims == {4096, 128, 1000}
    (row,) = [r for r in report["pick"]["rows"] if r["backend"] == "undeclared_max_dim"]
    assert row["verdict"] == "PASS" and row["limits"].startswith("refused: dims 5120, 8192")
    result.stdout.fnmatch_lines(["RMSNorm conformance: PASS (partial)*refused inputs*"])


class DeclaresMaxDim64(DeclaresMaxDim4096):
    """A correct kernel for rows of at most 64 elements: its declared limits keep both target dims out."""

    name = "declares_max_dim_64"
    max_dim = 64

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if x.shape[-1] > 64:
            raise ValueError(f"rows of {x.shape[-1]} elements are past this kernel's 64")
        return super().forward_fp32(x, weight, eps)


def test_a_kernel_that_declines_the_target_dims_never_passes(run, pytester):
    """A kernel whose limits keep out hidden 4096 and head_dim 128 is checked at what it takes, but nothing says how
    it does on the model's own shapes: it reads INCOMPLETE naming them, in the headline, its "Pick a kernel" row and
    the report's JSON, and the run exits non-zero. Before, it read a PASS beside native's."""
    result = run(*ARGS, "--backend=native,tests.checking.test_refused:DeclaresMaxDim64", "--report=narrow.json",
                 "--report=narrow.md")
    assert result.ret == 2, result.stdout.str()[-3000:]
    report = json.loads((pytester.path / "narrow.json").read_text())
    label = "INCOMPLETE (not checked at hidden 4096 (declared limits), head_dim 128 (declared limits))"
    assert report["verdict"] == "INCOMPLETE" and report["verdict_label"] == label
    assert report["selection"]["target_gaps"] == {"declares_max_dim_64": ["hidden 4096", "head_dim 128"]}
    rows = {row["backend"]: row for row in report["pick"]["rows"]}
    assert rows["declares_max_dim_64"]["verdict"] == "INCOMPLETE"
    assert rows["declares_max_dim_64"]["scope"] == ("not checked at hidden 4096 (declared limits), head_dim 128 "
                                                    "(declared limits)")
    assert rows["native"]["verdict"] == "PASS" and rows["native"]["scope"] == "partial"  # not narrowed by it
    assert sum(s["checks"] for s in report["summaries"] if s["backend"] == "declares_max_dim_64") > 0
    markdown = (pytester.path / "narrow.md").read_text()
    assert f"# RMSNorm conformance report: {label}" in markdown
    assert "- declares_max_dim_64: hidden 4096 (declared limits), head_dim 128 (declared limits)" in markdown
    result.stdout.fnmatch_lines([f"RMSNorm conformance: {label}*", "Not checked at the run's target dims*"])
    # A model whose target dim it takes: the same kernel passes (--target-dims names the model's dims).
    result = run(*ARGS, "--backend=native,tests.checking.test_refused:DeclaresMaxDim64", "--target-dims=dim=64",
                 "--report=own.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert json.loads((pytester.path / "own.json").read_text())["verdict_label"] == "PASS (partial)"


def test_wrong_bits_on_a_strided_weight_stay_a_numerics_failure(run, pytester):
    result = run("--pyargs", "rmsnorm_conformance.suites", "--device=cpu", "--dtype=float32",
                 "--backend=rmsnorm_conformance.zoo:StridedWeightReadContiguously", "--rule=axis_b.output",
                 f"--replay={STRIDED_CASE}", "--report=wrong.json")
    assert result.ret == 1
    report = json.loads((pytester.path / "wrong.json").read_text())
    assert report["verdict"] == "FAIL" and report["refused"] == []
    assert {s["rule"] for s in report["summaries"] if s["failures"]} == {"axis_b.output"}


# --- the pieces ----------------------------------------------------------------------------------------------


def test_layouts_are_named_from_the_tensor():
    assert layout_of(torch.ones(4, 8)) == "contiguous"
    assert layout_of(torch.ones(16)[::2]) == "strided"
    assert layout_of(torch.ones(4, 9)[:, :8]) == "strided"
    assert layout_of(torch.ones(9)[1:]) == "offset"


def test_limits_name_the_target_shapes_they_keep_out():
    assert InputLimits().target_gaps() == []
    assert InputLimits(max_dim=4096, dim_multiple_of=8).target_gaps() == []
    assert InputLimits(min_dim=256).target_gaps() == ["head_dim 128"]
    assert InputLimits(dim_multiple_of=256).target_gaps() == ["head_dim 128"]
    assert InputLimits(max_dim=64, layouts=("strided",)).target_gaps() == ["hidden 4096", "head_dim 128",
                                                                           "contiguous rows"]


def test_limits_name_what_is_outside_them():
    limits = InputLimits(layouts=("contiguous", "offset"), min_dim=8, max_dim=64, dim_multiple_of=8)
    assert limits.outside(("x", "weight"), (torch.ones(2, 16), torch.ones(16))) is None
    assert "weight strided" in limits.outside(("x", "weight"), (torch.ones(2, 16), torch.ones(32)[::2]))
    assert "min_dim=8" in limits.outside(("x", "weight"), (torch.ones(2, 4), torch.ones(4)))
    assert "max_dim=64" in limits.outside(("x", "weight"), (torch.ones(2, 72), torch.ones(72)))
    assert "dim_multiple_of=8" in limits.outside(("x", "weight"), (torch.ones(2, 12), torch.ones(12)))
    assert limits.describe() == "layouts contiguous, offset; dim 8–64; dim a multiple of 8"
    assert not InputLimits().declared_any and InputLimits().describe() == ""


@pytest.mark.parametrize(("declared", "named"), [
    ({"layouts": "contiguous"}, "layouts"), ({"layouts": ("dense",)}, "layouts"), ({"layouts": ()}, "layouts"),
    ({"min_dim": 0}, "min_dim"), ({"max_dim": 2.5}, "max_dim"), ({"dim_multiple_of": True}, "dim_multiple_of"),
    ({"min_dim": 16, "max_dim": 8}, "max_dim"),
])
def test_a_malformed_limit_is_a_declaration_error_naming_it(declared, named):
    impl = type("Mine", (), {"name": "mine", "forward": lambda self, x, w, eps=1e-6: x, **declared})()
    with pytest.raises(DeclarationError, match=f"{named}="):
        Backend(impl)


def test_limits_can_be_declared_on_a_function(tmp_path):
    @rmsnorm_backend(layouts=["contiguous"], dim_multiple_of=8)
    def rms_norm(x, weight, eps=1e-6):
        return x

    assert Backend(adapt(rms_norm, start=tmp_path)).limits == InputLimits(layouts=("contiguous",), dim_multiple_of=8)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.rmsnorm_conformance.backends."mine:norm"]\nlayouts = ["contiguous", "offset"]\nmax_dim = 8192\n')

    def norm(x, weight, eps=1e-6):
        return x

    declared = Backend(adapt(norm, spec="mine:norm", start=tmp_path)).limits
    assert declared == InputLimits(layouts=("contiguous", "offset"), max_dim=8192)


def test_refusals_fold_by_kind_and_gate_only_when_strict():
    c = Collector(named_backends=["k"])
    c.add(Check("k", "cpu", "float32", 64, "axis_b.output", True))
    entry = {"backend": "k", "device": "cpu", "dtype": "float32", "rule": "axis_a.batch_size", "entry": "forward",
             "input": "x [8, 64] ...", "feature": "strided weight", "exception": "ValueError: no (64)",
             "case": "big", "replay": "r", "size": 512, "gating": False}
    c.add_refused(entry)
    c.add_refused({**entry, "exception": "ValueError: no (4)", "case": "small", "size": 8})
    (folded,) = c.refused
    assert folded["count"] == 2 and folded["case"] == "small" and folded["exception"] == "ValueError: no (4)"
    assert c.verdict() == "PASS" and c.checks == 1
    c.add_refused({**entry, "gating": True})
    assert c.verdict() == "FAIL"
    again = Collector.from_json(json.loads(json.dumps(c.to_json())))
    assert again.refused == c.refused


def test_refused_dims_fold_into_one_kind_in_pick_a_kernel_and_the_verdict_table():
    """A kernel that refuses odd dims reads as refusing one kind of input (named with the first few dims and a
    count), not one kind per dim it met: "Pick a kernel" ranks by the number of kinds refused."""
    from rmsnorm_conformance.harness.reporting.pick_a_kernel import pick_rows
    from rmsnorm_conformance.harness.reporting.render import backend_rows

    c = Collector(named_backends=["k"])
    c.add(Check("k", "cpu", "float32", 64, "axis_b.output", True))
    entry = {"backend": "k", "device": "cpu", "dtype": "float32", "rule": "axis_a.batch_size", "entry": "forward",
             "input": "x ...", "feature": "dim 3", "exception": "DSLRuntimeError: no", "case": "c", "replay": "r",
             "size": 8, "gating": False}
    for dim in (3, 1, 7, 33, 63, 65, 127, 1025):
        c.add_refused({**entry, "feature": f"dim {dim}", "case": f"c{dim}"})
    c.add_refused({**entry, "feature": "strided weight", "exception": "ValueError: contiguous"})
    (row,) = pick_rows(c)
    assert row.refused == ["strided weight (ValueError)", "dims 1, 3, 7, 33, 63, 65 and 2 more (DSLRuntimeError)"]
    (verdict,) = backend_rows(c)
    assert "(refused: strided weight, dims 1, 3, 7, 33, 63, 65 and 2 more)" in verdict[5]


def test_a_refusal_in_the_purity_check_reads_refused_not_impure(run, pytester):
    """The purity check calls the backend's own method on guarded buffers; a clean refusal of the input there (an
    odd dim, as quack's compiler refuses it) must read as refused, as it does in every other check, and fail only
    under --strict-interface."""
    odd = ("AccuracyCase(batch=Batch(dim=3, rows=2, dtype='float32', values='normal', weight='normal', eps=1e-06, "
           "seed=0))")
    args = ["--pyargs", "rmsnorm_conformance.suites", "--backend=tests.helpers.hostile:RefusesOddDims", "--device=cpu",
            "--dtype=float32", "--rule=variants.purity", f"--replay={odd}", SMALL]
    lenient = run(*args, "--report=lenient.json")
    report = json.loads((pytester.path / "lenient.json").read_text())
    # The one case was refused, so nothing about the backend was shown to hold: NOT RUN (exit 5), never a failure.
    assert lenient.ret == 5 and report["verdict"] == "NOT RUN", lenient.stdout.str()[-3000:]
    assert report["totals"]["failed_checks"] == 0 and not [
        o for o in report["outcomes"].values() if o["outcome"] in ("failed", "error")]
    assert {(e["rule"], e["feature"]) for e in report["refused"]} == {("variants.purity", "dim 3")}, report["refused"]
    assert all(e["exception"].startswith("ValueError: dim 3 is odd") for e in report["refused"])

    strict = run(*args, "--strict-interface", "--report=strict.json")
    assert strict.ret == 1, strict.stdout.str()[-3000:]
    report = json.loads((pytester.path / "strict.json").read_text())
    assert {o["rule"] for o in report["outcomes"].values() if o["outcome"] == "failed"} == {"refused"}


QK_NORM_ONLY = '''
from rmsnorm_conformance.backends.native import NativeRMSNormOp


class QkNormOnly(NativeRMSNormOp):
    """Native's numbers, for rows of at most 128 elements: a QK-norm kernel that declares it."""

    name = "qk_norm_only"
    max_dim = 128
'''


def test_the_rounding_class_tests_hold_a_kernel_to_the_shapes_it_declares(run, pytester):
    """The rounding-class tests call the kernel from the test's body at fixed shapes (rows of 4096 among them), not
    through a check: a kernel declaring max_dim = 128 had its declared limit raised out of the test as an error, and
    the run read FAIL. Now those shapes are not run, with the limit, and the shape it takes is held to its class."""
    pytester.makepyfile(qk_norm_only=QK_NORM_ONLY)
    result = run("--pyargs", "rmsnorm_conformance.suites.test_variants::test_rounding_class",
                 "rmsnorm_conformance.suites.test_fp8::test_fp8_rounding_class", "--backend=qk_norm_only:QkNormOnly",
                 "--device=cpu", "--dtype=float32", "--sweep=ci", SMALL, "--target-dims=head_dim=128",
                 "--report=r.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["verdict"] == "PASS" and report["totals"]["checks"] > 0
    assert {r["rows"] for r in report["rounding"]} == {256}  # (256, 128) ran; the rows of 4096 and 1000 did not
    assert any("max_dim=128" in e["reason"] for e in report["not_run"]), report["not_run"]
    # A QK-norm kernel's model dim is head_dim alone (--target-dims), and it was checked there.
    assert report["verdict_label"] == "PASS (partial)"


def test_a_declared_limit_met_in_a_test_body_skips_the_test_with_the_limit(run, pytester):
    """Any conformance test whose own body calls the kernel outside its declared limits is not run, with why: a
    user's suite as much as the shipped ones, where the call does not go through a check."""
    pytester.makepyfile(qk_norm_only=QK_NORM_ONLY, test_mine=(
        "import torch\n\n\n"
        "def test_hidden_rows(subject):\n"
        "    subject.forward(torch.ones(2, 4096), torch.ones(4096), 1e-6)\n"))
    result = run("test_mine.py", "--backend=qk_norm_only:QkNormOnly", "--device=cpu", "--dtype=float32",
                 "--report=r.json", "-rs")
    result.stdout.fnmatch_lines(["*not run: outside the declared limits of qk_norm_only: forward with a dim above "
                                 "its max_dim=128*"])
    report = json.loads((pytester.path / "r.json").read_text())
    assert [o["outcome"] for o in report["outcomes"].values()] == ["skipped"]
    assert report["verdict"] == "NOT RUN" and result.ret != 0  # it ran nothing: never a pass


@pytest.mark.early  # every test id of the suites in one process: started first, it runs while the rest drain
def test_a_refusal_is_a_refusal_in_every_test_of_the_suites(run, pytester):
    """A correct kernel that refuses every row wider than 64 (tests/helpers/hostile.py), held to every test id of the
    suites beside native: no test of it fails (before, the first calls, the empty batch and both rounding-class tests
    did), each refusal is recorded under the rule of the check that met it, and since it refused both target dims the
    run reads INCOMPLETE naming them, never PASS."""
    result = run("--pyargs", "rmsnorm_conformance.suites", "--backend=native,tests.helpers.hostile:RefusesTargetDims",
                 "--device=cpu", "--dtype=float32", "--sweep=smoke", "-p", "no:xdist", "-W", "ignore",
                 "--report=every.json")
    report = json.loads((pytester.path / "every.json").read_text())
    assert not [n for n, o in report["outcomes"].items() if o["outcome"] in ("failed", "error")], report["outcomes"]
    assert result.ret == 2, result.stdout.str()[-3000:]
    assert report["verdict_label"] == "INCOMPLETE (not checked at hidden 4096 (refused), head_dim 128 (refused))"
    rows = {row["backend"]: row for row in report["pick"]["rows"]}
    assert rows["native"]["verdict"] == "PASS" and rows["refuses_target_dims"]["verdict"] == "INCOMPLETE"
    rules = {e["rule"] for e in report["refused"] if e["backend"] == "refuses_target_dims"}
    # Folded by kind, so each rule below is the first of its kind met; these are the checks that failed it before.
    met = {"axis_a.first_call", "semantics.empty_batch", "variants.rounding_class", "variants.fp8_rounding_class"}
    assert rules & met and len(rules) > 3, rules
    assert all(e["exception"].startswith("ValueError: rows of") for e in report["refused"])


def test_a_target_dim_is_a_gap_where_it_was_refused_and_never_checked():
    """Refused at a target dim and checked nowhere there: a gap. Refused at a target dim only at some batch sizes (a
    fixed grid's limit) and checked there otherwise: covered. A strided weight refused at a target dim: covered."""
    c = Collector(named_backends=["k"], selection={"target_dims": {"hidden": 5120}})
    c.add(Check("k", "cpu", "float32", 4096, "axis_b.output", True))
    entry = {"backend": "k", "device": "cpu", "dtype": "float32", "rule": "axis_a.batch_size", "entry": "forward",
             "input": "x ...", "feature": "dim 4096", "exception": "ValueError: no", "case": "c", "replay": "r",
             "size": 8, "gating": False}
    c.add_refused(entry)  # 4096 is not this run's target
    c.add_refused({**entry, "feature": "strided weight", "input": "x [2, 5120] ..."})
    assert c.coverage_gaps() == {} and c.verdict() == "PASS"
    c.add_refused({**entry, "feature": "dim 5120"})
    assert c.coverage_gaps() == {"k": ["hidden 5120 (refused)"]}
    assert c.verdict() == "INCOMPLETE" and c.verdict_label() == "INCOMPLETE (not checked at hidden 5120 (refused))"
    c.add(Check("k", "cpu", "float32", 5120, "axis_b.output", True))  # checked there at other batch sizes
    assert c.coverage_gaps() == {} and c.verdict() == "PASS"
    c.add(Check("k", "cpu", "float32", 64, "axis_a.batch_size", False, detail="wrong bits"))
    assert c.verdict() == "FAIL"  # a failure found outranks what was left unchecked


@pytest.mark.parametrize(("option", "parsed"), [
    (None, (("hidden", 4096), ("head_dim", 128))),
    ("hidden=5120,head_dim=128", (("hidden", 5120), ("head_dim", 128))),
    ("6144, 128", (("dim", 6144), ("dim", 128))),
])
def test_target_dims_are_parsed(option, parsed):
    from rmsnorm_conformance.harness.plugin.run_options import parse_target_dims

    assert parse_target_dims(option) == parsed


@pytest.mark.parametrize("option", ["hidden=", "hidden=0", "hidden=four", "5120.5"])
def test_a_malformed_target_dim_is_a_usage_error_naming_it(option):
    from rmsnorm_conformance.harness.plugin.run_options import parse_target_dims

    with pytest.raises(pytest.UsageError, match=r"--target-dims=.*is not NAME=DIM"):
        parse_target_dims(option)
