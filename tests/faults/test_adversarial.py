"""The harness under attack: hostile backends (tests/helpers/hostile.py) and bad options. Whatever a backend or a user
does, the run never ends in PASS, exit status 0 or a missing report unless every check ran and held.

Each case runs the installed plugin in a subprocess, as a CI gate would, and checks the exit status, the
report's verdict and what the report says.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
H = "tests.helpers.hostile"
# What these runs check needs no large batch: the threshold plans and sweeps at a CPU budget's 1/32.
FAST = ["--sweep=ci", "--max-examples=2", "--dtype=float32", "--device=cpu", "--max-elements=262144", "-p",
        "no:cacheprovider"]


def _fast(args: tuple[str, ...] | list[str]) -> list[str]:
    """FAST, less its --dtype where the run names its own: a list option given twice keeps both values."""
    own = any(a.startswith("--dtype") for a in args)
    return [a for a in FAST if not (own and a.startswith("--dtype"))]


def _strict_json(text: str) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def gate(pytester, monkeypatch):
    """Run the suites in a subprocess; return the result and the JSON report (None when none was written)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))

    def go(*args: str, report: str = "r.json", fast: bool = True, inprocess: bool = False):
        # A run that ends in a usage error before any backend is called runs in this process (no interpreter
        # start, no torch import: 3 s a run saved); every run that calls a backend gets a process of its own.
        runner = pytester.runpytest_inprocess if inprocess else pytester.runpytest_subprocess
        result = runner("--pyargs", "rmsnorm_conformance.suites", *(_fast(args) if fast else ()),
                        f"--report={report}", *args)
        path = pytester.path / report
        data = _strict_json(path.read_text()) if path.exists() and path.suffix == ".json" else None
        return result, data

    return go


# --- skips and lies cannot pass ------------------------------------------------------------------------------

def test_named_backend_that_never_runs_is_not_run_and_fails(gate):
    result, data = gate(f"--backend=native,{H}:NeverAvailable", "--rule=axis_b.output")
    assert result.ret == 1
    assert data["verdict"] == "NOT RUN" and data["named_but_not_run"] == ["never_available"]
    assert "named with --backend but ran no check" in result.stdout.str()


def test_named_backend_alone_that_never_runs_exits_nonzero(gate):
    result, data = gate(f"--backend={H}:NeverAvailable", "--rule=axis_b.output")
    assert result.ret == 5
    assert data["verdict"] == "NOT RUN"


def test_availability_probe_that_raises_is_a_failure_not_a_skip(gate):
    result, data = gate(f"--backend={H}:AvailabilityProbeRaises", "--rule=axis_b.output")
    assert result.ret == 1
    assert data["verdict"] == "FAIL"
    assert "driver query failed" in json.dumps(data["outcomes"])


@pytest.mark.parametrize(("spec", "attribute"), [("StringDtypes", "'dtypes'"), ("BadDevices", "'devices'")])
def test_unreadable_capability_declarations_are_usage_errors(gate, spec, attribute):
    result, data = gate(f"--backend={H}:{spec}", "--rule=axis_b.output", inprocess=True)
    assert result.ret == 4
    assert attribute in result.stderr.str()
    assert data["verdict"] == "NOT RUN" and data["usage_error"]


def test_bf16_only_backward_is_probed_in_bf16_and_caught(gate):
    result, data = gate(f"--backend={H}:Bf16OnlyWrongBackward", "--rule=gradients.*", "--dtype=bfloat16")
    assert result.ret == 1
    assert data["verdict"] == "FAIL"
    failed = {s["rule"] for s in data["summaries"] if s["failures"]}
    assert "gradients.dx_tolerance" in failed


def test_a_declared_lack_of_backward_is_not_taken_on_trust(gate):
    """supports_backward = False on a kernel whose output carries a (wrong) grad_fn: the gradient rules still run."""
    result, data = gate(f"--backend={H}:DeclaresNoBackwardButHasAWrongOne", "--rule=gradients.*")
    assert result.ret == 1, result.stdout.str()[-2000:]
    assert "gradients.dx_tolerance" in {s["rule"] for s in data["summaries"] if s["failures"]}


@pytest.mark.parametrize("kernel", ["SkipsWhereWrong", "XfailsWhereWrong", "RaisesSkipTestWhereWrong"])
def test_a_kernel_that_skips_or_xfails_its_own_test_fails(gate, kernel):
    """pytest.skip, pytest.xfail or unittest.SkipTest raised by the kernel where it would be wrong: each had
    turned the test into a skip or an xfail, and the run into a PASS."""
    result, data = gate(f"--backend={H}:{kernel}", "--rule=semantics.plain_weight,axis_b.output")
    assert result.ret == 1, result.stdout.str()[-2000:]
    assert data["verdict"] == "FAIL"
    text = json.dumps(data)
    assert "ended the test itself during a call" in text and "may not skip, xfail or exit" in text
    assert not any(o["outcome"] in ("skipped", "xfailed") and "where_wrong" in o.get("reason", "") + o.get(
        "where", "") and ("nothing to say" in o["reason"] or "known limitation" in o["reason"]
                          or "not here" in o["reason"]) for o in data["outcomes"].values())


def test_an_output_that_is_a_tensor_subclass_is_refused(gate):
    """A subclass can redefine torch.equal and subtraction so that wrong bits compare equal: refused by name."""
    result, data = gate(f"--backend={H}:ReturnsAnAgreeableSubclass", "--rule=semantics.plain_weight,axis_b.output")
    assert result.ret == 1, result.stdout.str()[-2000:]
    assert data["verdict"] == "FAIL" and "a subclass of torch.Tensor" in json.dumps(data)


def test_a_device_that_does_not_exist_is_a_usage_error(gate):
    result, data = gate("--backend=native", "--rule=axis_b.output", "--device=cpu,cuda:7")
    assert result.ret == 4
    assert "cuda:7" in result.stderr.str()
    assert data["verdict"] == "NOT RUN"


# --- exceptions and bad return values count against the backend --------------------------------------------

def test_a_backend_that_raises_is_refused_with_the_exception_case_and_replay(gate, pytester):
    """A clear exception on a valid input (a fixed grid's limit) is a refusal: listed with the exception, the case
    and a replay, never passed, and failing the run only under --strict-interface (tests/checking/test_refused.py)."""
    result, data = gate(f"--backend={H}:RaisesAboveRows", "--rule=axis_a.batch_size", "--report=r.md")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert data["verdict"] == "PASS" and data["refused"]
    refused = data["refused"][0]
    assert "RuntimeError: grid too large" in refused["exception"] and not refused["gating"]
    assert refused["case"].startswith("BatchSizeCase(") and "--replay=" in refused["replay"]
    md = (pytester.path / "r.md").read_text()
    assert md.startswith("# RMSNorm conformance report: PASS") and "## Refused inputs" in md
    assert "<b>" not in md, "markup from an exception message must be escaped"

    strict, data = gate(f"--backend={H}:RaisesAboveRows", "--rule=axis_a.batch_size", "--strict-interface")
    assert strict.ret == 1 and data["verdict"] == "FAIL"
    assert "raised RuntimeError: grid too large" in strict.stdout.str()


@pytest.mark.parametrize(("spec", "type_name"), [("ReturnsNone", "NoneType"), ("ReturnsList", "list")])
def test_a_backend_that_returns_no_tensor_fails(gate, spec, type_name):
    result, data = gate(f"--backend={H}:{spec}", "--rule=axis_b.output")
    assert result.ret == 1
    assert data["verdict"] == "FAIL"
    assert f"returned {type_name}, not a torch.Tensor" in json.dumps(data)


