"""The installed plugin costs a pytest run that is not a conformance run nothing: loading it imports neither torch
nor Hypothesis, numpy or tabulate, and it becomes active (with torch) only under the rule its entry module states.

These check imports, not wall time; reports/cpu/plugin-import.md measures the time.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "suites"
HEAVY = ("torch", "hypothesis", "numpy", "tabulate")
# What these check is what a fresh interpreter imports: no fork of one that imported torch
# (tests/helpers/forkserver.py).
pytestmark = pytest.mark.fresh_interpreter

# A test file that reports, in its own output, which heavy modules the run had imported by the time it ran.
PROBE = """
    import sys

    def test_probe(pytestconfig):
        assert pytestconfig.pluginmanager.has_plugin("rmsnorm_conformance"), "the plugin must be loaded"
        print("HEAVY:" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""


def _heavy_imported(result: pytest.RunResult) -> list[str]:
    found = re.search(r"HEAVY:([\w,]*)", result.stdout.str())
    assert found, result.stdout.str()
    return [m for m in found.group(1).split(",") if m]


def test_importing_the_entry_module_imports_no_heavy_module():
    code = ("import sys, rmsnorm_conformance.harness.plugin.hooks; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"importing the plugin's entry module imported {out.stdout.strip()}"


def test_the_report_writer_imports_no_torch():
    """The report's writer runs in a process whose import of torch a Ctrl-C may have cut short, to say the run was
    interrupted (harness/plugin/controller.py): importing torch again there fails, or crashes the process."""
    code = ("import sys; from rmsnorm_conformance.harness.reporting.render import write_report; "
            "from rmsnorm_conformance.harness.vocabulary.records import Collector; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "importing the report's writer imported torch"


def test_a_run_without_conformance_tests_or_options_imports_no_heavy_module(pytester):
    pytester.makepyfile(test_probe=PROBE.format(heavy=HEAVY))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-s")
    assert result.ret == 0, result.stdout.str()
    assert _heavy_imported(result) == []


def test_a_conformance_option_activates_the_plugin(pytester):
    pytester.makepyfile(test_probe=PROBE.format(heavy=HEAVY))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-s", "--sweep=ci",
                                           "--device=cpu")
    assert "torch" in _heavy_imported(result), result.stdout.str()
    result.stdout.fnmatch_lines(["rmsnorm-conformance: contract *, sweep ci"])  # the active run's header


def test_a_collected_test_that_asks_for_a_subject_activates_the_plugin(pytester, monkeypatch):
    """A conformance test outside the shipped suites, with no option given, is parametrized and run."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_mine="""
        def test_runs_against_a_subject(subject):
            assert subject.dtype in ("float32", "bfloat16", "float16")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-v")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_runs_against_a_subject[[]native-cpu-float32[]] PASSED*"])


def test_the_shipped_suites_named_by_path_activate_the_plugin(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess(str(SUITES / "test_axis_b.py"), "--collect-only",
                                           "-p", "no:cacheprovider")
    # Active from configure on: the reporter's header, then the tests parametrized over the backends.
    result.stdout.fnmatch_lines(["rmsnorm-conformance: contract *", "*test_output[[]native-cpu-bfloat16[]]*"])


LOADERS = """
    import sys

    def test_loaders():
        import rmsnorm_conformance.suites.test_axis_b  # a shipped suite, imported as collection imports it
        names = ("rmsnorm_conformance.harness.plugin.active", "rmsnorm_conformance.harness.checking.checks",
                 "rmsnorm_conformance.contract.reference", "rmsnorm_conformance.suites.test_axis_b")
        print("LOADERS:" + ",".join(type(sys.modules[n].__loader__).__name__ for n in names))
"""


def test_pytest_rewrites_the_suites_asserts_and_not_the_harness_modules(pytester, monkeypatch):
    """The harness loads as plain bytecode: a first run after an install rewrites no module of it from source
    (harness/plugin/rewrite.py); the suites keep pytest's assertion rewriting."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_loaders=LOADERS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-s", "--sweep=ci",
                                           "--device=cpu")
    result.stdout.fnmatch_lines(["rmsnorm-conformance: contract *"])  # a conformance run: the plugin is active
    found = re.search(r"LOADERS:([\w,]*)", result.stdout.str())
    assert found, result.stdout.str()
    *harness, suite = found.group(1).split(",")
    assert "AssertionRewritingHook" not in harness, harness
    assert suite == "AssertionRewritingHook", suite


def test_a_sigint_that_an_import_swallows_still_interrupts(tmp_path, monkeypatch):
    """The run's first import of torch goes through ``import_interruptibly``: torch's own import turns a
    KeyboardInterrupt raised while it imports numpy into a warning, and the run went on to PASS."""
    from rmsnorm_conformance.harness.plugin.hooks import import_interruptibly

    (tmp_path / "swallows_sigint.py").write_text(
        "import os, signal, time\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(1)\n"
        "except BaseException:\n"
        "    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # Python's own Ctrl-C handler, as in a run from a terminal (a job started in the background ignores SIGINT).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt, match="swallows_sigint"):
            import_interruptibly("swallows_sigint")
        monkeypatch.delitem(sys.modules, "swallows_sigint")
        __import__("swallows_sigint")  # a plain import loses it (else this test would have been interrupted)
    finally:
        signal.signal(signal.SIGINT, previous)
