"""An xdist worker of a conformance run ends without the interpreter's teardown (harness/plugin/worker_exit.py), and
only there: the run's verdict and report are whole, and every other process exits as before.

What shows the teardown: an exit handler registered before the plugin is imported (``-p`` loads a module before
pytest's entry points), so it runs after the plugin's, where the plugin's handler ends the process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rmsnorm_conformance.harness.plugin import worker_exit

ROOT = Path(__file__).resolve().parents[2]
EARLY_HANDLER = """
import atexit, os

ROLE = os.environ.get("PYTEST_XDIST_WORKER", "controller")


def _ran():
    with open(f"exit-handlers-ran-{ROLE}", "w") as f:
        f.write("ran")


atexit.register(_ran)
"""


@pytest.fixture
def run(pytester, monkeypatch):
    pytester.makepyfile(early_handler=EARLY_HANDLER)
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{pytester.path}")
    monkeypatch.delenv(worker_exit.SWITCH, raising=False)
    # Under CI's own xdist this process is a worker: the run's controller must not inherit its name.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    return lambda *args: pytester.runpytest_subprocess("-p", "early_handler", "-p", "no:cacheprovider", "-n", "1",
                                                       *args)


def _ran(pytester) -> set[str]:
    return {p.name.rsplit("-", 1)[1] for p in pytester.path.glob("exit-handlers-ran-*")}


def test_a_conformance_runs_worker_skips_the_teardown_and_the_report_is_whole(run, pytester):
    result = run("--pyargs", "rmsnorm_conformance.suites.test_axis_b", "--backend=native", "--device=cpu",
                 "--dtype=bfloat16", "--sweep=smoke", "-k", "test_output", "--report=r.json")
    assert result.ret == 0, result.stdout.str()
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["verdict"].startswith("PASS") and report["totals"]["checks"] > 0
    # The controller's exit is untouched; the worker ended in the plugin's handler, before the early one.
    assert _ran(pytester) == {"controller"}


def test_a_users_own_tests_under_xdist_exit_as_before(run, pytester):
    pytester.makepyfile(test_user="def test_user():\n    assert True\n")
    result = run("test_user.py")
    assert result.ret == 0, result.stdout.str()
    assert _ran(pytester) == {"controller", "gw0"}


@pytest.mark.parametrize(("switch", "coverage", "skips"),
                         [("1", False, True), ("0", False, False), ("1", True, False)])
def test_the_switch_and_a_coverage_tool_keep_the_teardown(monkeypatch, switch, coverage, skips):
    monkeypatch.setitem(worker_exit._state, "armed", True)
    monkeypatch.setitem(worker_exit._state, "conformance", True)
    monkeypatch.setenv(worker_exit.SWITCH, switch)
    if coverage:
        monkeypatch.setitem(sys.modules, "coverage", sys)
    else:
        monkeypatch.delitem(sys.modules, "coverage", raising=False)
    assert worker_exit.skips_teardown() is skips
