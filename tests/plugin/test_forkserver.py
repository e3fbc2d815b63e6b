"""tests/helpers/forkserver.py: pytester's pytest subprocesses forked from a server that imported torch are still
processes of their own, with the command's environment, output and exit status; what could differ falls back to a fresh
interpreter."""

from __future__ import annotations

import os
import sys

import pytest

from tests.helpers.forkserver import ForkServer, _uses_xdist

PROBE = """
    import os, sys

    def test_probe():
        print("FORKED:", "torch" in sys.modules, "CWD:", os.getcwd(), "MARK:", os.environ.get("FORK_PROBE"))
        assert os.environ.get("FORK_PROBE") != "fail"
        if os.environ.get("FORK_PROBE") == "abort":
            os.abort()
"""


def test_a_forked_run_has_the_commands_directory_environment_output_and_status(pytester, monkeypatch):
    pytester.makepyfile(test_probe=PROBE)
    monkeypatch.setenv("FORK_PROBE", "yes")
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"*FORKED: True CWD: {pytester.path} MARK: yes*"])
    monkeypatch.setenv("FORK_PROBE", "fail")
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider").ret == 1


def test_a_forked_run_that_aborts_reads_as_the_signal_that_ended_it(pytester, monkeypatch):
    pytester.makepyfile(test_probe=PROBE)
    monkeypatch.setenv("FORK_PROBE", "abort")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == -6  # SIGABRT, as subprocess reports a process a signal ended


@pytest.mark.fresh_interpreter
def test_marked_tests_get_a_fresh_interpreter(pytester):
    pytester.makepyfile(test_probe=PROBE)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*FORKED: False*"])


def test_what_python_or_torch_read_at_start_up_is_never_forked(monkeypatch):
    server = ForkServer()
    command = (sys.executable, "-mpytest", "-q")
    env = dict(os.environ)
    assert server.forkable(command, env)
    assert not server.forkable((sys.executable, "-c", "pass"), env)
    for name, value in (("OMP_NUM_THREADS", "7"), ("TORCH_LOGS", "dynamo"), ("PYTHONHASHSEED", "3")):
        assert not server.forkable(command, {**env, name: value}), name
    assert server.forkable(command, {**env, "PYTHONPATH": "elsewhere", "CI": "true"})


def test_a_variable_read_at_start_up_changed_in_this_process_gets_a_new_server(pytester, monkeypatch):
    pytester.makepyfile(test_probe=PROBE)
    monkeypatch.setenv("FORK_PROBE", "yes")
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider").ret == 0  # a server exists now
    monkeypatch.setenv("TORCH_SHOW_CPP_STACKTRACES", "1")
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*FORKED: True*"])


WORKER_PROBE = """
    import json, os, sys

    def test_worker_probe():
        record = {"torch": "torch" in sys.modules, "cwd": os.getcwd(), "mark": os.environ.get("FORK_PROBE"),
                  "worker": os.environ.get("PYTEST_XDIST_WORKER"), "stdin_is_a_pipe": not os.isatty(0),
                  "main": getattr(sys.modules["__main__"], "__file__", None)}
        with open(f"probe-{record['worker']}.json", "w") as f:
            json.dump(record, f)
        if os.environ.get("FORK_PROBE") == "abort":
            os.abort()
"""


def test_the_xdist_workers_of_a_forked_run_are_forks_with_the_runs_environment(pytester, monkeypatch):
    """A forked run's xdist workers are forked too (they would each import torch again: about 3 CPU-s a worker),
    and start as `python -u -c <execnet's bootstrap>` would: the run's directory and environment, a fresh
    __main__; xdist drives them as it drives its own."""
    import json

    pytester.makepyfile(test_probe=WORKER_PROBE.replace("test_worker_probe", "test_a"),
                        test_other=WORKER_PROBE.replace("test_worker_probe", "test_b"))
    monkeypatch.setenv("FORK_PROBE", "yes")
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    records = [json.loads(p.read_text()) for p in pytester.path.glob("probe-gw*.json")]
    assert {r["worker"] for r in records} <= {"gw0", "gw1"} and records
    for record in records:
        assert record == {**record, "torch": True, "cwd": str(pytester.path), "mark": "yes", "main": None}


def test_an_xdist_worker_of_a_forked_run_that_aborts_is_a_crash_xdist_reports(pytester, monkeypatch):
    pytester.makepyfile(test_probe=WORKER_PROBE, test_more="def test_more():\n    pass\n")
    monkeypatch.setenv("FORK_PROBE", "abort")
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*worker 'gw*' crashed while running*test_worker_probe*"])
    result.assert_outcomes(passed=1, failed=1)


@pytest.mark.parametrize(("args", "forks"), [
    (("-n", "2"), True), (("-n2",), True), (("--numprocesses=auto",), True), (("--numprocesses", "4"), True),
    (("-n", "0"), False), (("-n0",), False), (("-q", "--backend=native"), False), (("--no-header",), False)])
def test_the_runs_that_start_xdist_workers_are_told_apart(args, forks):
    assert _uses_xdist(("-p", "no:cacheprovider", *args)) is forks
