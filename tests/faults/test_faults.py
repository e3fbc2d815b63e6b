"""Device faults, stray writes and 32-bit offsets: a context-poisoning kernel fails alone and never another
backend's check; out of memory fails the kernel that asked and the run goes on; guard zones find writes outside
a view and say where; the 32-bit offset cases are planned where memory allows and listed where it does not.

The end-to-end cases run the installed plugin in a subprocess against the CPU twins of zoo/faults.py,
with the simulated device loss a GPU's failing ``torch.cuda.synchronize()`` stands for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rmsnorm_conformance.contract.rmsnorm import INT32_OFFSET_LIMIT
from rmsnorm_conformance.harness.checking.bounds import GuardedCall, guard
from rmsnorm_conformance.harness.checking.comparison import equal_flag, read_flags
from rmsnorm_conformance.harness.drawing import thresholds
from rmsnorm_conformance.harness.reporting.pick_a_kernel import pick_rows
from rmsnorm_conformance.harness.running import device_faults
from rmsnorm_conformance.harness.vocabulary.records import DEVICE_LOST, Check, Collector
from rmsnorm_conformance.zoo import faults

ROOT = Path(__file__).resolve().parents[2]
D = "rmsnorm_conformance.zoo.faults"
# The sweep tests only, under the derandomized ci sweep (its batch-size draws pass 300 rows within a few).
QUICK = ["--sweep=ci", "--dtype=float32", "--device=cpu", "-p", "no:cacheprovider",
         "-k", "not _at_thresholds and not past_int32"]


@pytest.fixture
def gate(pytester, monkeypatch):
    """Run the suites in a subprocess with device loss simulated; return the result and the JSON report."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv(device_faults.SIMULATE_ENV, "1")

    def go(*args: str):
        result = pytester.runpytest_subprocess("--pyargs", "rmsnorm_conformance.suites", "--report=r.json",
                                               "--report=r.md", *args)
        path = pytester.path / "r.json"
        return result, json.loads(path.read_text()) if path.exists() else None

    return go


def _failed_rules(data: dict, backend: str) -> set[str]:
    return {s["rule"] for s in data["summaries"] if s["backend"] == backend and s["failures"]}


def _checks(data: dict, backend: str) -> int:
    return sum(s["checks"] for s in data["summaries"] if s["backend"] == backend)


def _pick(data: dict, backend: str) -> dict:
    (row,) = [r for r in data["pick"]["rows"] if r["backend"] == backend]
    return row


# --- a device fault is the fault of the backend that raised it ---------------------------------------------


def test_a_device_fault_under_xdist_fails_that_backend_alone_and_a_fresh_worker_runs_the_rest(gate):
    result, data = gate(f"--backend={D}:DeviceAssertAboveRows,native", "--rule=axis_a.batch_size,axis_b.output",
                        *QUICK, "-n", "2")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    assert data["verdict"] == "FAIL" and data["complete"]
    assert _failed_rules(data, "device_assert_above_300") == {"semantics.device_fault"}
    fault = next(s for s in data["summaries"] if s["rule"] == "semantics.device_fault")
    assert "device-side assert triggered" in fault["failing_detail"] and "--replay=" in fault["replay"]
    assert "replacing crashed worker" in out and "worker replaced" in out
    # native's tests all ran, in whichever worker, and none failed for a context it did not break
    assert _checks(data, "native") > 0 and not _failed_rules(data, "native")
    failed = [n for n, o in data["outcomes"].items() if o["outcome"] in ("failed", "error")]
    assert failed and all("device_assert_above_300" in n for n in failed)
    assert _pick(data, "native")["verdict"] == "PASS"
    row = _pick(data, "device_assert_above_300")
    assert row["verdict"] == "FAIL" and row["numerics_breached"] == ["semantics.device_fault"]


