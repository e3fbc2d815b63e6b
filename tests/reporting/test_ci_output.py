"""What CI reads from a run (harness/reporting/ci_output.py, render.py's terminal): the step summary, the
annotations, the JUnit properties, a terminal that fits its width without wrapping a replay, and failed tests as
ids that can be pasted back."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rmsnorm_conformance.harness.reporting.ci_output import source_location, step_summary, workflow_annotations
from rmsnorm_conformance.harness.reporting.render import pyargs_id, render_markdown, render_terminal, rerun_command
from rmsnorm_conformance.harness.vocabulary.records import Check, Collector

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "suites"
REPLAY = ("pytest --pyargs rmsnorm_conformance.suites --backend=kern:Bad --device=cpu --dtype=float32 "
          "--rule=axis_a.batch_size --contract-profile=seed --replay=\"BatchSizeCase(batch=Batch(dim=4096, "
          "rows=512, dtype='float32', values='normal', weight='normal', eps=1e-06, seed=0), length=7, start=0, "
          "entry='forward')\"")
LONG_REASON = ("Axis-A thresholds (rows) beyond the element budget of 8388608 (the CPU's fixed budget), not checked: "
               "dim 4096: 2048, 2049, 4096, 8192, 16384, 32767, 32768, 65536, 131072; dim 8192: 1024, 1025, 2047, "
               "2048, 2049, 4096, 8192, 16384. Raise --max-elements where memory allows")


def _collector(breaches: int = 1) -> Collector:
    c = Collector(environment={"contract version": "2", "command": "pytest --pyargs rmsnorm_conformance.suites "
                                                                  "--backend=kern:Bad -n 2 --report=r.md"})
    c.conformance_tests = 2
    for i in range(breaches):
        c.add(Check(f"bad{i}", "cpu", "float32", 4096, "axis_a.batch_size", False, case="BatchSizeCase(...)",
                    detail="not equal: 9 / 32768 elements differ, 50% of them", replay=REPLAY, size=4096))
    c.add(Check("good", "cpu", "float32", 4096, "axis_a.batch_size", True))
    c.add(Check("good", "cpu", "float32", 4096, "interface.shape_error", False, detail="raised RuntimeError",
                replay="pytest x --replay=y", severity="interface", gating=False))
    c.add(Check("cinlib.rms_norm_badfake", "cpu", "float32", 128, "interface.opcheck", False, severity="interface",
                detail="torch.library.opcheck(cinlib.rms_norm_badfake.default) failed: OpCheckError: opcheck(op, "
                       "...): test_autograd_registration failed with cinlib::rms_norm_badfake", gating=False,
                replay="pytest --pyargs rmsnorm_conformance.suites --backend=kshapes:cinlib::rms_norm_badfake"))
    c.outcomes["test_axis_a.py::test_batch_size[bad0-cpu-float32]"] = {
        "outcome": "failed", "reason": "contract rule axis_a.batch_size", "replay": REPLAY,
        "where": "bad0-cpu-float32", "backend": "bad0", "device": "cpu", "rule": "axis_a.batch_size"}
    for backend in ("bad0", "good"):
        for dtype in ("float32", "bfloat16", "float16"):
            c.outcomes[f"test_axis_a.py::test_batch_size_at_thresholds[{backend}-cpu-{dtype}]"] = {
                "outcome": "skipped", "reason": LONG_REASON, "where": f"{backend}-cpu-{dtype}"}
    c.add_not_run("bad0", "cpu", LONG_REASON)
    return c


def test_step_summary_has_the_verdict_the_pick_table_and_the_first_breaches_with_replays():
    assert step_summary(_collector(), reports=("out/r.md", "out/r.json")).endswith(
        "The full report: `out/r.md`, `out/r.json`.\n")
    text = step_summary(_collector(breaches=8), limit=3)
    assert text.startswith("### RMSNorm conformance: FAIL")
    assert "#### Pick a kernel" in text and "| good | cpu | PASS |" in text
    assert "#### Breaches (the first 3 of 10)" in text
    assert text.count("```bash") == 3 and f"  {REPLAY}" in text.splitlines()
    assert "axis_a.batch_size" in text


def test_annotations_escape_what_github_reads_and_say_how_many_were_left_out():
    lines = workflow_annotations(_collector(breaches=12), {"bad0": ("kern/ops.py", 7)}, limit=10)
    errors = [ln for ln in lines if ln.startswith("::error ")]
    assert len(errors) == 11 and errors[-1].endswith("::2 more errors; see the report")
    first = errors[0]
    assert first.startswith("::error file=kern/ops.py,line=7,"
                            "title=axis_a.batch_size broken by bad0 on cpu%2C float32::")
    message = first.split("::", 2)[2]
    assert "\n" not in first and "%0Areplay: pytest --pyargs" in message and "50%25 of them" in message
    assert errors[1].startswith("::error title=")  # a backend whose source is not in the repository: no file
    warnings = [ln for ln in lines if ln.startswith("::warning ")]
    assert len(warnings) == 2 and any("interface.shape_error broken by good" in w for w in warnings)


def test_source_location_is_relative_to_the_repository_or_none(tmp_path, monkeypatch):
    (tmp_path / "kernpkg").mkdir()
    (tmp_path / "kernpkg" / "__init__.py").write_text("\n\ndef rms_norm(x, weight, eps=1e-6):\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert source_location("kernpkg:rms_norm", root=tmp_path) == ("kernpkg/__init__.py", 3)
    assert source_location("mine", {"mine": "kernpkg:rms_norm"}, root=tmp_path) == ("kernpkg/__init__.py", 3)
    assert source_location("kernpkg:rms_norm", root=tmp_path / "elsewhere") is None
    assert source_location("native") is None


def test_the_terminal_fits_120_columns_and_never_wraps_a_replay():
    text = "\n".join(render_terminal(_collector(), verbose=False, width=120))
    lines = text.splitlines()
    assert REPLAY in lines[lines.index("replay:") + 1] or any(ln.endswith(REPLAY) for ln in lines)
    for line in lines:
        assert len(line) <= 120 or "pytest" in line, line  # only whole commands may be longer
    did_not_run = lines[next(i for i, ln in enumerate(lines) if ln.startswith("Did not run")):]
    assert sum("Axis-A thresholds" in ln for ln in did_not_run) == 1, "one row per reason"
    assert "[1]" in text  # the interface warning's replay is a reference below its table


def test_narrow_terminals_wrap_tables_between_words_never_inside_one():
    """A rule id, a test id or an option split across lines can be neither read whole nor searched for: at any
    width every word of the tables is printed whole (a table that cannot fit is wider than the terminal)."""
    c = _collector()
    c.add_not_run("rms_norm_eps_outside_sqrt", "cpu", "a reason naming --max-elements and gradients.dw_tolerance")
    for width in (60, 80, 120):
        words = "\n".join(render_terminal(c, verbose=True, width=width)).split()
        for word in ("axis_a.batch_size", "interface.shape_error", "gradients.dw_tolerance", "--max-elements",
                     "bad0-cpu-float32", "cinlib.rms_norm_badfake", "rms_norm_eps_outside_sqrt"):
            assert any(word in w for w in words), (width, word)
        assert not any(w.endswith("-") and not w.startswith("-") for w in words), width


def test_the_terminal_lists_what_a_budget_left_out_once():
    """The thresholds a budget left out are a long list: "Did not run" holds it, the headline's notes name it."""
    c = _collector()
    c.selection = {"sweep": "ci", "sweep_is_gate": True, "full_gate_adds": [f"bad0 on cpu: {LONG_REASON}"]}
    text = " ".join("\n".join(render_terminal(c, width=120)).split())
    assert text.count("65536, 131072; dim 8192") == 1
    assert "- bad0 on cpu: Axis-A thresholds (rows) beyond the element budget of 8388608 (the CPU's fixed budget), " \
           "not checked: listed under 'Did not run' below" in text
    assert f"- bad0 on cpu: {LONG_REASON}" in render_markdown(c)  # the report file keeps the list whole in both