# --- interruptions, signals, crashes and hangs never read PASS -------------------------------------------------

def test_keyboard_interrupt_is_incomplete_and_names_the_test(gate):
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        pytest.skip("SIGINT is ignored in this process (a job started in the background), so in the run's too")
    result, data = gate(f"--backend={H}:InterruptsAfterFirstCall", "--rule=axis_a.repeat")
    assert result.ret == 2
    assert data["verdict"] == "INCOMPLETE" and not data["complete"]
    assert any("test_repeat" in n for n in data["unfinished"])
    result.stdout.fnmatch_lines(["*RMSNorm conformance: INCOMPLETE*"])


def test_a_keyboard_interrupt_a_kernel_raises_itself_fails_it_and_the_run_goes_on(gate):
    """A KeyboardInterrupt out of a kernel with no Ctrl-C or SIGTERM received is the kernel's raise: it ended the
    whole run as a Ctrl-C does, native's checks beside it INCOMPLETE and the report saying "interrupted". Now it
    fails that kernel's checks, naming the raise, and native passes in the same run."""
    result, data = gate(f"--backend={H}:RaisesKeyboardInterrupt,native", "--rule=axis_a.repeat,axis_b.output")
    assert result.ret == 1, result.stdout.str()[-3000:]
    assert data["verdict"] == "FAIL" and data["complete"], data.get("incomplete")
    reasons = [o.get("reason", "") for o in data["outcomes"].values() if o.get("backend") == "raises_keyboard_interrupt"
               and o.get("outcome") == "failed"]
    assert reasons and all("raised KeyboardInterrupt during a call, with no Ctrl-C" in r for r in reasons), reasons
    native = [s for s in data["summaries"] if s["backend"] == "native"]
    assert {s["rule"] for s in native} == {"axis_a.repeat", "axis_b.output"} and not any(s["failures"] for s in native)


@pytest.mark.parametrize("inherited", [signal.SIG_IGN, signal.SIG_DFL], ids=["sigint-ignored", "sigint-default"])
def test_a_kernels_keyboard_interrupt_is_its_raise_where_sigint_cannot_arrive(inherited):
    """A run started in the background inherits SIGINT ignored, so no Ctrl-C can reach it as a KeyboardInterrupt; the
    interrupt watch installed nothing there, and a kernel's own KeyboardInterrupt ended such a run as interrupted
    (INCOMPLETE, every other backend with it) instead of failing that kernel. A noted SIGTERM still ends the run."""
    from rmsnorm_conformance.harness.running import isolation

    state, previous = dict(isolation._interrupts), signal.signal(signal.SIGINT, inherited)
    try:
        undo = isolation.watch_interrupts()
        try:
            def kernel_raises(after_sigterm: bool) -> None:
                with isolation.no_exit("a kernel"):
                    if after_sigterm:
                        isolation.note_interrupt()  # the reporter's SIGTERM, noted during the call
                    raise KeyboardInterrupt

            with pytest.raises(isolation.ExitRefused, match="raised KeyboardInterrupt during a call"):
                kernel_raises(after_sigterm=False)
            with pytest.raises(KeyboardInterrupt):
                kernel_raises(after_sigterm=True)
            # A handler installed since (a library's), which notes nothing: a real Ctrl-C could raise through it,
            # so a KeyboardInterrupt ends the run as before.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            with pytest.raises(KeyboardInterrupt):
                kernel_raises(after_sigterm=False)
            signal.signal(signal.SIGINT, inherited)
        finally:
            undo()
        assert signal.getsignal(signal.SIGINT) is inherited  # nothing was installed, so nothing to put back
    finally:
        signal.signal(signal.SIGINT, previous)
        isolation._interrupts.update(state)


def test_a_ctrl_c_swallowed_where_it_was_raised_is_still_incomplete(gate):
    # The backend's second call sends its process a SIGINT and swallows the KeyboardInterrupt (as Python does with one
    # raised in a garbage collector's callback, and torch's import with one raised while it imports numpy): the run
    # went on to PASS with exit status 0. The next test's start raises it again.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        pytest.skip("SIGINT is ignored in this process (a job started in the background), so in the run's too")
    result, data = gate(f"--backend={H}:SwallowsInterrupt", "--rule=axis_b.output,axis_a.repeat,axis_a.batch_size")
    assert result.ret == 2, result.stdout.str()[-3000:]
    assert data["verdict"] == "INCOMPLETE" and data["incomplete"] == "interrupted by SIGINT (Ctrl-C)"
    assert data["not_started"] > 0 or data["unfinished"]
    result.stdout.fnmatch_lines(["*RMSNorm conformance: INCOMPLETE*"])


def _spawn(tmp: Path, *args: str, env_extra: dict | None = None, stdout: Any = subprocess.PIPE) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "pytest", "--pyargs", "rmsnorm_conformance.suites", *_fast(args),
                             *args],
                            cwd=tmp, env=env, stdout=stdout, stderr=subprocess.STDOUT, text=True)


def _wait_for(path: Path, needle: str, seconds: float = 120) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists() and needle in path.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never said {needle!r}")


def test_sigterm_writes_an_incomplete_report_and_exits_nonzero(tmp_path):
    report = tmp_path / "r.json"
    proc = _spawn(tmp_path, f"--backend={H}:Sleeps", "--rule=axis_a.repeat", f"--report={report}",
                  "--case-timeout=0")
    _wait_for(report, "test_repeat")
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode not in (0, None), out
    data = _strict_json(report.read_text())
    assert data["verdict"] == "INCOMPLETE" and "SIGTERM" in data["incomplete"]
    assert any("test_repeat" in n for n in data["unfinished"])


def test_os_exit_zero_is_refused_and_fails(gate):
    result, data = gate(f"--backend={H}:ExitsZero", "--rule=axis_b.output")
    assert result.ret == 1
    assert data["verdict"] == "FAIL"
    assert "called os._exit(0)" in json.dumps(data)


def test_a_segfault_leaves_an_incomplete_report_naming_the_test(tmp_path):
    report = tmp_path / "r.json"
    # A PASS report from an earlier run is in place; the crash must not leave it looking current.
    report.write_text(json.dumps({"format": "rmsnorm-conformance-report/1", "verdict": "PASS"}))
    proc = _spawn(tmp_path, f"--backend={H}:Segfaults", "--rule=axis_b.output", f"--report={report}")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0, out
    data = _strict_json(report.read_text())
    assert data["verdict"] == "INCOMPLETE"
    assert any("test_output" in n for n in data["unfinished"])


