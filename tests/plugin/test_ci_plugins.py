"""The harness beside the plugins CI jobs use: pytest-rerunfailures, pytest-timeout, warnings as errors, -x and
--sw. Each keeps its own behaviour, and the harness's verdict and exit status stay true; partial selections
pass only as `PASS (partial)`. Each case runs the suites in a subprocess, as a CI job would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# What these runs check needs no large batch: the threshold plans and sweeps at a CPU budget's 1/32.
SMALL = "--max-elements=262144"
ROOT = Path(__file__).resolve().parents[2]
H = "tests.helpers.hostile"
FAST = ["--pyargs", "rmsnorm_conformance.suites", "--sweep=ci", SMALL, "--max-examples=2", "--dtype=float32",
        "--device=cpu"]


@pytest.fixture
def gate(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))

    def go(*args: str, cache: bool = False):
        result = pytester.runpytest_subprocess(*FAST, *(() if cache else ("-p", "no:cacheprovider")),
                                               "--report=r.json", *args)
        path = pytester.path / "r.json"
        return result, json.loads(path.read_text()) if path.exists() else None

    return go


def test_a_breach_on_any_rerun_attempt_stays_in_the_verdict(gate):
    pytest.importorskip("pytest_rerunfailures")
    result, data = gate(f"--backend={H}:WrongOnFirstCalls", "--rule=axis_b.output", "--reruns=2")
    assert "1 rerun" in result.stdout.str() or "rerun" in result.stdout.str()
    assert result.ret == 1
    assert data["verdict"] == "FAIL"
    (failed,) = [o for o in data["outcomes"].values() if o["outcome"] == "failed"]
    assert "rerun" in failed["reason"] and failed["rule"] == "axis_b.output" and "--replay=" in failed["replay"]


def test_pytest_timeout_signal_method_ends_the_case_with_its_rule_and_replay(gate, monkeypatch):
    pytest.importorskip("pytest_timeout")
    monkeypatch.setenv("HOSTILE_SLEEP", "600")
    result, data = gate(f"--backend={H}:Sleeps", "--rule=axis_a.repeat", "--case-timeout=0", "--timeout=5",
                        "--timeout-method=signal")
    assert result.ret == 1
    assert "Timeout" in result.stdout.str()  # pytest-timeout's own message, untouched
    assert data["verdict"] == "FAIL"
    (failed,) = [o for o in data["outcomes"].values() if o["outcome"] == "failed"]
    assert failed["rule"] == "axis_a.repeat" and "--replay=" in failed["replay"]
    assert "ended by a test timeout" in failed["reason"]


def test_pytest_timeout_thread_method_ends_the_process_and_the_report_names_the_case(tmp_path):
    pytest.importorskip("pytest_timeout")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOSTILE_SLEEP": "600"}
    proc = subprocess.run([sys.executable, "-m", "pytest", *FAST, "-p", "no:cacheprovider", f"--backend={H}:Sleeps",
                           "--rule=axis_a.repeat", "--case-timeout=0", "--timeout=5", "--timeout-method=thread",
                           f"--report={tmp_path / 'r.json'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Timeout" in proc.stdout + proc.stderr  # pytest-timeout's own dump before its exit
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["verdict"] == "FAIL" and not data["complete"]
    (failed,) = [o for o in data["outcomes"].values() if o["outcome"] == "failed"]
    assert failed["rule"] == "axis_a.repeat" and "--replay=" in failed["replay"]


@pytest.mark.parametrize("how", [["-W", "error"], ["-o", "filterwarnings=error"]])
def test_warnings_as_errors_cannot_turn_an_interface_breach_into_a_failure(gate, how):
    result, data = gate("--backend=rmsnorm_conformance.zoo:ImpoliteRMSNorm", "--rule=interface.shape_error", *how)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert data["verdict"] == "PASS" and data["totals"]["failed_checks"] == 0
    assert data["totals"]["warned_checks"] > 0


def test_exit_first_after_a_failure_is_fail_with_exit_1_and_says_it_stopped(gate):
    result, data = gate("--backend=rmsnorm_conformance.zoo:OnePlusWeight",
    "--rule=semantics.plain_weight,axis_b.output",
                        "-x")
    assert result.ret == 1
    assert data["verdict"] == "FAIL" and not data["complete"] and data["not_started"] > 0
    assert "stopped" in data["incomplete"]


def test_stepwise_after_a_failure_is_fail_with_exit_1_and_names_stepwise(gate):
    result, data = gate("--backend=rmsnorm_conformance.zoo:OnePlusWeight",
    "--rule=semantics.plain_weight,axis_b.output",
                        "--sw", cache=True)
    assert result.ret == 1
    assert data["verdict"] == "FAIL" and not data["complete"]
    assert "interrupted (Ctrl-C" not in data["incomplete"] and "continuing from this test" in data["incomplete"]


def test_a_selection_passes_only_as_partial_with_the_selection_as_data(gate, pytester):
    result, data = gate("--backend=native", "--rule=axis_b.output", "-k", "not w_")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["RMSNorm conformance: PASS (partial)*", "*short of the full gate, which would add:*"])
    assert data["verdict"] == "PASS" and data["partial"] is True
    selection = data["selection"]
    assert selection["rules"] == ["axis_b.output"] and selection["dtypes"] == ["float32"]
    adds = "\n".join(selection["full_gate_adds"])
    assert "rules: only axis_b.output" in adds and "bfloat16" in adds and "-k 'not w_'" in adds
    assert (pytester.path / "r.json").exists()


def test_arguments_beside_the_whole_suites_narrow_nothing(pytester):
    """`pytest suites tests` (the suites whole, the project's own tests beside them) left nothing of the suites out,
    and its report said "tests left out by tests"; a part of the suites, or a run without them whole, narrows."""
    from rmsnorm_conformance.harness.plugin.selection import narrowed_tests

    suites = ROOT / "suites"
    assert narrowed_tests(pytester.parseconfig(str(suites), str(pytester.path))) == []
    one = str(suites / "test_axis_a.py")
    assert narrowed_tests(pytester.parseconfig(one)) == [one]
    assert narrowed_tests(pytester.parseconfig(str(suites), f"{one}::test_batch_size")) == [f"{one}::test_batch_size"]
    assert narrowed_tests(pytester.parseconfig(str(pytester.path))) == [str(pytester.path)]
