"""pytest-xdist's controller of a conformance run (harness/plugin/controller.py): its workers start before it imports
torch and resolves the options, the run's deadline still counts from its configure, and a usage error found then
ends the run as one found at configure does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ["--pyargs", "rmsnorm_conformance.suites", "--backend=native", "--device=cpu", "--dtype=float32",
       "--sweep=smoke", "--rule=axis_b.output", "-n", "2", "-p", "no:cacheprovider", "-p", "probe",
       "--report=r.json"]

# In the controller: whether torch was imported when xdist configured each worker, what each worker was handed, the
# time of this plugin's configure (just after the harness's) and the run's end the resolved options hold.
PROBE = '''
import json, sys, time

import pytest

seen = {"configure": None, "nodes": [], "resolved_ends_at": None}


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    seen["configure"] = time.time()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    seen["nodes"].append({"torch": "torch" in sys.modules,
                          "ends_at": node.workerinput.get("rmsnorm_conformance_run_ends_at")})


def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        return
    from rmsnorm_conformance.harness.plugin.state import OPTIONS

    options = config.stash.get(OPTIONS, None)
    seen["resolved_ends_at"] = options.run_ends_at if options else None
    with open("probe.json", "w") as f:
        json.dump(seen, f)
'''


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{':' + str(pytester.path)}")
    (pytester.path / "probe.py").write_text(PROBE)

    def go(*args: str):
        result = pytester.runpytest_subprocess(*RUN, *args)
        probe = pytester.path / "probe.json"
        report = pytester.path / "r.json"
        return (result, json.loads(probe.read_text()) if probe.exists() else None,
                json.loads(report.read_text()) if report.exists() else None)

    return go


# A fresh interpreter each: a run forked from the tests' torch server has torch imported before it starts.
@pytest.mark.fresh_interpreter
@pytest.mark.parametrize(("switch", "torch_first"), [(None, False), ("0", True)])
def test_workers_start_before_the_controller_imports_torch(run, monkeypatch, switch, torch_first):
    if switch is None:
        monkeypatch.delenv("RMSNORM_CONFORMANCE_EARLY_WORKERS", raising=False)
    else:
        monkeypatch.setenv("RMSNORM_CONFORMANCE_EARLY_WORKERS", switch)
    result, probe, report = run("--deadline=600")
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert [node["torch"] for node in probe["nodes"]] == [torch_first, torch_first]
    # Resolved all the same: the header names the run, the report is the run's.
    assert "rmsnorm-conformance: backends native; devices cpu; dtypes float32" in result.stdout.str()
    assert report["verdict"] == "PASS" and report["totals"]["checks"] > 0
    # The deadline counts from the controller's configure (the harness's, just before the probe's), not from
    # when it resolved (a second or more later in a fresh interpreter: torch's import alone), and every worker was
    # handed that end. (Resolved at configure, the probe's configure comes after the resolution.)
    if torch_first:
        assert probe["resolved_ends_at"] < probe["configure"] + 600, probe
    else:
        assert abs(probe["resolved_ends_at"] - (probe["configure"] + 600)) < 0.5, probe
    assert [node["ends_at"] for node in probe["nodes"]] == [probe["resolved_ends_at"]] * 2


@pytest.mark.parametrize(("option", "message"), [
    ("--backend=no_such_backend", "--backend: unknown backend 'no_such_backend'"),
    ("--device=cuda:7", "--device=cpu,cuda:7: cuda:7"),  # beside the run's own --device=cpu: both are asked for
    ("--deadline=-3", "--deadline=-3: must be 0 (no limit) or more seconds"),
])
def test_a_usage_error_found_after_the_workers_started_ends_the_run_as_one(run, option, message):
    result, _, report = run(option)
    assert result.ret == 4
    assert f"ERROR: {message}" in result.stderr.str() + result.stdout.str()
    assert report["verdict"] == "NOT RUN" and message in report["usage_error"]


# A plugin that interrupts the run at the end of configure, before the session and the reporter start.
INTERRUPT = """
import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        raise KeyboardInterrupt
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_an_interrupt_before_the_reporter_starts_leaves_an_incomplete_report(pytester, monkeypatch, workers):
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{':' + str(pytester.path)}")
    (pytester.path / "interrupt.py").write_text(INTERRUPT)
    (pytester.path / "r.json").write_text(json.dumps({"verdict": "PASS"}))  # a previous run's
    result = pytester.runpytest_subprocess("--pyargs", "rmsnorm_conformance.suites", "--backend=native",
                                           "--device=cpu", "--sweep=smoke", "-p", "no:cacheprovider", "-p",
                                           "interrupt", "--report=r.json", *workers)
    assert result.ret == 2
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["verdict"] == "INCOMPLETE" and report["incomplete"].startswith("interrupted (Ctrl-C or a signal)")


def _check_reports_repeatedly(path: str, times: int) -> int:
    """How many of ``times`` checks of ``path`` as a --report failed (run in a process of its own)."""
    from rmsnorm_conformance.harness.plugin.run_options import _check_reports

    failed = 0
    for _ in range(times):
        try:
            _check_reports((path,))
        except pytest.UsageError:
            failed += 1
    return failed


def test_report_paths_checked_by_every_process_at_once_never_read_as_unwritable(tmp_path):
    """Under -n the controller and each worker check the --report paths at the same time; with one probe file
    name for all of them, one process deleted another's probe and the run ended in a false usage error ("cannot
    write there: No such file or directory"): 1 run in 12 with two workers; about half of these checks."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(3) as pool:
        failed = pool.starmap(_check_reports_repeatedly, [(str(tmp_path / "r.json"), 300)] * 3)
    assert failed == [0, 0, 0]
    assert not list(tmp_path.iterdir())  # no probe left behind