def test_a_segfault_under_xdist_is_the_backends_verdict_and_the_run_goes_to_its_end(gate):
    """A kernel that kills its process on every call, beside native, under -n 2: the test it crashed in fails,
    naming the worker's crash, and its later tests are not run ("crashed its process"), so it costs the run a
    worker or two. Without that, pytest-xdist restarted a worker for each of its tests and, after four a worker,
    stopped the whole run: native's tests never ran and its verdict read INCOMPLETE."""
    rules = ("axis_b.output,axis_b.forward_fp32,axis_a.batch_size,axis_a.slice_offset,axis_a.padding,axis_a.position,"
             "axis_a.permutation,axis_a.leading_dims,axis_a.strided_rows,axis_a.repeat,semantics.plain_weight,"
             "semantics.eps_inside_sqrt")
    result, data = gate(f"--backend={H}:Segfaults,native", f"--rule={rules}", "-n", "2")
    assert result.ret == 1 and data["verdict"] == "FAIL", result.stdout.str()[-3000:]
    assert data["complete"] and not data["unfinished"], (data["incomplete"], data["unfinished"])
    mine = [o for o in data["outcomes"].values() if o.get("backend") == "segfaults"]
    crashed = [o for o in mine if o["outcome"] in ("failed", "error")]
    assert 1 <= len(crashed) <= 2 and all("crashed while running" in o["reason"] for o in crashed), crashed
    not_run = [o for o in mine if o["outcome"] == "skipped" and "crashed its process on cpu at" in o["reason"]]
    assert len(not_run) > 8, mine  # more tests than xdist's restarts under -n 2 would have allowed
    rows = {(r["backend"], r["device"]): r["verdict"] for r in data["pick"]["rows"]}
    # One row for it: it ran, and failed; no "named but ran no check" beside it.
    assert rows == {("native", "cpu"): "PASS", ("segfaults", "cpu"): "FAIL"}, rows
    assert data["named_but_not_run"] == [], data["named_but_not_run"]


def test_a_crash_in_the_cross_backend_table_is_pinned_on_the_backend_it_was_calling(gate):
    """The cross-backend table calls every backend in one test, whose id names none: a worker that dies there is
    pinned on the backend in flight (its worker's note beside the hang ledger), which the table's later tests then
    leave out instead of losing a worker each. Before, the crash named no backend and each dtype's table crashed."""
    result, data = gate(f"--backend={H}:Segfaults,native", "-k", "test_cross_backend_parity", "-n", "2",
                        "--device=cpu", "-p", "no:cacheprovider", fast=False)
    assert result.ret == 1 and data["verdict"] == "FAIL", result.stdout.str()[-3000:]
    tables = [o for n, o in data["outcomes"].items() if "test_cross_backend_parity" in n]
    crashed = [o for o in tables if o["outcome"] in ("failed", "error")]
    assert 1 <= len(crashed) <= 2, tables
    assert all("crashed while running" in o["reason"] and "(calling segfaults on cpu)" in o["reason"]
               for o in crashed), crashed
    left = [o for o in tables if o["outcome"] == "skipped"]
    assert len(crashed) + len(left) == 3 and all("crashed); have native" in o["reason"] for o in left), tables


def test_the_cross_backend_table_puts_back_the_state_a_backend_leaves_and_names_it(gate):
    """The table calls each backend itself, not through a check's isolated call: a kernel that leaves torch's
    default dtype at float64 there fails the table naming it and what it changed, and the state is put back (as
    every check's call does), so that no later check in the process runs under it. Before, the table passed (exit 0)
    and the process kept float64 as its default dtype."""
    result, data = gate(f"--backend=native,{H}:SetsDefaultDtype", "-k", "test_cross_backend_parity", "-p", "xdist",
                        "-n", "0")
    assert result.ret == 1 and data["verdict"] == "FAIL", result.stdout.str()[-3000:]
    (table,) = [o for n, o in data["outcomes"].items() if "test_cross_backend_parity" in n]
    assert table["outcome"] == "failed", table
    result.stdout.fnmatch_lines(["*sets_default_dtype on cpu, float32, cross-backend parity at (1, 4096): "
                                 "sets_default_dtype left torch's global state changed: default dtype "
                                 "torch.float32 -> torch.float64*"])


def test_a_backend_that_writes_its_input_spoils_no_other_backends_row_of_the_table(gate):
    """Each backend in the cross-backend table gets its own copy of the shape's inputs: one that zeroes its x (its
    purity checks fail it) leaves native the rows it was drawn, so the pair's rows compare native's output with its
    own, bit for bit. Before, native normalized the zeroed rows and the pair read as apart."""
    result, data = gate(f"--backend={H}:ZeroesItsInput,native", "-k", "test_cross_backend_parity")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and "failed" not in outcomes, result.stdout.str()[-3000:]  # the table, fp32
    pairs = [p for p in data["parity"] if p["pair"] == "zeroes_its_input / native"]
    assert len(pairs) == 5 and all(p["equal_rows"] == p["rows"] for p in pairs), pairs


def test_tests_dealt_to_a_worker_already_dead_wait_for_its_death_to_be_handled():
    """Two workers that crash at once: handling the first, pytest-xdist deals tests to the second, whose channel is
    closed. That send's OSError used to end the run as an internal error (exit 3, every verdict INCOMPLETE); the
    tests stay on the dead worker's list, dealt again when its death is handled. A send that fails on a live
    channel still raises."""
    from rmsnorm_conformance.harness.plugin.controller import tests_to_the_dead_wait

    class Channel:
        def __init__(self, closed: bool) -> None:
            self.closed = closed

        def isclosed(self) -> bool:
            return self.closed

    class Node:
        def __init__(self, closed: bool) -> None:
            self.channel = Channel(closed)
            self.sent: list = []

        def send_runtest_some(self, indices) -> None:
            self.sent.append(indices)
            raise OSError("cannot send (already closed?)")

    dead, live = Node(closed=True), Node(closed=False)
    for node in (dead, live):
        tests_to_the_dead_wait(node)
    dead.send_runtest_some([3, 4])
    assert dead.sent == [[3, 4]]
    with pytest.raises(OSError, match="cannot send"):
        live.send_runtest_some([5])


def test_a_crash_in_one_rule_fails_that_backend_in_every_table(gate):
    """A worker that dies leaves only its test id: the controller still pins the crash on the backend, device
    and rule, so "Pick a kernel" and the verdict table cannot show PASS beside passing checks."""
    result, data = gate(f"--backend={H}:SegfaultsOnWrongShapedWeight", "--rule=axis_b.output,semantics.shape_guard",
                        "--dtype=float32", "-n", "2")
    assert result.ret != 0 and data["verdict"] in ("FAIL", "INCOMPLETE")
    crashed = [o for n, o in data["outcomes"].items() if "test_shape_guard" in n]
    assert crashed and crashed[0]["backend"] == "segfaults_on_bad_weight"
    assert crashed[0]["rule"] == "semantics.shape_guard" and crashed[0]["device"] == "cpu"
    (row,) = [r for r in data["pick"]["rows"] if r["backend"] == "segfaults_on_bad_weight"]
    assert row["verdict"] == "FAIL" and "semantics.shape_guard" in row["numerics_breached"], row


# --- runs that wait out a hang or a deadline, started together ----------------------------------------------
# Each run below waits, idle, on a case timeout, the watchdog or the run's deadline (3 to 12 s). One after another
# they held a CI worker for about 54 s; started together, their waits overlap and the test takes about as long as
# the longest. Each run's checks are a subtest of their own, named for what they check.

@dataclass
class Waited:
    """A finished run: exit status, output, JSON report (None when none was written) and seconds it took."""

    ret: int
    out: str
    data: dict | None
    seconds: float


def check_a_hung_case_times_out_and_the_run_goes_on(run: Waited) -> None:
    assert run.seconds < 400
    assert run.ret == 1, run.out[-3000:]
    assert run.data["verdict"] == "FAIL"
    assert "did not return within 3 s" in json.dumps(run.data)
    native = [s for s in run.data["summaries"] if s["backend"] == "native"]
    assert native and not any(s["failures"] for s in native), "the run must go on after the hang"


