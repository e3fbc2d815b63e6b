"""The threshold plans, the element budget and the entry points: every threshold in reach is checked in every
dim and entry point, and what is out of reach is reported."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from rmsnorm_conformance.contract.rmsnorm import (
    DEFAULT_SM_COUNT,
    QK_NORM_HEADS,
    QK_NORM_TOKENS,
    THRESHOLD_DIMS,
    THRESHOLD_ROWS,
)
from rmsnorm_conformance.harness.drawing import budget, strategies, thresholds
from rmsnorm_conformance.harness.drawing.cases import Batch, lay_out_weight, strided_layout
from rmsnorm_conformance.harness.drawing.replay import parse_case
from rmsnorm_conformance.harness.running import fresh_process
from rmsnorm_conformance.harness.running.backend import Backend
from rmsnorm_conformance.harness.running.entry_points import entry_points, missing_reason
from rmsnorm_conformance.harness.running.fresh_process import FIRST_CALL_DIMS, first_call_plan
from rmsnorm_conformance.zoo import LaneOrderRMSNorm

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]
ENTRIES = ("forward", "forward_fp32")


def test_row_thresholds_hold_the_contract_and_the_sm_multiples():
    rows = thresholds.row_thresholds(CPU)
    assert set(THRESHOLD_ROWS) <= set(rows) and list(rows) == sorted(set(rows))
    assert {DEFAULT_SM_COUNT, 2 * DEFAULT_SM_COUNT, 4 * DEFAULT_SM_COUNT} <= set(rows)


@pytest.mark.parametrize("budget_elements", [1 << 16, 1 << 20, 1 << 23])
@pytest.mark.parametrize("plan", [thresholds.batch_size_plan, thresholds.slice_plan])
def test_every_threshold_in_reach_is_checked_in_every_dim_and_entry_point(plan, budget_elements):
    made = plan("float32", CPU, budget_elements, "a test budget", ENTRIES)
    for entry in ENTRIES:
        for dim in THRESHOLD_DIMS:
            largest = budget.at_dim(dim, budget_elements, CPU) // dim
            mine = [c for c in made.cases if c.entry == entry and c.batch.dim == dim]
            in_reach = [t for t in thresholds.row_thresholds(CPU) if t < largest]
            assert {c.length for c in mine} == set(in_reach)
            for c in mine:
                assert c.batch.rows == largest and c.batch.rows * dim <= budget_elements
                start = getattr(c, "start", 0)
                assert start >= 0 and start + c.length <= c.batch.rows
            # a few-row threshold is checked on several runs of rows
            assert sum(c.length for c in mine if c.length == 1) >= min(thresholds.MIN_ROWS_CHECKED, largest - 1)
    beyond = [t for t in thresholds.row_thresholds(CPU) if t >= budget_elements // 4096]
    assert made.skipped and f"dim 4096: {', '.join(map(str, beyond))}" in made.skipped
    assert "a test budget" in made.skipped


def test_padding_pairs_straddle_every_consecutive_pair_of_thresholds():
    budget_elements = 1 << 23
    made = thresholds.padding_plan("bfloat16", CPU, budget_elements, "b", ("forward",))
    for dim in THRESHOLD_DIMS:
        largest = budget.at_dim(dim, budget_elements, CPU) // dim
        in_reach = [t for t in thresholds.row_thresholds(CPU) if t < largest]
        pairs = {(c.batch.rows, c.batch.rows + c.before + c.after) for c in made.cases if c.batch.dim == dim}
        assert set(zip(in_reach, [*in_reach[1:], largest], strict=True)) <= pairs
        assert (thresholds.MIN_ROWS_CHECKED, largest) in pairs
        assert all(total <= largest for _, total in pairs)
    contents = {c.content for c in made.cases}
    assert {"zeros", "nan", "inf"} <= contents
    assert any(c.before for c in made.cases) and any(c.after for c in made.cases)


def test_qk_norm_shapes_cover_every_head_count():
    made = thresholds.qk_leading_dims_plan("float16", CPU, 1 << 25, "b", ENTRIES)
    shapes = {c.shape for c in made.cases}
    assert shapes == {(t, h) for h in QK_NORM_HEADS for t in QK_NORM_TOKENS}
    assert made.skipped is None
    fused = thresholds.qk_fused_heads_plan("float16", CPU, 1 << 16, "b", ENTRIES)
    assert {c.heads for c in fused.cases} == set(QK_NORM_HEADS)
    assert all(c.layout == "fused_heads" and c.batch.rows == c.heads * (c.batch.rows // c.heads)
               for c in fused.cases)
    assert fused.skipped and "[T, 64, 128] with T" in fused.skipped


def test_wide_dims_keep_to_a_few_rows_on_a_cpu_and_a_gpu_checks_them_in_full():
    """Rows wider than 8192 (16384, 14848 and 16384's odd neighbours) are threshold dims; on a CPU their batches
    keep to CPU_WIDE_ELEMENTS (the short-batch thresholds), which the note names, and on a GPU the budget is whole."""
    assert {14848, 16384} <= set(THRESHOLD_DIMS) and {14848, 16383, 16384, 16385} <= set(strategies.EDGE_DIMS)
    assert budget.at_dim(16384, 1 << 23, CPU) == budget.CPU_WIDE_ELEMENTS
    assert budget.at_dim(8192, 1 << 23, CPU) == 1 << 23
    assert budget.at_dim(16384, 1 << 23, torch.device("cuda")) == 1 << 23
    made = thresholds.batch_size_plan("float32", CPU, 1 << 23, "b", ("forward",))
    wide = [c for c in made.cases if c.batch.dim == 16384]
    assert {c.length for c in wide} == set(range(1, 17)) and {c.batch.rows for c in wide} == {32}
    assert f"dim 16384 (rows wider than 8192: at most {budget.CPU_WIDE_ELEMENTS} elements on a CPU): 132, 255" \
        in made.skipped


def test_row_counts_past_2_18_are_planned_where_the_budget_holds_them_and_named_where_not():
    rows = thresholds.row_thresholds(CPU)
    assert {262144, 524288, 1048576, 2097152} <= set(rows)
    roomy = thresholds.batch_size_plan("bfloat16", CPU, 1 << 29, "b", ("forward",), dims=(128,))
    assert {262144, 524288, 1048576, 2097152} <= {c.length for c in roomy.cases}
    assert not roomy.skipped
    small = thresholds.batch_size_plan("bfloat16", CPU, 1 << 23, "b", ("forward",), dims=(128,))
    assert "dim 128: 65536, 131072, 262144, 524288, 1048576, 2097152" in small.skipped


def test_a_models_own_dims_join_the_threshold_dims():
    made = thresholds.slice_plan("float32", CPU, 1 << 20, "b", ("forward",), dims=(*THRESHOLD_DIMS, 6144))
    assert 6144 in {c.batch.dim for c in made.cases}
    assert {c.batch.dim for c in thresholds.accuracy_plan("float32", CPU, 1 << 20, "b", ("forward",),
                                                          dims=(6144, 16384)).cases} == {6144, 16384, 16383, 16385}


def test_qk_norm_heads_reach_128():
    assert 128 in QK_NORM_HEADS
    made = thresholds.qk_leading_dims_plan("bfloat16", CPU, 1 << 23, "b", ("forward",))
    assert {(t, 128) for t in QK_NORM_TOKENS if t * 128 * 128 <= 1 << 23} <= {c.shape for c in made.cases}


def test_3d_views_with_a_strided_last_dim_at_every_threshold_dim():
    made = thresholds.strided_3d_plan("float32", CPU, 1 << 23, "b", ENTRIES)
    assert {c.batch.dim for c in made.cases} == set(THRESHOLD_DIMS) and made.skipped is None
    for c in made.cases[:2]:
        x = c.batch.x()
        view = strided_layout(c, x)
        assert view.dim() == 3 and view.stride(-1) > 1
        assert torch.equal(view.reshape(-1, c.batch.dim), x[: view.shape[0] * view.shape[1]])


def test_dx_at_the_small_batch_thresholds():
    made = thresholds.small_batch_gradient_plan("float32", CPU, 1 << 22, "b", ("forward",))
    assert {(c.batch.dim, c.length) for c in made.cases} == {(d, n) for d in THRESHOLD_DIMS if d <= 8192
                                                             for n in thresholds.SMALL_GRADIENT_LENGTHS}
    assert all(c.batch.rows > 16 > c.length for c in made.cases)


def test_dw_at_large_batches_where_the_budget_holds_them():
    made = thresholds.large_batch_gradient_plan("float32", CPU, 1 << 22, "b", ("forward",))
    assert [(c.batch.dim, c.batch.rows) for c in made.cases] == [(128, 32768)]
    assert made.skipped and "4096" in made.skipped
    roomy = thresholds.large_batch_gradient_plan("float32", CPU, 1 << 24, "b", ("forward",), dims=(4096, 128))
    assert [(c.batch.dim, c.batch.rows) for c in roomy.cases] == [(4096, 4096), (128, 131072)]


def test_threshold_cases_replay():
    for case in [*thresholds.accuracy_plan("float32", CPU, 1 << 20, "b", ENTRIES).cases,
                 *thresholds.strided_3d_plan("float32", CPU, 1 << 20, "b", ENTRIES).cases,
                 *thresholds.large_batch_gradient_plan("float32", CPU, 1 << 22, "b", ENTRIES).cases]:
        assert parse_case(repr(case)) == case
    for plan in (thresholds.batch_size_plan, thresholds.slice_plan, thresholds.padding_plan,
                 thresholds.qk_leading_dims_plan, thresholds.qk_fused_heads_plan):
        for case in plan("float32", CPU, 1 << 16, "b", ENTRIES).cases[::7]:
            assert parse_case(repr(case)) == case


def test_first_call_plan_rotates_which_entry_point_goes_first():
    made = first_call_plan("float32", CPU, 1 << 20, "b", ENTRIES)
    assert [c.batch.dim for c in made.cases[::2]] == list(FIRST_CALL_DIMS)
    firsts = [made.cases[2 * i].entry for i in range(len(FIRST_CALL_DIMS))]
    assert set(firsts) == set(ENTRIES)
    assert all(c.batch.rows * c.batch.dim <= 1 << 20 for c in made.cases)
    own = first_call_plan("float32", CPU, 1 << 20, "b", ("forward",), dims=(*THRESHOLD_DIMS, 6144)).cases
    assert 6144 in {c.batch.dim for c in own}


def test_every_entry_points_first_calls_share_one_process_that_takes_turns(monkeypatch):
    """The plain norm's and the variants' first-call plans run in one fresh process per backend, device and dtype,
    the plans taking turns at going first from dim to dim; a test whose cases it lacks, or a process that died,
    runs its own cases alone, so that a crash is blamed on the entry point that crashed."""
    forward = first_call_plan("float32", CPU, 1 << 20, "b", ("forward", "forward_fp32")).cases
    offset = first_call_plan("float32", CPU, 1 << 17, "b", ("forward_offset",)).cases
    together = fresh_process.interleaved([forward, offset])
    assert sorted(map(repr, together)) == sorted(map(repr, [*forward, *offset]))
    firsts = [next(c for c in together if c.batch.dim == dim) for dim in FIRST_CALL_DIMS]
    assert [c.entry == "forward_offset" for c in firsts][:2] == [False, True]  # turns: plain first, then offset
    assert [c.batch.dim for c in together] == sorted((c.batch.dim for c in together), key=FIRST_CALL_DIMS.index)

    started = []

    def fake_run(spec, device, cases, keep=None, *, dies=False):
        started.append(tuple(cases))
        if dies:
            return fresh_process.FreshCalls({}, "the fresh process exited with status -11")
        return fresh_process.FreshCalls({c: ((), ()) for c in cases})

    # This process's own memory alone: under pytest-xdist the plugin gives each worker the run's shared folder.
    monkeypatch.setattr(fresh_process, "SHARED_DIR", None)
    monkeypatch.setattr(fresh_process, "_RUNS", {})
    monkeypatch.setattr(fresh_process, "run_fresh", fake_run)
    assert fresh_process.fresh_calls("b", CPU, forward, together).covers(forward)
    assert fresh_process.fresh_calls("b", CPU, offset, together).covers(offset)
    assert started == [tuple(together)], "one process for both plans"
    fresh_process.fresh_calls("b", CPU, offset[:1], [])  # not among the cases made together: run alone
    assert started[-1] == tuple(offset[:1])

    started.clear()
    monkeypatch.setattr(fresh_process, "_RUNS", {})
    monkeypatch.setattr(fresh_process, "run_fresh", lambda spec, device, cases: fake_run(
        spec, device, cases, dies=len(cases) > len(offset)))
    assert fresh_process.fresh_calls("b", CPU, offset, together).covers(offset)
    assert started == [tuple(together), tuple(offset)], "the shared process died: the test's own cases, alone"


def test_xdist_workers_share_one_first_call_process_through_a_file(monkeypatch, tmp_path):
    """Under pytest-xdist the first-call tests of one backend and dtype land on several workers: one makes the
    process's calls under a lock in the run's shared folder and saves them; the others read them."""
    cases = first_call_plan("float32", CPU, 1 << 12, "b", ("forward",)).cases
    started = []

    def fake_run(spec, device, made, keep=None):
        started.append(made)
        result = [{"first": (torch.full((2,), float(i)),), "second": (torch.ones(1),)} for i in range(len(made))]
        if keep is not None:  # the process's result file, as run_fresh keeps it
            torch.save(result, keep)
        return fresh_process._calls(made, result)

    monkeypatch.setattr(fresh_process, "run_fresh", fake_run)
    monkeypatch.setattr(fresh_process, "SHARED_DIR", tmp_path)
    for _worker in range(3):  # each worker's own memory starts empty
        monkeypatch.setattr(fresh_process, "_RUNS", {})
        calls = fresh_process.fresh_calls("b", CPU, cases, cases)
        assert calls.covers(cases) and torch.equal(calls.outputs[cases[1]][0][0], torch.full((2,), 1.0))
    assert len(started) == 1, "one process for the whole run"
    monkeypatch.setattr(fresh_process, "SHARED_DIR", None)
    monkeypatch.setattr(fresh_process, "_RUNS", {})
    fresh_process.fresh_calls("b", CPU, cases, cases)
    assert len(started) == 2, "without a shared folder each process makes its own"


def test_a_call_that_raises_in_the_fresh_process_fails_its_own_case_alone():
    """In the shared fresh process a case whose call raises is recorded with its error; the other cases' calls go
    on and come back (here: a backend whose offset entry point raises, beside its plain norm)."""
    cases = first_call_plan("float32", CPU, 1 << 14, "b", ("forward", "forward_offset")).cases
    calls = fresh_process.run_fresh("tests.helpers.hostile:OffsetRaises", CPU, cases)
    assert calls.error is None
    offset = {c for c in cases if c.entry == "forward_offset"}
    assert offset and set(calls.case_errors) == offset
    assert all("first call raised RuntimeError: offset kernel" in e for e in calls.case_errors.values())
    assert set(calls.outputs) == set(cases) - offset and all(first for first, _ in calls.outputs.values())


def test_the_fresh_process_runs_with_the_asking_process_threads():
    """Under pytest-xdist a worker gives torch its share of the cores; the fresh process takes that count, not
    torch's default (a thread per core), so that a kernel whose CPU result depends on its threads differs there only
    by its first call (and the child does not crowd the other workers)."""
    cases = first_call_plan("float32", CPU, 1 << 12, "b", ("forward",)).cases
    before = torch.get_num_threads()
    asked = (os.cpu_count() or 1) + 1  # more than torch's default in a new process (at most a thread per core)
    torch.set_num_threads(asked)
    try:
        calls = fresh_process.run_fresh("tests.helpers.hostile:ThreadCounted", CPU, cases)
    finally:
        torch.set_num_threads(before)
    assert calls.error is None and set(calls.outputs) == set(cases)
    for first, second in calls.outputs.values():
        assert {t.unique().item() for t in (*first, *second)} == {float(asked)}


def test_budget_follows_free_memory_on_a_gpu(monkeypatch):
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(budget, "workers_per_gpu", lambda: 1)
    monkeypatch.setattr(budget, "free_bytes", lambda device: 139 * 2**30)  # an idle H200
    assert budget.threshold_elements(gpu, interpreted=False) == 1 << 31
    assert budget.sweep_elements(gpu, interpreted=False) == budget.GPU_SWEEP_ELEMENTS
    assert budget.GPU_SWEEP_ELEMENTS >= 16384 * 4096 and budget.GPU_SWEEP_ELEMENTS >= 524288 * 128
    monkeypatch.setattr(budget, "workers_per_gpu", lambda: 4)
    monkeypatch.setattr(budget, "free_bytes", lambda device: 8 * 2**30)  # a small, shared GPU
    assert budget.threshold_elements(gpu, interpreted=False) == 1 << 25
    assert budget.sweep_elements(gpu, interpreted=False) == 1 << 25
    assert budget.sweep_elements(gpu, interpreted=False, option=1000) == 1000
    assert "memory free" in budget.describe(gpu, interpreted=False, option=None)


def test_budget_on_a_cpu_is_fixed_and_the_option_wins():
    assert budget.sweep_elements(CPU, interpreted=False) == budget.CPU_SWEEP_ELEMENTS
    assert budget.sweep_elements(CPU, interpreted=True) == budget.INTERPRETED_SWEEP_ELEMENTS
    assert budget.threshold_elements(CPU, interpreted=False) == budget.CPU_THRESHOLD_ELEMENTS
    assert budget.threshold_elements(CPU, interpreted=True, option=77) == 77
    # The CPU's threshold budget reaches the prefill switch at 2048 rows of 4096 and Liger's at 32768 of 128.
    assert budget.CPU_THRESHOLD_ELEMENTS // 4096 > 2047 and budget.CPU_THRESHOLD_ELEMENTS // 128 > 32768
    with pytest.raises(ValueError, match="sharing=0"):
        budget.memory_elements(1 << 30, sharing=0)


@pytest.mark.parametrize("layout", ["strided", "offset"])
def test_weight_layouts_keep_the_values_and_change_the_memory(layout):
    w = Batch(dim=96, rows=1, dtype="bfloat16").w()
    laid_out = lay_out_weight(w, layout)
    assert torch.equal(laid_out, w) and laid_out.dtype == w.dtype
    assert not laid_out.is_contiguous() if layout == "strided" else laid_out.storage_offset() == 1
    assert laid_out.untyped_storage().nbytes() > w.untyped_storage().nbytes()


def test_entry_points_are_read_from_the_backend():
    class ForwardOnly:
        name = "forward_only"

        def forward(self, x, weight, eps=1e-6):
            return x

    assert entry_points(Backend(ForwardOnly())) == ("forward",)
    assert entry_points(Backend(LaneOrderRMSNorm())) == ("forward", "forward_fp32")
    assert "has no forward_fp32" in missing_reason(Backend(ForwardOnly()), "forward_fp32")


def test_a_budget_that_leaves_thresholds_out_says_so_in_the_report(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--pyargs", "rmsnorm_conformance.suites", "--backend=native", "--device=cpu",
        "--dtype=float32", "--rule=axis_a.padding", "-k", "thresholds", "--max-elements=4096",
        "--report=small.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    data = json.loads((pytester.path / "small.json").read_text())
    reasons = [e["reason"] for e in data["not_run"] if e["backend"] == "native"]
    assert any("beyond the element budget of 4096 (--max-elements)" in r and "dim 4096: 1, 2, 3" in r
               for r in reasons), reasons
    assert data["verdict"] == "PASS" and data["totals"]["checks"] > 0


def test_a_models_own_dims_are_checked_and_the_report_lists_the_shapes(pytester, monkeypatch):
    """--dims (here its configuration key, in pyproject.toml's [tool.rmsnorm_conformance] table) adds a model's own
    dims: the explicit checks run at them (here Axis-B's few rows at every threshold dim), and the report's
    environment lists the dims and head counts the run checked."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    pytester.makepyprojecttoml("[tool.rmsnorm_conformance]\ndims = [6144, 96]\n")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--pyargs", "rmsnorm_conformance.suites", "--backend=native", "--device=cpu",
        "--dtype=float32", "-k", "test_output_at_threshold_dims", "--report=dims.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    data = json.loads((pytester.path / "dims.json").read_text())
    shapes = data["environment"]["shapes checked"]
    assert "the model's own (--dims): 6144, 96" in shapes and "14848, 16384, 6144, 96" in shapes
    assert "with H 8, 32, 40, 64, 128" in shapes
    checked = {d for s in data["summaries"] if s["rule"] == "axis_b.output" for d in s.get("dims", [])}
    assert {6144, 96, 14848, 16385} <= checked, data["summaries"]


def test_dims_that_are_not_whole_numbers_are_a_usage_error(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--pyargs", "rmsnorm_conformance.suites",
                                           "--backend=native", "--device=cpu", "--dims=4096,wide", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dims=4096,wide: 'wide' is not a dim*--dims=6144,128*"])