def test_failed_tests_are_ids_that_can_be_pasted_back():
    nodeid = "test_axis_a.py::test_batch_size[bad0-cpu-float32]"
    assert pyargs_id(nodeid) == "rmsnorm_conformance.suites.test_axis_a::test_batch_size[bad0-cpu-float32]"
    assert pyargs_id("../venv/lib/site-packages/rmsnorm_conformance/suites/test_semantics.py::test_x[a]") == \
        "rmsnorm_conformance.suites.test_semantics::test_x[a]"
    assert pyargs_id("tests/test_mine.py::test_y") == "tests/test_mine.py::test_y"  # not a suite: as it is
    # A node id without its file (pytest's, for --pyargs 'module::test' run from outside the package): the
    # suite's module the plugin noted names it.
    assert pyargs_id("::test_x[a]", "test_semantics") == "rmsnorm_conformance.suites.test_semantics::test_x[a]"
    assert pyargs_id("::test_x[a]") == "::test_x[a]"
    command = rerun_command(nodeid, REPLAY, "")
    assert shlex.split(command) == ["pytest", "--pyargs", pyargs_id(nodeid), "--backend=kern:Bad", "--device=cpu",
                                    "--dtype=float32", "--contract-profile=seed"]
    # Without a replay, the run's own options, less its targets, reports and workers.
    command = rerun_command(nodeid, "", "pytest --pyargs rmsnorm_conformance.suites --backend=kern:Bad -n 2 "
                                        "--report=r.md --rule axis_a.batch_size --sweep=ci")
    assert shlex.split(command) == ["pytest", "--pyargs", pyargs_id(nodeid), "--backend=kern:Bad", "--sweep=ci"]
    terminal = "\n".join(render_terminal(_collector()))
    assert "FAILED rmsnorm_conformance.suites.test_axis_a::test_batch_size[bad0-cpu-float32]" in terminal
    assert "re-run the test: pytest --pyargs" in terminal