def test_a_device_fault_in_one_process_stops_it_incomplete_naming_the_fault_and_what_did_not_run(gate, pytester):
    result, data = gate(f"--backend={D}:DeviceAssertAboveRows,native", "--rule=axis_a.batch_size,axis_b.output",
                        *QUICK, "-p", "no:xdist")
    assert result.ret == 2, result.stdout.str()[-3000:]
    assert data["verdict"] == "INCOMPLETE" and not data["complete"]
    assert "the device was lost after device_assert_above_300's fault" in data["incomplete"]
    assert "device-side assert triggered" in data["incomplete"]
    assert _failed_rules(data, "device_assert_above_300") == {"semantics.device_fault"}
    assert not _failed_rules(data, "native"), "native must not fail for a context it did not break"
    lost = [e for e in data["not_run"] if e["backend"] == "native"]
    assert lost and all(e["reason"].startswith(DEVICE_LOST) for e in lost)
    assert "test_batch_size[native-cpu-float32]" in lost[0]["reason"]
    assert _pick(data, "native")["verdict"] == "INCOMPLETE"
    assert data["named_but_not_run"] == []
    md = (pytester.path / "r.md").read_text()
    assert md.startswith("# RMSNorm conformance report: INCOMPLETE") and DEVICE_LOST in md


def test_out_of_memory_fails_the_kernel_that_asked_and_the_run_goes_on(gate):
    result, data = gate(f"--backend={D}:AsksForATerabyte,native", "--rule=axis_a.batch_size", "--sweep=ci",
                        "--max-examples=2", "--dtype=float32", "--device=cpu", "-p", "no:cacheprovider",
                        "-p", "no:xdist", "-k", "not past_int32")
    assert result.ret == 1, result.stdout.str()[-3000:]
    assert data["verdict"] == "FAIL" and data["complete"]
    assert _failed_rules(data, "asks_for_a_terabyte") == {"axis_a.batch_size"}
    detail = next(s["failing_detail"] for s in data["summaries"] if s["failures"])
    assert "OutOfMemoryError" in detail and "out of memory on each of 3 tries" in detail
    assert _checks(data, "native") > 0 and not _failed_rules(data, "native")
    assert not [e for e in data["not_run"] if e["reason"].startswith(DEVICE_LOST)]


def test_out_of_memory_that_passes_is_tried_again_and_a_correct_kernel_passes(gate):
    """Workers sharing a GPU can leave one's case a few MiB short while another peaks: a correct kernel failed a
    check for it (three backends on an H200 under 16 workers). Out of memory before a case recorded
    anything is tried again (three tries, the cache emptied between them): a kernel short of memory once passes,
    and its checks are counted once."""
    args = ("--rule=axis_b.output", "--sweep=ci", "--max-examples=3", "--dtype=float32", "--device=cpu",
            "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "test_output and not bounds")
    result, data = gate("--backend=tests.helpers.hostile:OutOfMemoryOnEveryOtherCall", *args)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert data["verdict"] != "FAIL" and not _failed_rules(data, "out_of_memory_on_every_other_call")
    # Not a finding, but said: how many cases of which rule were tried again.
    (retried,) = data["retried"]
    assert retried["backend"] == "out_of_memory_on_every_other_call" and retried["rule"] == "axis_b.output"
    assert retried["count"] >= 1
    result.stdout.fnmatch_lines(["Tried again after running out of memory*",
                                 "- out_of_memory_on_every_other_call on cpu, float32, axis_b.output: * case*"])
    _, plain = gate("--backend=native", *args)
    assert _checks(data, "out_of_memory_on_every_other_call") == _checks(plain, "native") > 0


class _FakeCuda:
    """torch.cuda as ``give_back_surplus`` sees it on a GPU of 140 GiB, with ``reserved`` bytes kept."""

    def __init__(self, monkeypatch, reserved: int) -> None:
        self.reserved, self.emptied = reserved, 0
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: self.reserved)
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda device=None: type("Props", (), {"total_memory": 140 << 30})())
        monkeypatch.setattr(torch.cuda, "empty_cache", self.empty)

    def empty(self) -> None:
        self.emptied += 1
        self.reserved = 0


