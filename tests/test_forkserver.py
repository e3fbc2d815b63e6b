"""tests/forkserver.py: pytester's pytest subprocesses forked from a server that imported torch are still processes
of their own, with the command's environment, output and exit status; what could differ falls back to a fresh
interpreter."""

from __future__ import annotations

import os
import sys

import pytest

from tests.forkserver import ForkServer

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