def check_a_backend_that_hangs_is_waited_on_once_and_fails_naming_the_hang(run: Waited) -> None:
    """A kernel that hangs above 64 rows, beside native: its first timeout is its verdict (rule, case, replay);
    its other tests are not run, so the run waits out one case timeout, not one per test; native passes."""
    data = run.data
    assert run.ret == 1, run.out[-3000:]
    assert data["verdict"] == "FAIL"
    hangs = [o for o in data["outcomes"].values() if o["outcome"] == "failed"]
    assert len(hangs) == 1, hangs
    (hang,) = hangs
    assert hang["backend"] == "hangs_above_64_rows" and hang["rule"].startswith("axis_a.")
    assert "did not return within 10 s" in hang["reason"] and "--replay=" in hang["replay"]
    # Its later tests read "not run: ... hung"; other skips are of entry points it does not offer (the variants).
    mine = [o for o in data["outcomes"].values() if o.get("backend") == "hangs_above_64_rows" and o is not hang]
    assert any("not run: hangs_above_64_rows hung on cpu at" in o["reason"] for o in mine)
    assert all(o["outcome"] == "skipped" and ("hung on cpu at" in o["reason"] or " has no " in o["reason"])
               for o in mine), mine
    native = [s for s in data["summaries"] if s["backend"] == "native"]
    assert native and not any(s["failures"] for s in native)
    rows = {r["backend"]: r["verdict"] for r in data["pick"]["rows"]}
    assert rows == {"native": "PASS", "hangs_above_64_rows": "FAIL"}


def check_a_hang_seen_by_one_xdist_worker_spares_the_others(run: Waited) -> None:
    assert run.ret == 1 and run.data["verdict"] == "FAIL", run.out[-3000:]
    hangs = [o for o in run.data["outcomes"].values() if o["outcome"] == "failed"]
    assert 1 <= len(hangs) <= 2, "each worker waits out at most one timeout"
    assert any("hung on cpu at" in o["reason"] for o in run.data["outcomes"].values() if o["outcome"] == "skipped")


def check_the_run_deadline_ends_a_hung_run_incomplete_with_a_report(run: Waited) -> None:
    assert run.ret == 2, run.out[-3000:]
    assert run.data["verdict"] == "INCOMPLETE" and not run.data["complete"]
    assert "deadline (--deadline=6) passed" in run.data["incomplete"]
    assert run.data["environment"]["run deadline"] == "6 s"
    assert not any(o["outcome"] == "failed" for o in run.data["outcomes"].values()), "a cut case is no finding"


def check_the_run_deadline_after_a_failure_reads_fail(run: Waited) -> None:
    assert run.ret == 1, run.out[-3000:]
    assert run.data["verdict"] == "FAIL" and not run.data["complete"]
    assert "deadline (--deadline=40) passed" in run.data["incomplete"]
    assert any(s["rule"] == "semantics.plain_weight" and s["failures"] for s in run.data["summaries"])


def check_a_hang_in_native_code_is_ended_with_an_incomplete_report(run: Waited) -> None:
    assert run.seconds < 120, "the watchdog must end the hang"
    assert run.ret == 1, run.out[-3000:]
    assert run.data["verdict"] == "FAIL" and "hung past its deadline" in run.data["incomplete"]
    assert any("test_output" in n for n in run.data["unfinished"])
    (hang,) = run.data["outcomes"].values()
    assert hang["rule"] == "axis_b.output" and "--replay=" in hang["replay"]


def check_a_hang_that_stops_the_clocks_is_still_ended(run: Waited) -> None:
    """SIGALRM ignored and time.monotonic frozen: the watchdog keeps its own clock, bound before any backend."""
    assert run.seconds < 120, "the watchdog must end the hang"
    assert run.ret == 1, run.out[-3000:]
    assert run.data["verdict"] == "FAIL" and "hung past its deadline" in run.data["incomplete"]


# check: the run's arguments (after FAST). Every run's backend that sleeps sleeps 600 s (HOSTILE_SLEEP).
WAITING_RUNS: dict[Any, tuple[str, ...]] = {
    check_a_hang_that_stops_the_clocks_is_still_ended: (
        f"--backend={H}:FreezesTheClockAndHangs", "--rule=axis_b.output", "--case-timeout=1"),
    check_a_hung_case_times_out_and_the_run_goes_on: (
        f"--backend={H}:Sleeps,native", "--rule=axis_a.repeat,axis_b.output", "--case-timeout=3"),
    # The threshold plans (rows 1 to 2049) reach the hang for certain; native runs the sweeps only, which stay far
    # inside the timeout on a loaded machine.
    check_a_backend_that_hangs_is_waited_on_once_and_fails_naming_the_hang: (
        f"--backend={H}:HangsAboveRows,native", "--dtype=bfloat16", "--case-timeout=10",
        "--rule=axis_a.batch_size,axis_a.padding,axis_b.output", "-k", "not thresholds or hangs"),
    check_a_hang_seen_by_one_xdist_worker_spares_the_others: (
        f"--backend={H}:HangsAboveRows", "--dtype=bfloat16", "--case-timeout=5", "-n", "2",
        "--rule=axis_a.batch_size,axis_a.padding,axis_a.slice_offset"),
    check_the_run_deadline_ends_a_hung_run_incomplete_with_a_report: (
        f"--backend={H}:Sleeps", "--rule=axis_a.repeat,axis_b.output", "--case-timeout=0", "--deadline=6"),
    # The deadline leaves the defect's test (the first, and a few examples) time to fail on a loaded machine: on two
    # busy cores, the six runs at once beside the other tests, 12 s and then 18 s passed before the first test had
    # ended (collection alone took 8.6 s). The run ends at its deadline whatever it is, so a longer one costs only
    # the wait.
    check_the_run_deadline_after_a_failure_reads_fail: (
        f"--backend=rmsnorm_conformance.zoo:OnePlusWeight,{H}:Sleeps", "--case-timeout=0",
        "--rule=semantics.plain_weight", "--deadline=40"),
    check_a_hang_in_native_code_is_ended_with_an_incomplete_report: (
        f"--backend={H}:HangsInNativeCode", "--rule=axis_b.output", "--case-timeout=1"),
}


@pytest.mark.early(rank=2)
def test_runs_that_wait_out_a_hang_or_a_deadline(tmp_path, subtests):
    runs = {}
    for check in WAITING_RUNS:
        folder = tmp_path / check.__name__.removeprefix("check_")
        folder.mkdir()
        log = (folder / "out.txt").open("w")
        proc = _spawn(folder, *WAITING_RUNS[check], f"--report={folder / 'r.json'}",
                      env_extra={"HOSTILE_SLEEP": "600"}, stdout=log)
        runs[check] = (folder, log, proc, time.monotonic())
    finished = {}
    while len(finished) < len(runs):  # each run's time is taken when it ends, not when it is reaped
        for check, (folder, log, proc, started) in runs.items():
            if check in finished:
                continue
            ret = proc.poll()
            if ret is None and time.monotonic() - started < 300:
                continue
            if ret is None:
                proc.kill()
                ret = proc.wait()
            seconds = time.monotonic() - started
            log.close()
            report = folder / "r.json"
            finished[check] = Waited(ret, (folder / "out.txt").read_text(),
                                     _strict_json(report.read_text()) if report.exists() else None, seconds)
        time.sleep(0.1)
    for check, run in finished.items():
        with subtests.test(check.__name__.removeprefix("check_")):
            assert run.data is not None, f"no report: {run.out[-3000:]}"
            check(run)