@pytest.mark.parametrize(("workers", "reserved_gib", "given_back"), [
    (16, 68, True),    # seen on an H200: one of 16 workers kept 68 GiB of 140
    (16, 9, True),     # over 140 / 16 = 8.75 GiB
    (16, 8, False),    # within its share: the cache stays, the next case reuses it
    (1, 68, False),    # alone on the GPU: nobody else needs it
])
def test_a_process_gives_back_what_it_keeps_beyond_its_share(monkeypatch, workers, reserved_gib, given_back):
    """Between cases a worker keeps at most its share of the GPU reserved: the blocks its caching allocator kept
    beyond that (batches grown from case to case, captured or not) are given back for the other workers' checks."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    fake = _FakeCuda(monkeypatch, reserved_gib << 30)
    assert device_faults.give_back_surplus(torch.device("cuda", 0)) is given_back
    assert fake.emptied == int(given_back)
    assert device_faults.give_back_surplus(torch.device("cpu")) is False  # a CPU keeps no device cache


def test_giving_back_never_replaces_the_cases_own_error(monkeypatch):
    """After a device fault the allocator can raise too: the surplus is then left, and the fault is reported."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "16")
    _FakeCuda(monkeypatch, 68 << 30)

    def lost() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "empty_cache", lost)
    assert device_faults.give_back_surplus(torch.device("cuda", 0)) is False


def test_every_case_gives_back_its_surplus(gate, pytester):
    """``run_check`` asks after each case (its ``finally``: whatever the case gave), counted here on passing cases by a
    conftest that wraps both."""
    pytester.makeconftest("""
        from pathlib import Path
        from rmsnorm_conformance.harness.checking import checks
        from rmsnorm_conformance.harness.running import device_faults

        LOG = Path(__file__).parent / "calls.log"
        give_back, run_check = device_faults.give_back_surplus, checks.run_check

        def counted_give_back(device):
            with LOG.open("a") as f:
                f.write("give_back\\n")
            return give_back(device)

        def counted_run_check(*args, **kwargs):
            with LOG.open("a") as f:
                f.write("case\\n")
            return run_check(*args, **kwargs)

        device_faults.give_back_surplus = counted_give_back
        checks.run_check = counted_run_check
    """)
    result, data = gate("--backend=native", "--rule=axis_b.output", "--sweep=ci", "--max-examples=3",
                        "--dtype=float32", "--device=cpu", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "-k", "test_output and not bounds")
    assert result.ret == 0 and data["verdict"] != "FAIL", result.stdout.str()[-3000:]
    calls = (pytester.path / "calls.log").read_text().split()
    assert calls.count("case") > 0 and calls.count("give_back") == calls.count("case")