def test_a_re_run_keeps_each_option_with_its_value(pytester):
    """Without a replay the re-run is the run's command less its targets: an option's value standing alone had been
    dropped as a target (``-p no:cacheprovider`` left ``-p`` to swallow the next option, ``--basetemp DIR`` an
    option with no value). The command the report keeps joins each value to its option."""
    from rmsnorm_conformance.harness.plugin.run_options import run_command

    config = pytester.parseconfig("--pyargs", "rmsnorm_conformance.suites", "-p", "no:cacheprovider", "--backend",
                                  "kern:Bad", "-k", "batch and not thresholds", "--basetemp", "bt", "-q", "-n", "2")
    nodeid = "test_axis_a.py::test_batch_size[bad0-cpu-float32]"
    assert shlex.split(rerun_command(nodeid, "", run_command(config))) == [
        "pytest", "--pyargs", pyargs_id(nodeid), "-pno:cacheprovider", "--backend=kern:Bad",
        "-kbatch and not thresholds", "--basetemp=bt", "-q"]


@pytest.fixture
def ci_env(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "summary.md"))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(ROOT))
    return pytester


def test_a_run_under_github_actions_writes_the_summary_annotations_and_junit_properties(ci_env):
    summary = ci_env.path / "summary.md"
    summary.write_text("earlier output of the step\n")
    result = ci_env.runpytest_subprocess(
        str(SUITES / "test_semantics.py"), "--backend=rmsnorm_conformance.zoo:OnePlusWeight",
        "--device=cpu", "--sweep=ci",
        "-p", "no:cacheprovider", "-k", "(plain_weight or shape_error) and float32", "--junitxml=junit.xml")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    text = summary.read_text()
    assert text.startswith("earlier output of the step\n### RMSNorm conformance: FAIL"), text
    assert "semantics.plain_weight" in text and "```bash" in text
    assert "The full report: add `--report=conformance.md`" in text  # the run wrote none: how to get one
    errors = [ln for ln in out.splitlines() if ln.startswith("::error ")]
    assert errors and errors[0].startswith("::error file=zoo/defects.py,line=")
    assert "title=semantics.plain_weight broken by one_plus_weight on cpu%2C float32" in errors[0]
    cases = {tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")}
             for tc in ET.parse(ci_env.path / "junit.xml").getroot().iter("testcase")}
    failed = cases["test_plain_weight[one_plus_weight-cpu-float32]"]
    assert failed["rule"] == "semantics.plain_weight" and failed["severity"] == "numerics"
    assert failed["backend"] == "one_plus_weight" and failed["device"] == "cpu" and failed["dtype"] == "float32"
    assert failed["replay"].startswith("pytest --pyargs rmsnorm_conformance.suites --backend=rmsnorm_conformance.zoo:")
    assert not any(v.startswith("{") for props in cases.values() for v in props.values()), "a Python repr"
    # The replay in the properties reproduces the failure.
    again = subprocess.run([sys.executable, "-m", *shlex.split(failed["replay"]), "-p", "no:cacheprovider"],
                           cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                           check=False)
    assert again.returncode == 1 and "contract rule semantics.plain_weight" in again.stdout