def test_the_hang_ledger_is_shared_through_its_file(tmp_path):
    from rmsnorm_conformance.harness.running.hangs import HangLedger

    one, other = HangLedger(tmp_path / "hangs.jsonl"), HangLedger(tmp_path / "hangs.jsonl")
    assert other.hung("k", "cpu") is None
    one.note("k", "cpu", "Case(rows=65) in test_x")
    assert other.hung("k", "cpu") == "Case(rows=65) in test_x"
    assert other.hung("k", "cuda:0") is None and HangLedger().hung("k", "cpu") is None
    # A worker's crash goes on the same ledger, said as what it was.
    one.note("c", "cpu", "test_y[c-cpu-float32]", "crashed its process")
    assert other.given_up("c", "cpu") == "crashed its process on cpu at test_y[c-cpu-float32]"
    assert other.given_up("k", "cpu") == "hung on cpu at Case(rows=65) in test_x"
    # A test of several backends: the one in flight, while it is, read by another process.
    with one.in_flight("k", "cpu", "test_z[cpu-float32]"):
        assert other.crashed_in("test_z[cpu-float32]") == ("k", "cpu")
        assert other.crashed_in("test_z[cpu-float16]") is None
    assert other.crashed_in("test_z[cpu-float32]") is None  # returned: no note left
    with HangLedger().in_flight("k", "cpu", "test_z"):  # no file (one process): nothing to leave
        assert HangLedger().crashed_in("test_z") is None



# --- global state and reused buffers ------------------------------------------------------------------------

# Each hostile backend with the words its breach must name. All run in one gate, beside native: each must fail
# semantics.global_state naming what it changed, and native, whose tests run between theirs, must pass: the state is
# put back after each breach.
GLOBAL_STATE_LEAKS = {"SetsDefaultDtype": "default dtype", "DisablesGrad": "grad mode",
                      "FlushesDenormals": "flush denormal", "EnablesAutocast": "autocast",
                      "ReplacesSqrt": "torch functions replaced: torch.sqrt",
                      "LeavesTorchFunctionMode": "torch function modes 0 -> 1",
                      "IgnoresSigterm": "signal handlers replaced: SIGTERM",
                      "HidesItsDefaultDtype": "torch functions replaced: torch.get_default_dtype",
                      "BlocksSigterm": "signal functions and mask", "RedirectsStepSummary": "GITHUB_STEP_SUMMARY",
                      "DisablesOneDnn": "torch.backends flags", "LowersRecursionLimit": "recursion limit",
                      "LeavesAProfiler": "trace and profile functions replaced: profile",
                      "ChangesDirectory": "working directory",
                      "ForgesTheJsonReport": "the run's own functions replaced: json.dumps",
                      "MutesPytestOutcomes": "the run's own functions replaced: pytest.fail, pytest.skip",
                      "LeavesSavedTensorHooks": "saved-tensor hooks (none, True) -> (hooks LeavesSavedTensorHooks",
                      "LowersTheFileSizeLimit": "resource limit RLIMIT_FSIZE",
                      "MasksEveryFileMode": "file-mode mask"}


def test_global_state_leaks_fail_their_rule_and_spare_later_backends(gate, pytester, subtests):
    import tests.helpers.hostile as hostile

    backends = ",".join(f"{H}:{spec}" for spec in GLOBAL_STATE_LEAKS)
    result, data = gate(f"--backend={backends},native", "--rule=axis_b.output,gradients.dx_batch_invariance")
    assert result.ret == 1 and data["verdict"] == "FAIL"  # the JSON report too, written with json.dumps put back
    mask = os.umask(0o022)
    os.umask(mask)
    assert (pytester.path / "r.json").stat().st_mode & 0o777 == 0o666 & ~mask  # the mask put back, the mode usual
    for spec, what in GLOBAL_STATE_LEAKS.items():
        with subtests.test(backend=spec):
            name = getattr(hostile, spec).name
            reasons = [o.get("reason", "") for o in data["outcomes"].values()
                       if o.get("backend") == name and o.get("rule") == "semantics.global_state"]
            assert reasons and all(what in r for r in reasons), (spec, reasons)
    native = [s for s in data["summaries"] if s["backend"] == "native"]
    assert {s["rule"] for s in native} >= {"axis_b.output", "gradients.dx_batch_invariance"}
    assert not any(s["failures"] for s in native)


def test_a_state_that_cannot_be_put_back_ends_its_process_and_spares_the_others(gate):
    """Inference mode left on cannot be left from outside the kernel's own guard: under pytest-xdist the worker ends
    after that test and a fresh one runs the rest, native passing; in one process the run stops INCOMPLETE (the
    kernel's own row FAIL), with what did not run listed against its backends, never failed."""
    spec = f"--backend={H}:LeavesInferenceModeOn,native"
    rules = "--rule=axis_b.output,gradients.dx_batch_invariance"
    result, data = gate(spec, rules, "-n", "2")
    assert result.ret == 1 and data["verdict"] == "FAIL" and data["complete"], result.stdout.str()[-3000:]
    failed = {s["rule"] for s in data["summaries"] if s["backend"] == "leaves_inference_mode_on" and s["failures"]}
    assert "semantics.global_state" in failed
    native = [s for s in data["summaries"] if s["backend"] == "native"]
    assert {s["rule"] for s in native} >= {"axis_b.output", "gradients.dx_batch_invariance"}
    assert not any(s["failures"] for s in native)

    # Where its backward probe is the first call (the gradient rules alone), the probe's test fails, every time it is
    # asked (Hypothesis runs a failing example again: a cached answer had turned the failure into a skip).
    probed, data = gate(spec, "--rule=gradients.dx_batch_invariance", "-n", "2")
    assert probed.ret == 1 and data["verdict"] == "FAIL", probed.stdout.str()[-3000:]
    failed = [o for o in data["outcomes"].values() if o.get("backend") == "leaves_inference_mode_on"]
    assert any(o["outcome"] == "failed" for o in failed) and "backward probe left" in probed.stdout.str(), failed
    assert not any(s["failures"] for s in data["summaries"] if s["backend"] == "native")

    alone, data = gate(spec, rules, "-p", "no:xdist")
    assert alone.ret == 2 and data["verdict"] == "INCOMPLETE" and not data["complete"]
    assert "the process was left unusable after leaves_inference_mode_on's fault" in data["incomplete"]
    assert "which the process cannot put back" in data["incomplete"]
    assert not any(s["failures"] for s in data["summaries"] if s["backend"] == "native")
    assert any(e["reason"].startswith("not run: the process was left unusable") for e in data["not_run"])


def test_a_kernel_that_silences_the_harness_checks_fails_the_test_it_ran_in(gate):
    """A wrong kernel that made the harness's ``assert_holds`` a no-op during its call: every check after it in the
    test passed. The harness's own functions are read at each conformance test's end; the replaced one fails the
    test and is put back, so native's tests after it check as before."""
    result, data = gate(f"--backend={H}:SilencesTheChecks,native", "--rule=axis_b.output,semantics.plain_weight")
    assert result.ret == 1 and data["verdict"] == "FAIL", result.stdout.str()[-2000:]
    failed = [o for o in data["outcomes"].values()
              if o.get("backend") == "silences_the_checks" and o["outcome"] == "failed"]
    # Each test it ran in fails at its end naming the replacement (the suites' own imports of assert_holds still
    # caught the wrong output first, which the report names).
    out = result.stdout.str()
    assert failed and out.count("replaced the harness's own functions (") >= len(failed)
    assert "harness.checking.checks.assert_holds" in out
    native = [s for s in data["summaries"] if s["backend"] == "native"]
    assert {s["rule"] for s in native} == {"axis_b.output", "semantics.plain_weight"}
    assert not any(s["failures"] for s in native)