def test_a_first_call_out_of_memory_is_made_again_in_a_fresh_process(gate, pytester, monkeypatch):
    """A first call that ran out of memory cannot be tried again in the process that made it: the case is made
    again in a fresh process of its own, and a correct kernel passes (it read FAIL on axis_a.first_call before)."""
    marker = pytester.path / "out-of-memory-once"
    monkeypatch.setenv("RMSNORM_TEST_OOM_MARKER", str(marker))
    result, data = gate("--backend=tests.helpers.hostile:OutOfMemoryOnTheRunsFirstCall", "--dtype=float32",
                        "--device=cpu", "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "test_first_call")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert marker.exists()  # it did run out of memory once
    assert not _failed_rules(data, "out_of_memory_on_the_runs_first_call")
    assert _checks(data, "out_of_memory_on_the_runs_first_call") > 0
    assert [(e["rule"], e["count"]) for e in data["retried"]] == [("axis_a.first_call", 1)]


@pytest.mark.parametrize(("spec", "rule", "env"), [
    ("WritesRowPastOutput", "semantics.bounds", {}),
    ("Int32OffsetWrap", "axis_b.output", {"RMSNORM_DEFECT_OFFSET_WRAP": str(1 << 16)}),
])
def test_memory_defects_are_caught_by_their_rule_alone(pytester, monkeypatch, spec, rule, env):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = pytester.runpytest_subprocess("--pyargs", "rmsnorm_conformance.suites", f"--backend={D}:{spec}",
                                           f"--rule={rule}", "--device=cpu", "--dtype=bfloat16", "--sweep=ci", "-x",
                                           "-p", "no:cacheprovider", "-p", "no:xdist")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    import re

    assert set(re.findall(r"contract rule (\S+) \(", out)) == {rule}, out[-3000:]
    assert "replay: pytest" in out


# --- guard zones ---------------------------------------------------------------------------------------------


def _strided(rows: int = 4, dim: int = 8, device: str = "cpu") -> torch.Tensor:
    buffer = torch.arange(rows * (dim + 3), dtype=torch.float32, device=device).reshape(rows, dim + 3)
    return buffer[:, :dim]  # made on the device: a move with .to() would make it contiguous


def test_a_guarded_copy_keeps_values_strides_and_alignment():
    base = torch.zeros(100, dtype=torch.bfloat16)
    t = base[3:3 + 64].view(8, 8)
    zone = guard(t, "x")
    assert torch.equal(zone.view, t) and zone.view.stride() == t.stride()
    assert zone.view.data_ptr() % 64 == t.data_ptr() % 64
    strided = _strided()
    assert guard(strided, "x").view.stride() == strided.stride()
    assert zone.written() is None


# The guard zones and the call's other conditions are read back from a GPU together (comparison.read_flags):
# the same checks on a GPU where one is visible.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="no CUDA GPU is visible to torch"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("where", "expected"), [
    ("after", "1 element(s) past the view's last element, at row 4, column 0 of a view of 4 rows"),
    ("before", "1 element(s) before the view's first element"),
    ("gap", "in the gap after row 1 of the view, column 9 of a row stride of 11"),
])
def test_a_write_outside_the_view_is_found_and_located(where, expected, device):
    t = _strided(device=device) if where == "gap" else torch.ones(4, 8, device=device)
    assert t.stride() == ((11, 1) if where == "gap" else (8, 1))
    call = GuardedCall("forward_unweighted", (t,))
    (zone,) = call.zones
    assert read_flags([zone.intact()]) == [True] and call.breaches(None) == []
    flat = zone.buffer
    position = {"after": zone.lead + t.numel(), "before": zone.lead - 1, "gap": zone.lead + 11 + 9}[where]
    flat[position] = 1.0
    assert read_flags([zone.intact()]) == [False]
    (message,) = call.breaches(None)
    assert message == zone.written() and message.startswith("x: ") and expected in message, message
    assert "where the canary 0x7FA5A5A5 was" in message


def test_flags_read_back_together_keep_their_order_and_meaning():
    a = torch.arange(6, dtype=torch.int32)
    flags = [equal_flag(a, a.clone()), (a == a).all(), False, (a > 4).any(), (a > 9).any(), True, equal_flag(a, a[:3])]
    assert read_flags(flags) == [True, True, False, True, False, True, False]
    assert read_flags([]) == []


@pytest.mark.parametrize("device", DEVICES)
def test_writes_into_the_view_go_back_to_the_caller_and_aliases_point_at_its_tensor(device):
    x = torch.ones(4, 8, device=device)
    call = GuardedCall("forward", (x, torch.ones(8, device=device)))
    call.args[0].mul_(2)  # an impure kernel writing into its input: purity must still see it
    out = call.release(call.args[0][1:])
    assert bool((x == 2).all())
    assert out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() and out.storage_offset() == 8
    assert call.breaches(out) == []


