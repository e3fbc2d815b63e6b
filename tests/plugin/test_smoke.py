"""``--sweep=smoke``: a pre-commit check that still runs every rule, keeps a share of the explicit cases, and never
reads as the gate (``PASS (smoke)``, with what a full run adds)."""

from __future__ import annotations

import json
import re
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
from rmsnorm_conformance.harness.reporting.render import headline, partial_lines, render_markdown
from rmsnorm_conformance.harness.vocabulary.records import Collector

ROOT = Path(__file__).resolve().parents[2]
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


def test_smoke_holds_bitwise_rules_in_float32_and_bfloat16_and_the_others_in_bfloat16():
    assert SMOKE.dtypes_for(("axis_a.batch_size",)) == ("float32", "bfloat16")
    assert SMOKE.dtypes_for(("gradients.dx_batch_invariance",)) == ("float32", "bfloat16")
    assert SMOKE.dtypes_for(("axis_b.output",)) == ("bfloat16",)
    assert SMOKE.dtypes_for(("axis_a.repeat", "semantics.purity")) == ("bfloat16",)  # not every rule is bitwise


def test_smoke_keeps_forward_cases_at_qwen3_8b_dims_and_heads_and_one_wide_dim():
    for dim in THRESHOLD_DIMS:
        kept = SMOKE.covers(BatchSizeCase(_batch(dim), 4))
        assert kept == (dim in (*TARGET_DIMS.values(), 16384)), dim
    assert any(d > 8192 for d in SMOKE.threshold_dims)
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


def test_a_smoke_pass_reads_as_smoke_in_the_json_the_pick_table_and_a_merged_matrix(tmp_path):
    """A reader of the JSON, of "Pick a kernel" or of a matrix merged from smoke runs is told it was smoke: each
    had read plain PASS, where only the headline and the selection's fields said otherwise."""
    from rmsnorm_conformance.harness.reporting.merge import main as merge_main
    from rmsnorm_conformance.harness.reporting.pick_a_kernel import pick_json
    from rmsnorm_conformance.harness.vocabulary.records import Check

    c = Collector(selection=dict(SMOKE_SELECTION))
    c.add(Check("mine", "cpu", "bfloat16", 4096, "axis_b.output", True))
    data = c.to_json()
    assert (data["verdict"], data["verdict_label"]) == ("PASS", "PASS (smoke)")
    assert [(r["verdict"], r["scope"]) for r in pick_json(c)["rows"]] == [("PASS", "smoke")]
    assert re.search(r"\| mine +\| cpu +\| PASS \(smoke\) +\|", render_markdown(c))
    (tmp_path / "smoke.json").write_text(json.dumps(data))
    merge_main([str(tmp_path / "smoke.json"), "--out", str(tmp_path / "matrix.md")])
    matrix = (tmp_path / "matrix.md").read_text()
    assert "PASS (smoke)" in matrix.split("## Rules per backend")[0]  # the pick table's row
    assert "smoke.json: PASS (smoke)," in matrix  # its source line
    gate = Collector(selection={"sweep": "ci", "sweep_is_gate": True, "full_gate_adds": []})
    gate.add(Check("mine", "cpu", "bfloat16", 4096, "axis_b.output", True))
    assert gate.to_json()["verdict_label"] == "PASS" and pick_json(gate)["rows"][0]["scope"] == ""


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


def test_what_smoke_leaves_to_a_full_run_says_to_run_one_not_to_raise_the_budget():
    """Smoke keeps its explicit cases within 2^18 elements whatever --max-elements says: its notes point to a full
    sweep; a device's own budget still points to --max-elements."""
    import torch

    from rmsnorm_conformance.harness.drawing.thresholds import batch_size_plan, int32_batch_plan

    cpu = torch.device("cpu")
    for plan in (batch_size_plan("float32", cpu, 1 << 18, "--sweep=smoke", ("forward",)),
                 int32_batch_plan("float32", cpu, 1 << 18, "--sweep=smoke", ("forward",))):
        assert "--sweep=smoke keeps to this budget whatever --max-elements says; --sweep=ci checks them" in plan.skipped
        assert "Raise --max-elements" not in plan.skipped and "or --max-elements" not in plan.skipped
    own = batch_size_plan("float32", cpu, 1 << 18, "the CPU's fixed budget", ("forward",))
    assert own.skipped.endswith("Raise --max-elements where memory and time allow")


SIXTEEN_BIT_SWITCH = """
import torch


class SixteenBitSwitch:
    \"\"\"Exact in float32; in 16-bit dtypes, batches above 16 rows round the mean of squares to x's dtype.\"\"\"
    name = "sixteen_bit_switch"
    devices = ("cpu",)

    def forward(self, x, weight, eps=1e-6):
        from rmsnorm_conformance.contract.inputs import SAME_DTYPE_PAIRS, check_inputs
        check_inputs(x, weight, eps, dtype_pairs=SAME_DTYPE_PAIRS)
        xf = x.float()
        ms = xf.pow(2).mean(-1, keepdim=True)
        if x.dtype != torch.float32 and x.reshape(-1, x.shape[-1]).shape[0] > 16:
            ms = ms.to(x.dtype).float()
        return (xf * torch.rsqrt(ms + eps) * weight.float()).to(x.dtype)
"""


def test_smoke_catches_a_batch_switch_of_the_bfloat16_path_alone(run, pytester):
    """A kernel whose 16-bit path alone switches with the batch: invariant in float32, so a smoke that held the
    bitwise rules in float32 alone passed it."""
    pytester.makepyfile(switch_kernel=SIXTEEN_BIT_SWITCH)
    result = run(str(SUITES / "test_axis_a.py"), "--backend=switch_kernel:SixteenBitSwitch", "-k", "batch_size")
    assert result.ret == 1, result.stdout.str()
    out = result.stdout.str()
    assert "contract rule axis_a.batch_size (batch size) broken by backend 'sixteen_bit_switch' on cpu, bfloat16" \
        in out
    assert "float32: rows" not in out and "on cpu, float32" not in out  # its float32 path is invariant