REPLACED_AFTER_THE_LAST_TEST = """
import json


def pytest_runtest_teardown(item):  # after the test's own check of the harness's functions: only the run's end sees it
    json.dumps = lambda obj, *args, **kwargs: '{"verdict": "PASS"}'
"""


def test_the_harness_functions_found_replaced_at_the_end_are_put_back_and_the_run_does_not_pass(gate, pytester):
    """What no test's end saw (here a conftest's teardown, as a backend's thread could) is read at the run's end:
    put back before the report is written, and the run is INCOMPLETE, never PASS."""
    pytester.makeconftest(REPLACED_AFTER_THE_LAST_TEST)
    result, data = gate("--backend=native", "--rule=axis_b.output", "-k",
                        "test_axis_b and test_output and not threshold", "-p", "conftest")
    assert result.ret == 2, result.stdout.str()[-2000:]
    assert data["verdict"] == "INCOMPLETE" and "json.dumps" in data["incomplete"], data["incomplete"]
    assert data["totals"]["checks"] > 0  # the report itself is the real one, not the forged text


SQRT_AT_IMPORT = """
import torch

from rmsnorm_conformance.backends.native import NativeRMSNormOp

_sqrt = torch.sqrt
torch.sqrt = lambda t, *args, **kwargs: _sqrt(t, *args, **kwargs) * 0.99  # the reference would follow it


class OnePercentOff(NativeRMSNormOp):
    name = "sqrt_at_import"
"""


def test_global_state_changed_at_import_fails_and_is_put_back(gate, pytester):
    """A module that replaces torch.sqrt when it is imported, before any call is watched: the reference, the
    oracle and the independent formula would all have followed it, and the kernel would have passed."""
    pytester.makepyfile(sqrt_at_import=SQRT_AT_IMPORT)
    result, data = gate("--backend=sqrt_at_import:OnePercentOff,native", "--rule=semantics.global_state,axis_b.output")
    assert result.ret == 1, result.stdout.str()[-2000:]
    reasons = [o["reason"] for o in data["outcomes"].values() if o.get("backend") == "sqrt_at_import"]
    assert any("importing sqrt_at_import changed torch's global state" in r and "torch.sqrt" in r
               for r in reasons), reasons
    # Put back at once: native's reference is the contract's, and its checks pass.
    assert not any(s["failures"] for s in data["summaries"] if s["backend"] == "native")


COMPILE_REPLACED_AT_IMPORT = """
import torch

from rmsnorm_conformance.backends.native import NativeRMSNormOp

torch.compile = lambda fn=None, *args, **kwargs: fn if fn is not None else (lambda f: f)


class WrongWhenCompiled(NativeRMSNormOp):
    name = "wrong_when_compiled"

    def forward(self, x, weight, eps=1e-6):
        out = super().forward(x, weight, eps)
        return out * 2 if torch.compiler.is_compiling() else out
"""


def test_torch_compile_replaced_at_import_fails_and_the_compiled_path_still_runs(gate, pytester):
    """A kernel wrong only when compiled, whose module replaced torch.compile with a function returning its argument:
    the compiled checks compared eager with eager, and it passed them. torch.compile is watched now (with the other
    ways the modes run a backend): the import fails global_state, and put back, the compiled path shows the bits."""
    pytester.makepyfile(compile_replaced=COMPILE_REPLACED_AT_IMPORT)
    result, data = gate("--backend=compile_replaced:WrongWhenCompiled", "--device=cpu",
                        "--rule=semantics.global_state,axis_a.execution_mode")
    assert result.ret == 1 and data["verdict"] == "FAIL", result.stdout.str()[-2000:]
    reasons = [o["reason"] for o in data["outcomes"].values() if o.get("reason")]
    assert any("importing wrong_when_compiled changed torch's global state" in r and "torch.compile" in r
               for r in reasons), reasons
    assert any("under torch.compile differ from the same rows run eagerly" in r for r in reasons), reasons


MODULE_SWAPPED_AT_IMPORT = """
import sys
import types

from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.harness.checking import checks

fake = types.ModuleType(checks.__name__)
fake.__dict__.update(vars(checks))
fake.assert_holds = lambda *args, **kwargs: None
sys.modules[checks.__name__] = fake  # whatever imports the checks from now on gets the silent ones


class OnePlusWeight(NativeRMSNormOp):
    name = "module_swapped_at_import"

    def forward(self, x, weight, eps=1e-6):
        return super().forward(x, weight + 1, eps)
"""


MODULE_PLANTED_AT_IMPORT = """
import sys
import types

from rmsnorm_conformance.backends.native import NativeRMSNormOp

# A harness module a test imports only when it runs: planted under its name before the harness ever imports it.
name = "rmsnorm_conformance.harness.checking.rounding"
fake = types.ModuleType(name)
fake.__file__ = sys.modules[__name__].__file__
sys.modules[name] = fake


class OnePlusWeight(NativeRMSNormOp):
    name = "module_planted_at_import"

    def forward(self, x, weight, eps=1e-6):
        return super().forward(x, weight + 1, eps)
"""


LAZY_NAME_SET_AT_IMPORT = """
import rmsnorm_conformance.harness as harness
from rmsnorm_conformance.backends.native import NativeRMSNormOp

# The package resolves its names when first asked: set before the suites ask, this is what they would import.
harness.assert_within = lambda *args, **kwargs: None


class OnePlusWeight(NativeRMSNormOp):
    name = "lazy_name_set_at_import"

    def forward(self, x, weight, eps=1e-6):
        return super().forward(x, weight + 1, eps)
"""


@pytest.mark.parametrize(("source", "name", "replaced", "caught"), [
    # A copy of a harness module put in sys.modules: every later import of it (the suites', at collection) would get
    # the copy. Read after each backend's import, put back.
    (MODULE_SWAPPED_AT_IMPORT, "module_swapped_at_import",
     "sys.modules['rmsnorm_conformance.harness.checking.checks']", True),
    # A module planted under the name of one the run had not imported yet (a test imports it when it runs): no
    # snapshot held the real one. Every harness and contract module is imported before any backend now.
    (MODULE_PLANTED_AT_IMPORT, "module_planted_at_import",
     "sys.modules['rmsnorm_conformance.harness.checking.rounding']", False),
    # A lazily exported name set before the suites asked for it: they imported the kernel's assert_within (every
    # tolerance check silent). The lazy names are resolved before any backend now.
    (LAZY_NAME_SET_AT_IMPORT, "lazy_name_set_at_import", "rmsnorm_conformance.harness.assert_within", True),
], ids=["swapped", "planted", "lazy name"])
def test_a_harness_name_replaced_at_import_fails_and_is_put_back(gate, pytester, source, name, replaced, caught):
    """A kernel's module that replaces part of the harness as it is imported fails its tests, naming what it
    replaced, and the harness's own is put back before the suites use it: native's checks are untouched, and
    where the suites would have used the replacement the wrong kernel is caught (``caught``)."""
    pytester.makepyfile(hostile_module=source)
    result, data = gate("--backend=hostile_module:OnePlusWeight,native", "--rule=semantics.global_state,axis_b.output")
    assert result.ret == 1 and data["verdict"] == "FAIL", result.stdout.str()[-2000:]
    reasons = [o["reason"] for o in data["outcomes"].values() if o.get("backend") == name]
    assert any(replaced in r for r in reasons), reasons
    assert not caught or any("axis_b.output" in r for r in reasons), reasons
    assert not any(s["failures"] for s in data["summaries"] if s["backend"] == "native")


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "two workers"])
def test_an_unencodable_error_message_still_gets_every_report_written(gate, pytester, workers):
    """A kernel's exception text that is no UTF-8 (a lone surrogate) ended the report's last write in one process,
    and under pytest-xdist the worker that could not send it (the run ended INCOMPLETE, native's tests with it)."""
    result, data = gate(f"--backend={H}:RaisesUnencodableText,native", "--rule=axis_b.output", "--report=r.md",
                        "--junitxml=r.xml", *workers)
    assert result.ret == 1, result.stdout.str()[-2000:]
    assert data["verdict"] == "FAIL" and data["complete"]  # the wrong rows fail; the refused ones are listed
    markdown = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert markdown.startswith("# RMSNorm conformance report: FAIL") and "cannot take \\udcff rows" in markdown
    assert (pytester.path / "r.xml").read_text().startswith("<?xml")
    assert "INTERNALERROR" not in result.stdout.str()
    assert not any(s["failures"] for s in data["summaries"] if s["backend"] == "native")


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "two workers"])
def test_an_exception_that_cannot_be_shown_fails_its_backend_and_the_run_goes_on(gate, workers):
    result, data = gate(f"--backend={H}:RaisesUnprintable,native", "--rule=axis_b.output,axis_a.batch_size",
                        *workers)
    out = result.stdout.str()
    assert result.ret == 1 and "INTERNALERROR" not in out, out[-3000:]
    assert data["verdict"] == "FAIL" and data["complete"]
    mine = [s for s in data["summaries"] if s["backend"] == "raises_unprintable"]
    native = [s for s in data["summaries"] if s["backend"] == "native"]
    assert any(s["failures"] for s in mine) and not any(s["failures"] for s in native)
    assert sum(s["checks"] for s in native) > 0
    assert "_Unprintable: <its str() raised RuntimeError>" in json.dumps(data)