@pytest.mark.parametrize("device", DEVICES)
def test_an_in_place_copy_of_a_guarded_allocation_is_checked_too(device):
    from rmsnorm_conformance.harness.running.backend import same_layout_copy

    x = torch.ones(2, 8, device=device)
    call = GuardedCall("fused_add", (x, torch.ones(2, 8, device=device), torch.ones(8, device=device)))
    written = same_layout_copy(call.args[0])  # what an in-place backend adapter writes into
    written.untyped_storage()  # same size as the guarded allocation
    flat = written.new_empty(0).set_(written.untyped_storage(), 0, (call.zones[0].buffer.numel(),), (1,))
    flat[call.zones[0].lead + 16] = 0.5  # one row past
    (message,) = call.breaches((written, same_layout_copy(call.args[1])))
    assert message.startswith("x (written in place)") and "row 2, column 0" in message


# --- 32-bit offsets ---------------------------------------------------------------------------------------------


def test_the_int32_offset_cases_reach_past_2_to_the_31_or_say_why_not():
    cpu = torch.device("cpu")
    plan = thresholds.int32_batch_plan("bfloat16", cpu, 1 << 32, "test", ("forward", "forward_fp32"))
    assert plan.skipped is None and [c.entry for c in plan.cases] == ["forward", "forward_fp32"]
    case = plan.cases[0]
    assert case.start * case.batch.dim >= INT32_OFFSET_LIMIT and case.start + case.length == case.batch.rows
    strided = thresholds.int32_strided_plan("bfloat16", cpu, 1 << 32, "test", ("forward",)).cases[0]
    last_row_start = (strided.batch.rows - 1) * (strided.batch.dim + strided.extra)
    assert last_row_start >= INT32_OFFSET_LIMIT > strided.batch.rows * strided.batch.dim
    small = thresholds.int32_batch_plan("bfloat16", cpu, 1 << 23, "the CPU's budget", ("forward",))
    assert not small.cases and "beyond the room of 8388608 elements (the CPU's budget)" in small.skipped


# --- how a lost device reads -------------------------------------------------------------------------------------


def test_checks_kept_from_running_by_a_lost_device_read_incomplete_not_fail_or_pass():
    c = Collector(named_backends=["native", "bad"])
    c.add(Check("native", "cuda", "bfloat16", 4096, "axis_b.output", True))
    c.add(Check("bad", "cuda", "bfloat16", 4096, "semantics.device_fault", False, detail="boom"))
    c.add_not_run("native", "cuda", f"{DEVICE_LOST} after bad's fault in t: 3 tests: a, b, c")
    assert c.verdict() == "INCOMPLETE" and c.named_but_not_run() == []
    rows = {r.backend: r for r in pick_rows(c)}
    assert rows["native"].verdict == "INCOMPLETE" and rows["bad"].verdict == "FAIL"
    assert [r.backend for r in pick_rows(c)] == ["native", "bad"]


def test_the_probe_tells_a_lost_context_from_an_ordinary_error(monkeypatch):
    cpu = torch.device("cpu")
    poisoning = torch.AcceleratorError("CUDA error: device-side assert triggered")
    monkeypatch.delenv(device_faults.SIMULATE_ENV, raising=False)
    assert device_faults.context_lost(cpu, poisoning) is None
    monkeypatch.setenv(device_faults.SIMULATE_ENV, "1")
    assert device_faults.context_lost(cpu, poisoning)
    assert device_faults.context_lost(cpu, RuntimeError("grid too large")) is None
    assert device_faults.context_lost(cpu, torch.OutOfMemoryError("CUDA error: out of memory")) is None


