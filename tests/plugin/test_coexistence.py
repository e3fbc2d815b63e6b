"""The plugin beside another test suite: a project's conftest may add options of the harness's short names, and a
project may configure conformance in a file without its own test runs changing."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

# A conftest as ML repositories write them: options of the names the harness uses too, read by a fixture.
CLAIMING_CONFTEST = """
    import pytest

    def pytest_addoption(parser):
        parser.addoption("--device", default="cpu")
        parser.addoption("--dtype", default="float32")
        parser.addoption("--backend", default="eager")
        parser.addoption("--report", action="store_true")
        parser.addoption("--rule", default="")
        parser.addoption("--deadline", type=int, default=0)

    @pytest.fixture
    def chosen(request):
        return {name: request.config.getoption(name) for name in ("--device", "--dtype", "--backend", "--report")}
"""
OWN_TEST = """
    def test_own(chosen):
        assert chosen == {"--device": "cuda", "--dtype": "bfloat16", "--backend": "mine", "--report": True}
"""
OWN_ARGS = ("--device=cuda", "--dtype=bfloat16", "--backend=mine", "--report", "-p", "no:cacheprovider")
# One quick conformance test: the output sweep of Axis-B on the CPU in float32, at a small budget.
ONE_TEST = ("--pyargs", "rmsnorm_conformance.suites.test_axis_b", "-k", "test_output and not fused", "-p",
            "no:cacheprovider")


def _conformance_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if ("rmsnorm" in line.lower() or "conformance" in line.lower())
            and not line.startswith(("plugins:", "rootdir:"))]


def test_a_conftest_that_adds_the_harness_option_names_runs_its_own_tests(pytester):
    """pytest refuses two options of one name: the plugin gives its short names up to the project's conftest, and
    the run of the project's tests is as it would be without the plugin."""
    pytester.makeconftest(CLAIMING_CONFTEST)
    pytester.makepyfile(test_own=OWN_TEST)
    result = pytester.runpytest_subprocess(*OWN_ARGS)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)
    assert _conformance_lines(result) == []


def test_a_plugin_loaded_before_the_harness_keeps_its_option(pytester):
    """The other order: a plugin registered before the harness's already holds ``--backend``; the harness takes
    only its prefixed name for it."""
    pytester.makepyfile(claims_backend="""
        def pytest_addoption(parser):
            parser.addoption("--backend", default="eager")
    """)
    pytester.makepyfile(test_own="""
        def test_own(pytestconfig):
            assert pytestconfig.getoption("--backend") == "mine"
    """)
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess("-p", "claims_backend", "--backend=mine", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)


def test_where_a_conftest_took_the_short_names_the_prefixed_ones_run_conformance(pytester):
    """Beside that conftest, ``--rmsnorm-backend`` and the rest run the suites, the names not taken keep their short
    form, and a failure's replay names each option as this run takes it."""
    pytester.makeconftest(CLAIMING_CONFTEST)
    result = pytester.runpytest_subprocess(
        *ONE_TEST, "--rmsnorm-backend=rmsnorm_conformance.zoo:OnePlusWeight", "--rmsnorm-device=cpu",
        "--rmsnorm-dtype=float32", "--max-elements=262144", "--sweep=ci", "--rmsnorm-report=out/r.json",
        "--device=cuda")
    assert result.ret == 1, result.stdout.str()
    data = json.loads((pytester.path / "out/r.json").read_text())
    assert data["verdict"] == "FAIL"
    replay = next(line for line in result.outlines if "--replay=" in line or "--rmsnorm-replay=" in line)
    assert "--rmsnorm-backend=rmsnorm_conformance.zoo:OnePlusWeight" in replay
    assert "--rmsnorm-device=cpu" in replay and "--rmsnorm-rule=" in replay
    assert "--contract-profile=seed" in replay, "a name no conftest took keeps its short form"


def _pyproject(pytester: pytest.Pytester, text: str) -> None:
    pytester.path.joinpath("pyproject.toml").write_text(textwrap.dedent(text))


def test_a_gate_configured_in_pyproject_runs_with_no_command_line_options(pytester):
    """Backend, devices, dtype, sweep and reports from ``[tool.rmsnorm_conformance]``, the suites from testpaths:
    ``pytest`` alone runs the gate and writes the report."""
    _pyproject(pytester, """
        [tool.pytest.ini_options]
        addopts = "--pyargs -k 'test_output and not fused' -p no:cacheprovider"
        testpaths = ["rmsnorm_conformance.suites.test_axis_b"]

        [tool.rmsnorm_conformance]
        backend = "native"
        device = "cpu"
        dtype = ["float32"]
        sweep = "ci"
        max_elements = 262144
        report = ["out/r.json"]
    """)
    result = pytester.runpytest_subprocess()
    assert result.ret == 0, result.stdout.str()
    data = json.loads((pytester.path / "out/r.json").read_text())
    assert data["verdict"] == "PASS" and data["totals"]["checks"] > 0
    assert data["environment"]["backends"] == "native" and data["environment"]["sweep"].startswith("ci")


def test_the_command_line_overrides_the_file_and_ini_keys_override_the_table(pytester):
    _pyproject(pytester, """
        [tool.pytest.ini_options]
        rmsnorm_sweep = "ci"
        rmsnorm_device = "cpu"
        rmsnorm_report = "out/r.json"

        [tool.rmsnorm_conformance]
        backend = "native"
        sweep = "dev"
        dtype = "float32"
        max_elements = 262144
    """)
    result = pytester.runpytest_subprocess(*ONE_TEST, "--backend=torch_rms_norm")
    assert result.ret == 0, result.stdout.str()
    data = json.loads((pytester.path / "out/r.json").read_text())
    assert data["environment"]["backends"] == "torch_rms_norm", "the command line's backend, not the file's"
    assert data["environment"]["sweep"].startswith("ci"), "the ini key's sweep, not the table's"


def test_conformance_settings_leave_a_run_of_the_projects_own_tests_as_it_was_and_say_so_once(pytester):
    """Settings in addopts, an ini key and the table: a plain ``pytest`` of the project's tests passes with exit 0
    and one line saying why no conformance test ran (it once exited 5 with no word)."""
    _pyproject(pytester, """
        [tool.pytest.ini_options]
        addopts = "--backend=mykernel:rms_norm -p no:cacheprovider"
        rmsnorm_report = "out/r.json"

        [tool.rmsnorm_conformance]
        sweep = "smoke"
        deadline = "soon"
    """)
    pytester.makepyfile(test_own="def test_own():\n    pass\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)
    said = _conformance_lines(result)
    assert len(said) == 1, said
    assert re.search(r"backend=mykernel:rms_norm.*no conformance suite was selected.*--pyargs "
                     r"rmsnorm_conformance\.suites", said[0])
    assert not (pytester.path / "out/r.json").exists()


def test_a_wrong_setting_in_the_file_is_a_usage_error_of_a_conformance_run(pytester):
    _pyproject(pytester, """
        [tool.rmsnorm_conformance]
        deadline = "soon"
        colour = "blue"
    """)
    result = pytester.runpytest_subprocess(*ONE_TEST, "--backend=native")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = result.stderr.str()
    assert "deadline = 'soon': not a number" in said and "unknown key 'colour'" in said, said


def test_workers_from_the_file_become_xdist_workers_of_a_conformance_run(pytester):
    _pyproject(pytester, """
        [tool.rmsnorm_conformance]
        workers = 2
        device = "cpu"
        dtype = "float32"
        max_elements = 262144
    """)
    result = pytester.runpytest_subprocess(*ONE_TEST, "--backend=native", "--sweep=ci")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*2 workers*"])
