"""``--sweep=smoke``: a pre-commit check that still runs every rule, keeps a share of the explicit cases, and never
reads as the gate (``PASS (smoke)``, with what a full run adds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import Phase

from rmsnorm_conformance.contract import TARGET_DIMS
from rmsnorm_conformance.contract.rmsnorm import THRESHOLD_DIMS
from rmsnorm_conformance.harness.drawing.cases import (
    Batch,
    BatchSizeCase,
    FirstCallCase,
    LeadingDimsCase,
    PaddingCase,
    StridedCase,
)
from rmsnorm_conformance.harness.drawing.sweeps import SWEEPS, sweep_settings
from rmsnorm_conformance.harness.reporting.records import Collector
from rmsnorm_conformance.harness.reporting.render import headline, partial_lines, render_markdown

ROOT = Path(__file__).resolve().parents[1]
SUITES = ROOT / "suites"
SMOKE = SWEEPS["smoke"].scope
SMOKE_SELECTION = {"sweep": "smoke", "sweep_is_gate": False, "full_gate_adds": ["the gate's sweep: ..."]}


def _batch(dim: int, rows: int = 8) -> Batch:
    return Batch(dim=dim, rows=rows, dtype="bfloat16")


def test_only_smoke_leaves_anything_out():
    assert SMOKE is not None
    assert [name for name, sweep in SWEEPS.items() if sweep.scope is not None] == ["smoke"]


def test_the_smoke_profile_runs_the_simplest_example_the_same_every_run():
    made = sweep_settings("smoke")
    assert made.max_examples == SWEEPS["smoke"].max_examples == 1
    assert made.derandomize and made.database is None


def test_no_shrink_drops_shrinking_alone_from_a_sweeps_phases():
    for name in SWEEPS:
        shrinking, drawn = sweep_settings(name), sweep_settings(name, shrink=False)
        assert Phase.shrink in shrinking.phases and Phase.explain not in shrinking.phases
        assert set(shrinking.phases) - set(drawn.phases) == {Phase.shrink}
        assert (drawn.max_examples, drawn.derandomize) == (shrinking.max_examples, shrinking.derandomize)


def test_smoke_holds_bitwise_rules_in_float32_and_the_others_in_bfloat16():
    assert SMOKE.dtypes_for(("axis_a.batch_size",)) == ("float32",)
    assert SMOKE.dtypes_for(("gradients.dx_batch_invariance",)) == ("float32",)
    assert SMOKE.dtypes_for(("axis_b.output",)) == ("bfloat16",)
    assert SMOKE.dtypes_for(("axis_a.repeat", "semantics.purity")) == ("bfloat16",)  # not every rule is bitwise


def test_smoke_keeps_forward_cases_at_qwen3_8b_dims_and_heads():
    for dim in THRESHOLD_DIMS:
        kept = SMOKE.covers(BatchSizeCase(_batch(dim), 4))
        assert kept == (dim in TARGET_DIMS.values()), dim
    assert SMOKE.covers(FirstCallCase(_batch(1000)))  # not a threshold dim: the first calls' odd dim stays
    assert SMOKE.covers(LeadingDimsCase(_batch(128, 64), (2, 32)))
    assert not SMOKE.covers(LeadingDimsCase(_batch(128, 80), (2, 40)))
    assert SMOKE.covers(StridedCase(_batch(128, 16), "fused_heads", extra=16, heads=8))
    assert not SMOKE.covers(StridedCase(_batch(128, 128), "fused_heads", extra=16, heads=64))
    # The variants keep their sweeps; their explicit cases (and a first call's fresh process) are left out.
    assert not SMOKE.covers(PaddingCase(_batch(4096), 0, 8, entry="fused_add"))
    assert not SMOKE.covers(FirstCallCase(_batch(4096), entry="forward_offset"))
    assert not SMOKE.covers(BatchSizeCase(_batch(128), 4, entry="forward_fp32"))


def test_a_smoke_pass_never_reads_as_pass_and_says_what_a_full_run_adds():
    c = Collector(selection=dict(SMOKE_SELECTION))
    assert c.verdict() == "PASS" and c.verdict_label() == "PASS (smoke)"
    assert headline(c).startswith("RMSNorm conformance: PASS (smoke) (")
    assert render_markdown(c).startswith("# RMSNorm conformance report: PASS (smoke)\n")
    assert partial_lines(c)[0] == "This smoke run is a quick check, not the gate; a full run adds:"
    assert c.to_json()["partial"] is True


def test_a_smoke_failure_reads_fail():
    c = Collector(selection=dict(SMOKE_SELECTION))
    c.outcomes["suites/test_axis_a.py::test_batch_size[x-cpu-bfloat16]"] = {"outcome": "failed", "reason": "r"}
    assert c.verdict_label() == "FAIL"


def test_a_merge_with_a_smoke_run_stays_a_smoke_run():
    full = Collector(selection={"sweep": "ci", "sweep_is_gate": True, "full_gate_adds": []})
    smoke = Collector(selection=dict(SMOKE_SELECTION))
    merged = Collector()
    merged.merge_json(full.to_json())
    merged.merge_json(smoke.to_json())
    assert merged.verdict_label() == "PASS (smoke)"


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))

    def go(*args):
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--device=cpu", "--sweep=smoke", *args)

    return go


def test_a_smoke_run_passes_as_smoke_and_its_reports_say_so(run, pytester):
    result = run(str(SUITES / "test_axis_b.py"), "--backend=native", "--report=r.json", "--report=r.md")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["RMSNorm conformance: PASS (smoke) (*", "This smoke run is a quick check, not the "
                                 "gate; a full run adds:", "- the gate's sweep: --sweep=smoke ran 1 example *"])
    data = json.loads((pytester.path / "r.json").read_text())
    assert data["partial"] is True and data["selection"]["sweep"] == "smoke"
    assert data["selection"]["sweep_is_gate"] is False and data["environment"]["sweep"] == "smoke"
    assert {s["dtype"] for s in data["summaries"]} == {"bfloat16"}
    assert any(line.startswith("dtypes: float16") for line in data["selection"]["full_gate_adds"])
    md = (pytester.path / "r.md").read_text()
    assert md.startswith("# RMSNorm conformance report: PASS (smoke)\n") and "a full run adds:" in md


def test_a_defect_smoke_catches_fails_the_run(run):
    result = run(str(SUITES / "test_semantics.py"), "--backend=rmsnorm_conformance.zoo:OnePlusWeight",
                 "-k", "plain_weight")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["RMSNorm conformance: FAIL (*"])
    assert "contract rule semantics.plain_weight (plain weight) broken" in result.stdout.str()