def test_interface_warnings_are_junit_properties(ci_env):
    result = ci_env.runpytest_subprocess(
        str(SUITES / "test_semantics.py"), "--backend=torch_rms_norm", "--device=cpu", "--sweep=ci",
        "-p", "no:cacheprovider", "-k", "shape_error and float32", "--junitxml=junit.xml")
    assert result.ret == 0, result.stdout.str()[-3000:]
    (case,) = ET.parse(ci_env.path / "junit.xml").getroot().iter("testcase")
    warnings = [p.get("value") for p in case.iter("property") if p.get("name") == "interface_warning"]
    assert warnings and warnings[0].startswith("interface.shape_error: ") and "| replay: pytest" in warnings[0]
    assert [ln for ln in result.stdout.str().splitlines() if ln.startswith("::warning ")]


def test_no_summary_or_annotations_outside_ci(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    result = pytester.runpytest_subprocess(
        str(SUITES / "test_semantics.py"), "--backend=rmsnorm_conformance.zoo:OnePlusWeight",
        "--device=cpu", "--sweep=ci",
        "-p", "no:cacheprovider", "-k", "plain_weight and float32")
    assert result.ret == 1
    assert not [ln for ln in result.stdout.str().splitlines() if ln.startswith("::")]


def test_a_test_run_by_its_pyargs_id_from_elsewhere_is_named_whole(pytester, monkeypatch):
    """Run as the report's re-run line says, from a folder outside the package, pytest gives the test a node id
    with no file (``::test_eps_inside_sqrt[...]``); the harness's failure line and re-run command still name it."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    test = "rmsnorm_conformance.suites.test_semantics::test_eps_inside_sqrt[eps_outside_sqrt-cpu-bfloat16]"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--pyargs", test,
                                           "--backend=rmsnorm_conformance.zoo:EpsOutsideSqrt", "--device=cpu",
                                           "--dtype=bfloat16")
    assert result.ret == 1, result.stdout.str()
    lines = result.stdout.str().splitlines()
    assert f"FAILED {test}" in lines
    assert any(ln.startswith(f"  re-run the test: pytest --pyargs '{test}' ") for ln in lines)


def test_the_verbose_tolerance_table_says_why_a_large_ulp_count_can_pass():
    """A max ULP of 30,266 beside a passing margin reads as a bug in the harness unless the table says that the
    worst relative error sits where the reference is near zero and atol allows it."""
    c = _collector()
    c.add(Check("good", "cpu", "bfloat16", 4096, "gradients.dw_tolerance", True, max_abs=0.0585, max_rel=12.0,
                max_ulp=30266, margin=0.314))
    verbose = "\n".join(render_terminal(c, verbose=True, width=120))
    assert "30266" in verbose and "they can be large while the margin passes" in " ".join(verbose.split())
    assert "they can be large" not in "\n".join(render_terminal(c, verbose=False, width=120))


def test_a_narrowed_header_takes_two_lines_at_most():
    """'failed rules / reason' narrowed to its longest word read down four lines at 80 columns."""
    from rmsnorm_conformance.harness.reporting.render import fitted_table

    headers = ["backend", "device", "checks", "failed", "verdict", "failed rules / reason", "interface warnings"]
    for width in (60, 80, 100):
        lines = fitted_table([["native", "cpu", "27503", "0", "PASS", "–", "–"]], headers, width).splitlines()
        rule = next(i for i, ln in enumerate(lines) if ln.startswith("---"))
        assert rule <= 2, (width, lines[:rule])