def test_the_int32_offset_checks_pass_a_correct_kernel_and_catch_a_wrap_at_a_scaled_limit(pytester, monkeypatch):
    """The three 32-bit offset checks, run where a CPU can: the limit scaled to 2^16 elements (16 rows of 4096), the
    wrapping twin at the same boundary. Native passes each check; the twin fails each, and nothing else."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("RMSNORM_DEFECT_OFFSET_WRAP", str(1 << 16))
    pytester.makeconftest("from rmsnorm_conformance.harness.drawing import thresholds\n"
                          "thresholds.INT32_OFFSET_LIMIT = 1 << 16\n")
    result = pytester.runpytest_subprocess("--pyargs", "rmsnorm_conformance.suites", "-k", "past_int32",
                                           f"--backend=native,{D}:Int32OffsetWrap", "--device=cpu",
                                           "--dtype=bfloat16", "-p", "no:cacheprovider", "-p", "no:xdist",
                                           "--report=r.json")
    data = json.loads((pytester.path / "r.json").read_text())
    assert result.ret == 1, result.stdout.str()[-3000:]
    assert _checks(data, "native") >= 4 and not _failed_rules(data, "native")
    assert _failed_rules(data, "int32_offset_wrap") == {"axis_a.batch_size", "axis_a.strided_rows", "axis_b.output"}


# --- a fault wherever it surfaces: the cross-backend table, the state put-back, a fixture ------------------------

# Each place's planted fault, the tests that meet it first, and native's tests after it in the same process.
PLACES = {
    # The table calls the kernel at 8192 rows of 128: its assert raises in the call.
    "the cross-backend table": ("DeviceAssertAboveRows", ["rmsnorm_conformance.suites.test_parity"]),
    # The call returns and the fault surfaces at the next device touch: before, the table put torch's state back
    # first, whose device read raised outside the protected call, and the process went on to fail native's tests.
    "the state put-back": ("AsyncDeviceAssertAboveRows", ["rmsnorm_conformance.suites.test_parity"]),
    # The kernel's availability probe fires it, in the fixtures of its first test and of the table.
    "a fixture": ("DeviceAssertInItsProbe", ["rmsnorm_conformance.suites.test_axis_b::test_output",
                                             "rmsnorm_conformance.suites.test_parity"]),
}
NATIVE_AFTER = ["rmsnorm_conformance.suites.test_axis_b::test_output",
                "rmsnorm_conformance.suites.test_semantics::test_eps_inside_sqrt"]


@pytest.mark.parametrize("workers", [["-p", "no:xdist"], ["-n", "2"]], ids=["one-process", "xdist"])
@pytest.mark.parametrize("place", list(PLACES))
def test_a_device_fault_wherever_it_surfaces_is_its_backends_alone(pytester, monkeypatch, place, workers):
    """The fault is recorded against the backend whose call raised it (or its probe), the process ends after that
    test, and native, in the same process before the fault and in a fresh one after it, reads PASS or "not run: the
    device was lost", never FAIL."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    # The twins poison the simulated context: every later device touch of the process raises, as on a GPU.
    monkeypatch.setenv(device_faults.SIMULATE_ENV, f"{D}:poisoned")
    spec, first = PLACES[place]
    culprit = getattr(faults, spec).name
    result = pytester.runpytest_subprocess(
        "--pyargs", *first, *NATIVE_AFTER, f"--backend={D}:{spec},native", "--device=cpu", "--dtype=float32",
        "--sweep=ci", "--max-examples=2", "-p", "no:cacheprovider", *workers, "--report=r.json")
    data = json.loads((pytester.path / "r.json").read_text())
    out = result.stdout.str()
    assert result.ret in (1, 2) and data["verdict"] in ("FAIL", "INCOMPLETE"), out[-3000:]
    assert not _failed_rules(data, "native"), out[-3000:]
    failed = {n: o for n, o in data["outcomes"].items() if o["outcome"] in ("failed", "error")}
    assert all(o.get("backend") == culprit for o in failed.values()), failed
    assert _pick(data, "native")["verdict"] in ("PASS", "INCOMPLETE"), out[-3000:]
    assert all(e["reason"].startswith(DEVICE_LOST) for e in data["not_run"] if e["backend"] == "native")
    assert _pick(data, culprit)["verdict"] == "FAIL" and "semantics.device_fault" in _failed_rules(data, culprit) | {
        o.get("rule") for o in failed.values()}, out[-3000:]
