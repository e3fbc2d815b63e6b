"""The process above a command-line conformance run (harness/plugin/supervisor.py): exits a kernel makes that no
wrapper inside the run's own process can refuse never end in status 0 or leave the previous run's report."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from rmsnorm_conformance.harness.plugin.supervisor import INCOMPLETE_STATUS, settle

ROOT = Path(__file__).resolve().parents[2]
# Started as a user starts them (python -m pytest), not forked from the tests' server: only such a run is supervised.
pytestmark = pytest.mark.fresh_interpreter

KERNELS = {
    # Exits while its module is imported: before any report of this run was written.
    "exits_at_import": "import os\nos._exit(0)\n",
    # Binds os._exit before the harness wraps it, and calls it during a call.
    "bound_exit": (
        "from os import _exit\n"
        "from rmsnorm_conformance.backends.native import NativeRMSNormOp\n\n\n"
        "class Kernel(NativeRMSNormOp):\n"
        "    name = 'bound_exit'\n\n"
        "    def forward(self, x, weight, eps=1e-6):\n"
        "        _exit(0)\n"),
    # Wrong (1 + weight), with an exit hook that ends the process with status 0 after the FAIL.
    "exit_hook": (
        "import atexit, os\n"
        "from rmsnorm_conformance.backends.native import NativeRMSNormOp\n"
        "atexit.register(os._exit, 0)\n\n\n"
        "class Kernel(NativeRMSNormOp):\n"
        "    name = 'exit_hook'\n\n"
        "    def forward(self, x, weight, eps=1e-6):\n"
        "        return super().forward(x, weight + 1, eps)\n"),
    # Correct, but leaves a thread running that the interpreter waits for at exit: the run hung after its report.
    "lingering_thread": (
        "import threading, time\n"
        "from rmsnorm_conformance.backends.native import NativeRMSNormOp\n\n\n"
        "class Kernel(NativeRMSNormOp):\n"
        "    name = 'lingering_thread'\n\n"
        "    def forward(self, x, weight, eps=1e-6):\n"
        "        threading.Thread(target=time.sleep, args=(3600,), name='left-by-kernel').start()\n"
        "        return super().forward(x, weight, eps)\n"),
    # Wrong (1 + weight); writes the supervisor's status file with status 0 on its first call, then stops its own
    # process: the supervisor ended it after its grace and exited 0 with the report reading INCOMPLETE.
    "forges_the_status": (
        "import json, os, signal\n"
        "from rmsnorm_conformance.backends.native import NativeRMSNormOp\n"
        "from rmsnorm_conformance.harness.plugin import supervisor\n\n\n"
        "class Kernel(NativeRMSNormOp):\n"
        "    name = 'forges_the_status'\n\n"
        "    def forward(self, x, weight, eps=1e-6):\n"
        "        with open(supervisor._status_path, 'w') as status:\n"
        "            json.dump({'exit': 0}, status)\n"
        "        os.kill(os.getpid(), signal.SIGSTOP)\n"
        "        return super().forward(x, weight + 1, eps)\n"),
    # Correct; on its first call puts a plain file where the report's folder was: no report could be written, and
    # the run ended with status 0 and none.
    "removes_the_report_folder": (
        "import os, shutil\n"
        "from rmsnorm_conformance.backends.native import NativeRMSNormOp\n\n\n"
        "class Kernel(NativeRMSNormOp):\n"
        "    name = 'removes_the_report_folder'\n\n"
        "    def forward(self, x, weight, eps=1e-6):\n"
        "        if os.path.isdir('out'):\n"
        "            shutil.rmtree('out')\n"
        "            open('out', 'w').close()\n"
        "        return super().forward(x, weight, eps)\n"),
    # Hangs where no deadline inside its process can end it: SIGALRM and SIGTERM ignored, the watchdog's clock frozen.
    "outlives_every_deadline": (
        "import signal, time\n"
        "from rmsnorm_conformance.backends.native import NativeRMSNormOp\n"
        "from rmsnorm_conformance.harness.running import isolation\n\n\n"
        "class Kernel(NativeRMSNormOp):\n"
        "    name = 'outlives_every_deadline'\n\n"
        "    def forward(self, x, weight, eps=1e-6):\n"
        "        signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "        isolation._monotonic = lambda: 0.0\n"
        "        while True:\n"
        "            time.sleep(0.2)\n"),
}
STALE = {"format": "rmsnorm-conformance-report/1", "verdict": "PASS"}


@pytest.fixture
def run(pytester, monkeypatch):
    """A command-line run (``python -m pytest``, as pytester's subprocess runs are) of one kernel module; its exit
    status and the verdict of its JSON report, which held a stale PASS before."""
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{pytester.path}")
    monkeypatch.delenv("RMSNORM_CONFORMANCE_UNSUPERVISED", raising=False)

    def go(kernel: str, *args: str) -> tuple[int, str, str]:
        pytester.makepyfile(**{kernel: KERNELS[kernel]})
        (pytester.path / "r.json").write_text(json.dumps(STALE))
        spec = f"{kernel}:X" if kernel == "exits_at_import" else f"{kernel}:Kernel"
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--pyargs", "rmsnorm_conformance.suites",
                                               f"--backend={spec}", "--device=cpu", "--dtype=float32",
                                               "--sweep=smoke", "--rule=semantics.plain_weight", "--report=r.json",
                                               *args, timeout=300)  # a hang guard: a run that never ends raises
        verdict = json.loads((pytester.path / "r.json").read_text())["verdict"]
        return result.ret, verdict, result.stderr.str()

    return go


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "two workers"])
def test_an_exit_at_import_is_incomplete_and_replaces_the_stale_report(run, workers):
    ret, verdict, err = run("exits_at_import", *workers)
    assert (ret, verdict) == (INCOMPLETE_STATUS, "INCOMPLETE"), err
    assert "the run's process exited with status 0 before its verdict: INCOMPLETE" in err


def test_an_exit_bound_before_the_harness_wrapped_it_is_never_status_0(run):
    ret, verdict, err = run("bound_exit")
    assert ret != 0 and verdict != "PASS", err


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "two workers"])
def test_an_exit_hook_cannot_turn_a_fail_into_status_0(run, workers):
    ret, verdict, err = run("exit_hook", *workers)
    assert (ret, verdict) == (1, "FAIL"), err
    assert "exited with status 0 after its verdict asked for 1" in err


def test_a_thread_a_kernel_leaves_running_does_not_hang_the_run_after_its_verdict(run, monkeypatch):
    """A non-daemon thread left running by a kernel kept the interpreter from exiting: the report said PASS and the
    run never ended (a CI job's timeout ended it). The supervisor ends it ``EXIT_GRACE`` seconds after its verdict
    with the verdict's status, naming the thread."""
    monkeypatch.setenv("RMSNORM_CONFORMANCE_EXIT_GRACE", "2")
    ret, verdict, err = run("lingering_thread")
    assert (ret, verdict) == (0, "PASS"), err
    assert "had not exited 2 s after its verdict, held by threads still running (left-by-kernel" in err


def test_a_status_a_kernel_forged_is_not_taken_for_the_verdict(run, monkeypatch):
    monkeypatch.setenv("RMSNORM_CONFORMANCE_EXIT_GRACE", "2")
    ret, verdict, err = run("forges_the_status")
    assert ret == INCOMPLETE_STATUS and verdict == "INCOMPLETE", err
    assert "the run's report was not written as the run says it wrote it" in err


def test_a_report_that_could_not_be_written_never_ends_in_status_0(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{pytester.path}")
    monkeypatch.delenv("RMSNORM_CONFORMANCE_UNSUPERVISED", raising=False)
    pytester.makepyfile(removes_the_report_folder=KERNELS["removes_the_report_folder"])
    (pytester.path / "out").mkdir()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--pyargs", "rmsnorm_conformance.suites",
                                           "--backend=removes_the_report_folder:Kernel", "--device=cpu",
                                           "--dtype=float32", "--sweep=smoke", "--rule=semantics.plain_weight",
                                           "--report=out/r.json", "--report=out/r.md", timeout=300)
    assert result.ret == INCOMPLETE_STATUS, result.stderr.str()
    out = result.stdout.str()
    assert "out/r.json could NOT be written" in out and "did not finish: the report" in out
    assert "the run's report was not written as the run says it wrote it" in result.stderr.str()


def test_a_run_that_outlives_its_deadline_is_ended_by_its_supervisor(run, monkeypatch):
    monkeypatch.setenv("RMSNORM_CONFORMANCE_DEADLINE_GRACE", "2")
    ret, verdict, err = run("outlives_every_deadline", "--deadline=15", "--case-timeout=1")  # time to reach it
    assert ret == INCOMPLETE_STATUS and verdict == "INCOMPLETE", err
    assert "still running 2 s after its --deadline: sent it SIGTERM" in err
    assert "still running 4 s after its --deadline: ended it" in err


def test_the_exit_status_follows_the_verdict_and_never_reads_0_without_one(tmp_path, capsys):
    report = tmp_path / "r.json"
    assert settle(0, 0, [], 0.0) == 0  # a pass, ended as it said
    assert settle(0, 1, [], 0.0) == 1  # an exit hook's 0 after a FAIL
    assert settle(-signal.SIGSEGV, 0, [], 0.0) == -signal.SIGSEGV  # a crash at exit after a pass stands
    assert settle(4, None, [], 0.0) == 4  # a usage error: no verdict, its own status
    assert settle(0, None, [str(report)], 0.0) == INCOMPLETE_STATUS  # ended before its verdict
    assert json.loads(report.read_text())["verdict"] == "INCOMPLETE"
    assert settle(-signal.SIGKILL, None, [], 0.0) == INCOMPLETE_STATUS
    capsys.readouterr()
    fresh = tmp_path / "usage.json"
    fresh.write_text(json.dumps({**STALE, "verdict": "NOT RUN"}))
    assert settle(4, None, [str(fresh)], 0.0) == 4  # a usage error's own NOT RUN report, written since, stays
    assert json.loads(fresh.read_text())["verdict"] == "NOT RUN" and capsys.readouterr().err == ""


def test_a_run_ended_by_the_signal_passed_on_to_it_says_so(tmp_path, capsys):
    """A SIGTERM that reached the run before its handler was in place (its first seconds) killed it: the report said
    a backend had ended the process; the supervisor knows the signal was one it passed on."""
    report = tmp_path / "r.json"
    assert settle(-signal.SIGTERM, None, [str(report)], 0.0, passed_on=(signal.SIGTERM,)) == INCOMPLETE_STATUS
    assert json.loads(report.read_text())["incomplete"] == "terminated by SIGTERM before the run could write a verdict"
    report.unlink()
    assert settle(-signal.SIGTERM, None, [str(report)], 0.0) == INCOMPLETE_STATUS  # a signal from elsewhere
    assert "a backend ended the process" in json.loads(report.read_text())["incomplete"]
    assert settle(-signal.SIGTERM, 1, [], 0.0, passed_on=(signal.SIGTERM,)) == 1  # after its verdict: the verdict's
    capsys.readouterr()


def _sleeping_run_under_way(tmp_path: Path, **popen: Any) -> tuple[Any, Path]:
    """A supervised command-line run whose kernel sleeps in its calls, once its report says a test is under way
    (the reporter and its signal handlers set up): the supervisor's process and the report's path."""
    import os
    import subprocess
    import sys
    import time

    report = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RMSNORM_CONFORMANCE_UNSUPERVISED", None)
    # SIGINT at its default first, as in a terminal: a run started in the background (this one's parent, say)
    # inherits SIGINT ignored, and then a group's SIGINT never reaches the run at all.
    in_a_terminal = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                     "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")
    proc = subprocess.Popen([sys.executable, "-c", in_a_terminal, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
                             "rmsnorm_conformance.suites", "--backend=tests.helpers.hostile:Sleeps", "--device=cpu",
                             "--dtype=float32", "--rule=axis_a.repeat", "--case-timeout=0", f"--report={report}"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **popen)

    def running() -> list[str]:
        try:
            return json.loads(report.read_text()).get("unfinished", [])
        except (OSError, ValueError):
            return []

    end = time.monotonic() + 120
    while not any("test_repeat" in n for n in running()) and time.monotonic() < end:
        time.sleep(0.2)
    return proc, report


@pytest.mark.parametrize(("signum", "said", "gap_s"), [
    (signal.SIGTERM, "terminated by SIGTERM", 0.01),
    (signal.SIGTERM, "terminated by SIGTERM", 0.05),
    (signal.SIGINT, "interrupted by SIGINT (Ctrl-C)", 0.01),
], ids=["SIGTERM 10 ms apart", "SIGTERM 50 ms apart", "SIGINT 10 ms apart"])
def test_a_signal_to_the_process_group_ends_the_run_with_its_report(tmp_path, signum, said, gap_s):
    """``timeout`` and CI runners send SIGTERM (a cancel: SIGINT first) to the whole process group: the run and its
    supervisor each get it, and the supervisor passes its own on, so the run gets two or more within milliseconds.
    Each raised a KeyboardInterrupt of its own; the next one landed in pytest's handling of the first: after
    SIGTERM the report on disk still read "the run started and has not finished", after SIGINT the run exited with
    status 1; one pending in the supervisor as the run ended killed it (exit status -15). The run says why it
    stopped, and the exit status is INCOMPLETE's."""
    import os
    import time

    proc, report = _sleeping_run_under_way(tmp_path, start_new_session=True)
    time.sleep(0.5)
    for _ in range(4):  # the group's signal, and more as a runner that insists sends them
        os.killpg(proc.pid, signum)
        time.sleep(gap_s)
    assert proc.wait(timeout=120) == INCOMPLETE_STATUS
    data = json.loads(report.read_text())
    assert data["verdict"] == "INCOMPLETE" and data["incomplete"] == said, data["incomplete"]
    assert any("test_repeat" in n for n in data["unfinished"])


def test_a_supervisor_killed_takes_its_run_down_with_an_incomplete_report(tmp_path):
    """SIGKILL reaches the supervisor alone and it can pass nothing on: its run gets a SIGTERM from the kernel
    (the parent-death signal) and ends as a terminated run does, instead of running on alone."""
    import time

    proc, report = _sleeping_run_under_way(tmp_path)
    proc.kill()
    proc.wait()
    end = time.monotonic() + 60
    while time.monotonic() < end:  # the run writes its last report as it ends
        data = json.loads(report.read_text())
        if "SIGTERM" in data.get("incomplete", ""):
            break
        time.sleep(0.2)
    # What failed, if anything did: the outcomes and failed checks say which check read the SIGTERM as a failure.
    failed = {k: v for k, v in data.get("outcomes", {}).items() if v.get("outcome") in ("failed", "error")}
    assert data["verdict"] == "INCOMPLETE" and "SIGTERM" in data["incomplete"], (
        data.get("incomplete"), data.get("totals"), failed, data.get("refused"))


def test_a_pytest_run_inside_the_run_does_not_answer_for_it(pytester, monkeypatch):
    """A test that runs pytest in its own process (as a test suite's pytester does) and then ends the process: the
    inner run's end must not read as the outer run's verdict, or the supervisor would exit 0."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_inner=(
        "import os\n\nimport pytest\n\n\n"
        "def test_inner(tmp_path):\n"
        "    (tmp_path / 'test_x.py').write_text('def test_x():\\n    pass\\n')\n"
        "    assert pytest.main(['-q', '-p', 'no:cacheprovider', str(tmp_path / 'test_x.py')]) == 0\n"
        "    os._exit(0)\n"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--backend=native", "--device=cpu",
                                           "--sweep=smoke", "test_inner.py")
    assert result.ret == INCOMPLETE_STATUS, result.stderr.str()