def test_only_the_exceptions_that_cannot_be_shown_are_replaced_in_their_chain():
    from rmsnorm_conformance.harness.running import exception_text

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    def chained(outer: BaseException) -> BaseException:
        try:
            try:
                raise Unprintable()
            except Unprintable:
                raise outer  # noqa: B904 (the implicit context is what pytest and Hypothesis show)
        except BaseException as exc:
            return exc

    fine = ValueError("fine")
    assert exception_text.printable(fine) is fine
    outer = chained(ValueError("outer"))
    shown = exception_text.printable(outer)
    assert shown is outer and outer.__suppress_context__  # kept, chained to the stand-in instead
    assert isinstance(outer.__cause__, exception_text.UnshownException)
    assert str(outer.__cause__) == "Unprintable: <its str() raised RuntimeError>"
    assert outer.__cause__.__traceback__ is not None
    head = chained(Unprintable())
    assert isinstance(exception_text.printable(head), exception_text.UnshownException)
    assert exception_text.printable(head, keep_first=True) is head
    long = ValueError("x" * 10_000)
    assert exception_text.message(long, limit=100).endswith("... (cut: 10,000 characters in all)")
    assert not exception_text.readable(Unprintable()) and exception_text.readable(long)


def test_a_huge_exception_message_is_cut_in_the_log_and_the_reports(gate, pytester):
    result, data = gate(f"--backend={H}:RaisesAHugeMessage", "--rule=axis_b.output", "--report=r.md")
    assert result.ret != 0 and data["verdict"] == "NOT RUN"  # every input refused: it ran no check
    markdown = (pytester.path / "r.md").read_text()
    assert "characters in all)" in markdown and len(markdown) < 1_000_000
    assert len(result.stdout.str()) < 2_000_000


@pytest.mark.parametrize(("spec", "rule"), [("BranchesOnAFrozenWeight", "axis_a.grad_mode"),
                                            ("WrongDxWithAFrozenWeight", "gradients.dx_tolerance")])
def test_a_kernel_that_branches_on_a_frozen_weight_fails_there(gate, spec, rule):
    result, data = gate(f"--backend={H}:{spec}", "--rule=axis_a.grad_mode,gradients.dx_tolerance")
    assert result.ret == 1 and data["verdict"] == "FAIL", result.stdout.str()[-2000:]
    failed = [s for s in data["summaries"] if s["failures"]]
    assert {s["rule"] for s in failed} == {rule}
    assert all("frozen" in s["failing_detail"] or "frozen" in json.dumps(data["outcomes"]) for s in failed)


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "two workers"])
def test_a_kernel_whose_bits_follow_the_thread_count_fails_execution_mode(gate, workers):
    result, data = gate(f"--backend={H}:SplitsAcrossThreads", "--rule=axis_a.execution_mode", *workers)
    assert result.ret == 1 and data["verdict"] == "FAIL", result.stdout.str()[-2000:]
    assert "intra-op threads" in json.dumps(data["outcomes"])


def test_a_ring_of_two_output_buffers_fails_fresh_output(gate):
    result, data = gate(f"--backend={H}:ReusesTwoOutputBuffers,native", "--rule=semantics.fresh_output")
    assert result.ret == 1 and data["verdict"] == "FAIL", result.stdout.str()[-2000:]
    failed = {(s["backend"], s["rule"]) for s in data["summaries"] if s["failures"]}
    assert failed == {("reuses_two_output_buffers", "semantics.fresh_output")}


def test_a_reused_output_buffer_fails_fresh_output_not_axis_a(gate):
    result, data = gate(f"--backend={H}:ReusedOutputBuffer", "--rule=axis_a.position,axis_a.permutation")
    assert result.ret == 1
    failed = {s["rule"] for s in data["summaries"] if s["failures"]}
    assert failed == {"semantics.fresh_output"}


# --- options are checked before the run ---------------------------------------------------------------------

@pytest.mark.parametrize(("option", "message"), [
    ("--report=out.txt", "unknown suffix"),
    ("--report=adir", "is a directory"),
    ("--report=/proc/no/such/r.md", "cannot write there"),
    ("--max-elements=100000000000000", "must be between 1 and"),
    ("--max-elements=0", "must be between 1 and"),
    ("--case-timeout=-1", "--case-timeout"),
    ("--hypothesis-profile=bogus", "no such Hypothesis profile"),
    ("--backend=native,tests.helpers.hostile:ImpostorNative", "share the name 'native'"),
    ("--backend=tests.helpers.hostile:NamedOverTwoLines", "must be one line of printable characters; it has '\\n'"),
    ("--backend=tests.helpers.hostile:NamedLikeAWorkflowCommand", "must not start with '::'"),
    ("--dtype=fp32", "--dtype=fp32: unknown"),
    ("--rule=axis_z.*", "--rule=axis_z.*: unknown"),
])
def test_bad_options_are_usage_errors_naming_option_and_value(gate, pytester, option, message):
    (pytester.path / "adir").mkdir()
    result, _ = gate("--backend=native", option, inprocess=True)
    assert result.ret == 4
    assert message in result.stderr.str() + result.stdout.str()


@pytest.mark.parametrize(("name", "text", "message"), [
    ("m.toml", '[[expected]]\nbackend="native"\ndevice="cpu"\nrule="axis_b.output"\nreason="r"\ndtype="fp32"\n',
     "dtype 'fp32' matches no contract dtype"),
    ("m.toml", 'expected = ["x"]\n', "entry 1 must be a table"),
    ("m.json", '[{"backend": "native"}]', "top level must be a table"),
    ("m.toml", "[[expected]\nbackend=", "not valid TOML"),
    ("m.toml", '[[expected]]\nbackend="native"\ndevice="cpu"\nrule="axis_b.nothing"\nreason="r"\n',
     "matches no contract rule"),
])
def test_bad_manifests_are_usage_errors_naming_the_file(gate, pytester, name, text, message):
    (pytester.path / name).write_text(text)
    result, data = gate("--backend=native", f"--known-failures={name}", "--rule=axis_b.output", inprocess=True)
    assert result.ret == 4
    err = result.stderr.str()
    assert message in err and name in err
    assert data["verdict"] == "NOT RUN"


@pytest.mark.parametrize("case", [
    "AccuracyCase.__init__.__globals__",
    "().__class__.__bases__[0].__subclasses__()",
    "AccuracyCase(batch=Batch(dim=8, rows=2, dtype='float32', values=__import__('os').system('touch pwned')))",
    "Batch.__dict__",
    "AccuracyCase(batch=Batch(dim=0, rows=2, dtype='float32'))",
    "AccuracyCase(batch=Batch(dim=8, rows=2, dtype='fp32'))",
    "AccuracyCase(batch=Batch(dim=8, rows=2, dtype='float32', values='nope'))",
    "AccuracyCase(batch=Batch(dim=8, rows=2, dtype='float32', eps=-1.0))",
    "(lambda: 1)()",
    "AccuracyCase(*[1])",
])
def test_replay_never_executes_code_and_refuses_bad_cases(gate, pytester, case):
    result, _ = gate("--backend=native", "--rule=axis_b.output", f"--replay={case}", inprocess=True)
    assert result.ret == 4
    assert not (pytester.path / "pwned").exists(), "the replayed case ran code"


def test_replay_of_the_wrong_case_type_or_dtype_is_a_usage_error(gate):
    wrong_type = "BatchSizeCase(batch=Batch(dim=8, rows=4, dtype='float32'), length=1)"
    result, _ = gate("--backend=native", "--rule=axis_b.output", f"--replay={wrong_type}", inprocess=True)
    assert result.ret == 4 and "no selected conformance test takes BatchSizeCase" in result.stderr.str()
    wrong_dtype = "AccuracyCase(batch=Batch(dim=8, rows=4, dtype='bfloat16'))"
    result, _ = gate("--backend=native", "--rule=axis_b.output", f"--replay={wrong_dtype}", inprocess=True)
    assert result.ret == 4


# --- what reports say cannot be corrupted by what a backend says ---------------------------------------------

def test_markdown_survives_hostile_names_and_json_is_strict(gate, pytester):
    result, data = gate(f"--backend={H}:NastyName,{H}:InfiniteStatistics", "--rule=axis_b.output",
                        "--report=r.md")
    assert result.ret == 1 and data["verdict"] == "FAIL"
    md = (pytester.path / "r.md").read_text()
    assert "<script>" not in md
    for table in md.split("\n\n"):
        rows = [line for line in table.splitlines() if line.startswith("|")]
        if rows:
            widths = {line.replace("\\|", "").count("|") for line in rows}
            assert len(widths) == 1, f"a table row has a different number of cells:\n{table}"
    assert "nasty\\|name &lt;script&gt;" in md


def test_non_finite_statistics_are_encoded_explicitly(tmp_path):
    from rmsnorm_conformance.harness.reporting.render import write_report
    from rmsnorm_conformance.harness.vocabulary.records import Check, Collector

    c = Collector()
    c.add(Check("b", "cpu", "float32", 8, "axis_b.output", False, max_abs=float("inf"), max_rel=float("nan"),
                margin=float("inf")))
    data = _strict_json(write_report(c, tmp_path / "r.json").read_text())
    (summary,) = data["summaries"]
    assert (summary["max_abs"], summary["max_rel"], summary["margin"]) == ("inf", "nan", "inf")
    back = Collector.from_json(data)
    (again,) = back.summaries.values()
    assert again.max_abs == float("inf") and again.max_rel != again.max_rel
    assert summary["dim_margins"] == {"8": "inf"} and again.dim_margins == {"8": float("inf")}
    assert "inf" in json.dumps(data["pick"])  # the pick section's worst margin, as a string


def test_the_watched_state_reads_unchanged_when_nothing_changed_it(monkeypatch):
    """Read twice with nothing between, the state is the same (os.environ gives a new str each read: compared by
    identity, CI=true read as changed at every call); a variable the harness reads, set meanwhile, is named and put
    back, and one of its own that came since is removed."""
    from rmsnorm_conformance.harness.running import isolation

    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("RMSNORM_TEST_VARIABLE", "1")
    before = isolation.global_state()
    assert isolation.put_back(before) == []
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "/dev/null")
    monkeypatch.setenv("RMSNORM_TEST_OTHER", "2")
    changes = isolation.put_back(before)
    assert len(changes) == 1 and changes[0].startswith("environment") and "GITHUB_STEP_SUMMARY" in changes[0]
    assert "GITHUB_STEP_SUMMARY" not in os.environ and "RMSNORM_TEST_OTHER" not in os.environ
    assert os.environ["RMSNORM_TEST_VARIABLE"] == "1" and isolation.put_back(before) == []


def test_the_recursion_limit_is_a_floor_and_a_profiler_is_taken_off():
    """torch.compile raises the recursion limit on its first compile: a raise is no change. A lowered limit is named
    and put back to what it was; a profile function left behind is named and taken off."""
    import sys

    from rmsnorm_conformance.harness.running import isolation

    limit = sys.getrecursionlimit()
    try:
        before = isolation.global_state()
        sys.setrecursionlimit(limit + 100)
        assert isolation.put_back(before) == [] and sys.getrecursionlimit() == limit + 100
        sys.setrecursionlimit(limit)
        before = isolation.global_state()
        sys.setrecursionlimit(limit - 1)
        assert isolation.put_back(before) == [f"recursion limit {limit} -> {limit - 1}"]
        assert sys.getrecursionlimit() == limit
        profile = sys.getprofile()
        sys.setprofile(lambda frame, event, arg: None)
        assert isolation.put_back(before) == ["trace and profile functions replaced: profile"]
        assert sys.getprofile() is profile
    finally:
        sys.setrecursionlimit(limit)


def test_an_in_place_fused_add_that_autograd_cannot_see_warns_and_fails_when_strict(gate):
    """interface.in_place_version: the same in-place bits written with torch ops pass, written through ``.data`` (as a
    kernel writing through pointers does) warn, and fail the run under --strict-interface; the other variant rules
    pass for both."""
    args = (f"--backend={H}:InPlaceFusedAdd,{H}:InPlaceBehindAutograd",
            "--rule=interface.in_place_version,variants.fused_add_residual")
    result, data = gate(*args)
    assert result.ret == 0, result.stdout.str()[-3000:]
    rows = {(s["backend"], s["rule"]): s for s in data["summaries"]}
    assert rows[("in_place_behind_autograd", "interface.in_place_version")]["warnings"]
    assert "without moving a version counter" in \
        rows[("in_place_behind_autograd", "interface.in_place_version")]["failing_detail"]
    assert not rows[("in_place_fused_add", "interface.in_place_version")]["warnings"]
    assert rows[("in_place_fused_add", "interface.in_place_version")]["checks"] > 0
    assert not any(s["failures"] or (s["warnings"] and s["rule"] != "interface.in_place_version")
                   for s in data["summaries"])
    strict, _ = gate(*args, "--strict-interface")
    assert strict.ret == 1
    assert "contract rule interface.in_place_version" in strict.stdout.str()
