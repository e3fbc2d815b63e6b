"""The plugin end to end, through `pytester` subprocesses: options, skip reasons, reports, replay, xdist."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

# What these runs check needs no large batch: the threshold plans and sweeps at a CPU budget's 1/32.
SMALL = "--max-elements=262144"
ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "suites"


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))

    def go(*args):
        return pytester.runpytest_subprocess("--sweep=ci", SMALL, "-p", "no:cacheprovider", *args)

    return go


@pytest.fixture
def usage(pytester):
    """A run that ends in a usage error before any backend is called: in this process (no interpreter start)."""
    return lambda *args: pytester.runpytest_inprocess("--sweep=ci", SMALL, "-p", "no:cacheprovider", *args)


def test_native_passes_prints_tables_and_writes_both_reports(run, pytester):
    result = run(str(SUITES / "test_axis_b.py"), "--backend=native", "--device=cpu", "-k", "test_output",
                 "--report=out/r.md", "--report=out/r.json")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*rmsnorm conformance report*", "RMSNorm conformance: PASS*",
                                 "Verdict per backend and device", "*report written:*r.json"])
    assert "Tolerance: Axis-B" not in result.stdout.str(), "a quiet pass shows the verdict, not every table"
    data = json.loads((pytester.path / "out/r.json").read_text())
    assert data["verdict"] == "PASS" and data["totals"]["checks"] > 0
    assert data["environment"]["contract profile"] == "seed"
    md = (pytester.path / "out/r.md").read_text()
    assert md.startswith("# RMSNorm conformance report: PASS") and "axis_b.output" in md


def test_one_plus_weight_fails_naming_the_rule_with_a_replay_that_reproduces(run, pytester):
    args = [str(SUITES / "test_semantics.py"), "--backend=rmsnorm_conformance.zoo:OnePlusWeight", "--device=cpu",
            "-k", "plain_weight and float32", "--report=fail.md", "--report=fail.json"]
    result = run(*args)
    assert result.ret == 1
    out = result.stdout.str()
    assert "contract rule semantics.plain_weight (plain weight) broken" in out
    assert "minimal configuration: AccuracyCase(" in out
    replay = next(line.split("replay: ", 1)[1] for line in out.splitlines() if "replay: pytest" in line)
    data = json.loads((pytester.path / "fail.json").read_text())
    assert data["verdict"] == "FAIL"
    assert (pytester.path / "fail.md").read_text().startswith("# RMSNorm conformance report: FAIL")
    # The replay command, run from the project root, runs that one case without a sweep and fails the same way.
    replayed = subprocess.run([sys.executable, "-m", *shlex.split(replay), "-p", "no:cacheprovider"],
                              cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "contract rule semantics.plain_weight" in replayed.stdout
    assert "1 failed" in replayed.stdout


def test_no_shrink_reports_the_failing_case_as_drawn_and_says_so(run, pytester):
    """The same defect under --no-shrink: the same verdict and rule; the case printed is the one drawn (not said to be
    minimal) and its replay reproduces it; the report's sweep says the cases were not shrunk."""
    args = [str(SUITES / "test_axis_a.py"), "--backend=rmsnorm_conformance.zoo:SmallBatchReduction", "--device=cpu",
            "-k", "test_batch_size and float32 and not thresholds", "--sweep=ci", "--report=r.json"]
    shrunk, drawn = run(*args), run(*args, "--no-shrink")
    assert shrunk.ret == drawn.ret == 1
    printed = {}
    for name, result in (("shrunk", shrunk), ("drawn", drawn)):
        out = result.stdout.str()
        assert "contract rule axis_a.batch_size (batch size) broken" in out
        label = "minimal" if name == "shrunk" else "failing (not shrunk: --no-shrink)"
        printed[name] = re.search(rf"  {re.escape(label)} configuration: (\S.*)$", out, re.M).group(1)
        replay = re.search(r"replay: (pytest .*?)\s*$", out, re.M).group(1)
        assert printed[name] in replay
    data = json.loads((pytester.path / "r.json").read_text())  # the --no-shrink run's, written last
    assert data["verdict"] == "FAIL" and "failing cases not shrunk (--no-shrink)" in data["environment"]["sweep"]
    assert printed["drawn"] != printed["shrunk"]  # the drawn case is larger: shrinking had work to do


def test_batch_dependent_reduction_is_caught_by_axis_a(run):
    result = run(str(SUITES / "test_axis_a.py"), "--backend=rmsnorm_conformance.zoo:SmallBatchReduction",
                 "--device=cpu", "-k", "batch_size")
    assert result.ret == 1
    assert "contract rule axis_a.batch_size (batch size) broken" in result.stdout.str()


def test_a_backend_never_seen_before_runs_by_module_path(run):
    result = run(str(SUITES / "test_axis_b.py"), "--backend=rmsnorm_conformance.zoo:make_correct_backend",
                 "--device=cpu")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["RMSNorm conformance: PASS*", "native*cpu*PASS*"])


def test_backend_that_cannot_run_is_skipped_with_its_reason_and_the_run_does_not_pass(run, pytester):
    result = run(str(SUITES / "test_axis_b.py"), "--backend=rmsnorm_conformance.zoo:cuda_only", "--device=cpu",
                 "--report=skip.json")
    assert result.ret == 5
    out = result.stdout.str()
    assert "cuda_only runs on cuda, not cpu" in out and "no conformance check ran" in out
    data = json.loads((pytester.path / "skip.json").read_text())
    assert data["verdict"] == "NOT RUN"
    assert all(o["outcome"] == "skipped" for o in data["outcomes"].values())


def test_missing_device_is_skipped_with_its_reason(usage):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = usage(str(SUITES / "test_axis_b.py"), "--backend=native", "--device=cuda")
    assert result.ret == 4  # a device the user named must exist
    assert "no CUDA device is available on this machine" in result.stderr.str()


@pytest.mark.parametrize(("option", "message"), [
    ("--backend=nope", "unknown backend 'nope'"),
    ("--backend=no_such_module:Thing", "cannot import module 'no_such_module'"),
    ("--device=tpu9", "is not a device"),
    ("--replay=Bogus(1)", "is not a case type"),
])
def test_bad_options_are_usage_errors_that_say_why(usage, option, message):
    result = usage(str(SUITES / "test_axis_b.py"), option)
    assert result.ret == 4
    assert message in result.stderr.str() + result.stdout.str()


def test_xdist_workers_send_their_records_to_the_report(run, pytester):
    args = [str(SUITES / "test_axis_a.py"), "--backend=native", "--device=cpu", "--dtype=bfloat16",
            "-k", "repeat or batch_size and not thresholds"]
    single = run(*args, "--report=one.json")
    spread = run(*args, "-n", "2", "--report=two.json")
    assert single.ret == 0 and spread.ret == 0
    one = json.loads((pytester.path / "one.json").read_text())
    two = json.loads((pytester.path / "two.json").read_text())
    assert two["totals"]["checks"] == one["totals"]["checks"] > 0
    # Two tests, each for native's two bfloat16 pairs: the weight in bf16 and in fp32.
    assert two["totals"]["passed_tests"] == one["totals"]["passed_tests"] == 4
    spread.stdout.fnmatch_lines(["RMSNorm conformance: PASS*"])


def test_strict_profile_is_selectable(run):
    result = run(str(SUITES / "test_axis_b.py"), "--backend=native", "--device=cpu",
                 "--contract-profile=strict", "-k", "test_output")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*profile strict*"])


MANIFEST = """
[[expected]]
backend = "one_plus_weight"
device = "cpu"
rule = "semantics.plain_weight"
reason = "a Gemma-style kernel, kept until it is fixed"

[[expected]]
backend = "one_plus_weight"
device = "cpu"
rule = "semantics.dtype_routing"
reason = "listed by mistake: this rule holds"

[[expected]]
backend = "someone_else"
device = "cuda*"
rule = "axis_a.*"
reason = "matches no backend of this run"
"""


def test_known_failure_manifest_turns_listed_breaches_into_xfails(run, pytester):
    pytester.makefile(".toml", known=MANIFEST)
    result = run(str(SUITES / "test_semantics.py"), "--backend=rmsnorm_conformance.zoo:OnePlusWeight", "--device=cpu",
                 "-k", "(plain_weight or dtype_routing) and float32", "--known-failures=known.toml",
                 "--report=m.json")
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    assert "1 xfailed" in out
    assert "now passes: remove the entry" in out and "matched nothing: check the entry" in out
    data = json.loads((pytester.path / "m.json").read_text())
    assert data["verdict"] == "PASS"
    assert [e["breached"] > 0 for e in data["expected"]] == [True, False, False]
    assert data["expected"][1]["passed"] > 0


def test_a_manifest_with_an_unknown_rule_is_a_usage_error(usage, pytester):
    pytester.makefile(".json", bad='{"expected": [{"backend": "x", "device": "cpu", "rule": "axis_c.*", '
                                   '"reason": "r"}]}')
    result = usage(str(SUITES / "test_axis_b.py"), "--known-failures=bad.json")
    assert result.ret == 4
    assert "matches no contract rule" in result.stderr.str()


def test_records_travel_with_each_test_so_a_stopped_xdist_run_still_reports(run, pytester):
    result = run(str(SUITES / "test_semantics.py"), "--backend=rmsnorm_conformance.zoo:OnePlusWeight", "--device=cpu",
                 "-k", "plain_weight or dtype_routing", "-n", "2", "-x", "--report=stopped.json")
    assert result.ret == 1  # a failure, then a stop: FAIL, whether or not pytest-xdist calls it interrupted
    data = json.loads((pytester.path / "stopped.json").read_text())
    assert data["verdict"] == "FAIL" and not data["complete"] and data["totals"]["failed_checks"] > 0
    assert any(s["rule"] == "semantics.plain_weight" and s["failures"] for s in data["summaries"])


def test_a_run_stopped_early_says_how_many_tests_did_not_run(run, pytester):
    result = run(str(SUITES / "test_semantics.py"), "--backend=rmsnorm_conformance.zoo:OnePlusWeight", "--device=cpu",
                 "-k", "plain_weight or dtype_routing", "-x", "--report=early.json")
    assert result.ret == 1
    data = json.loads((pytester.path / "early.json").read_text())
    assert data["verdict"] == "FAIL" and not data["complete"] and "stopped early" in data["incomplete"]
    assert data["not_started"] > 0


def test_header_names_backends_devices_contract_and_sweep(run):
    result = run("--pyargs", "rmsnorm_conformance.suites", "--backend=native", "--device=cpu", "--dtype=float32",
                 "--rule=axis_b.output", "--max-examples=2")
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "rmsnorm-conformance: contract 2.*, profile seed, sweep ci",
        "rmsnorm-conformance: backends native; devices cpu; dtypes float32",
        "rmsnorm-conformance: rules axis_b.output",
    ])


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "two workers"])
def test_a_list_option_given_twice_keeps_both_values(run, pytester, workers):
    """``--backend=mine --backend=native`` kept the last value alone: the run passed on native's checks, exit 0,
    with the kernel named first never loaded. Each of the list options now joins its values."""
    result = run("--pyargs", "rmsnorm_conformance.suites", "--backend=rmsnorm_conformance.zoo:OnePlusWeight",
                 "--backend=native", "--device=cpu", "--dtype=float32", "--dtype=bfloat16",
                 "--rule=axis_b.output", "--rule=semantics.plain_weight", "--max-examples=2", "--report=r.json",
                 *workers)
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines([
        "rmsnorm-conformance: backends one_plus_weight, native; devices cpu; dtypes float32, bfloat16",
        "rmsnorm-conformance: rules axis_b.output, semantics.plain_weight"])
    data = json.loads((pytester.path / "r.json").read_text())
    assert data["verdict"] == "FAIL" and data["named_backends"] == ["one_plus_weight", "native"]
    assert {s["rule"] for s in data["summaries"]} == {"axis_b.output", "semantics.plain_weight"}
    assert {s["dtype"].split("-")[0] for s in data["summaries"]} == {"float32", "bfloat16"}


def test_max_examples_and_rule_selection_shape_the_sweep(run, pytester):
    # The rule's Hypothesis sweep alone (-k): its explicit cases at the threshold dims are a test of their own.
    result = run("--pyargs", "rmsnorm_conformance.suites", "--backend=native", "--device=cpu", "--dtype=float32",
                 "--rule=axis_b.output", "--max-examples=3", "--report=r.json", "-k", "test_output[")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*1 passed*deselected*"])
    data = json.loads((pytester.path / "r.json").read_text())
    assert data["totals"]["checks"] == 3
    assert {s["rule"] for s in data["summaries"]} == {"axis_b.output"}


def test_hypothesis_statistics_and_events_are_shown(run):
    result = run("--pyargs", "rmsnorm_conformance.suites", "--backend=native", "--device=cpu", "--dtype=float32",
                 "--rule=axis_a.padding", "--max-examples=4", "--hypothesis-show-statistics")
    assert result.ret == 0
    out = result.stdout.str()
    assert "test_padding[native-cpu-float32]" in out and "4 passing" in out
    assert "Events:" in out and "content " in out


def test_installed_but_unused_changes_nothing_for_a_users_own_tests(pytester, monkeypatch):
    """With the plugin installed and no conformance option, a user's run is as without it: Hypothesis keeps
    its defaults, no environment variable appears, and nothing of the harness is printed."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_user="""
        import os
        from hypothesis import given, settings, strategies as st

        CALLS = []

        @given(st.integers())
        def test_default_settings(n):
            CALLS.append(n)

        def test_after():
            assert settings().max_examples == 100
            assert settings().deadline is not None
            assert len(CALLS) == 100
            assert "TRITON_INTERPRET" not in os.environ
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    assert result.ret == 0, result.stdout.str()
    # pytest's own "plugins:" line lists every installed plugin; nothing else may mention the harness.
    lines = (result.stdout.str() + result.stderr.str()).lower().splitlines()
    assert not [line for line in lines if "rmsnorm" in line and not line.startswith("plugins:")]


def test_a_collection_error_is_reported_not_an_internal_error(run, pytester):
    """A test file that fails to import, in a conformance run, is pytest's collection error with its cause; the
    plugin's hooks must not crash on the collection report."""
    pytester.makepyfile(test_broken="import a_module_that_does_not_exist_anywhere\n")
    result = run("test_broken.py", "-q", "--backend=native", "--report=out/r.json")
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "AttributeError" not in output, output[-2000:]
    assert result.ret == pytest.ExitCode.INTERRUPTED  # pytest's own answer to a collection error
    result.stdout.fnmatch_lines(["*ModuleNotFoundError*a_module_that_does_not_exist_anywhere*", "*1 error*"])


class _Item:
    """What longest_first reads of a collected test: its name and whether it is a conformance test."""

    def __init__(self, name: str, conformance: bool = True) -> None:
        self.name, self._conformance = name, conformance

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "conformance" and self._conformance else None


def test_the_controller_deals_one_test_at_a_time_unless_told_otherwise():
    from types import SimpleNamespace

    from rmsnorm_conformance.harness.plugin.active import deal_one_at_a_time

    def dealt(**option):
        config = SimpleNamespace(option=SimpleNamespace(**option))
        deal_one_at_a_time(config)  # type: ignore[arg-type]
        return config.option.maxschedchunk

    assert dealt(dist="load", maxschedchunk=None) == 1
    assert dealt(dist="load", maxschedchunk=16) == 16  # the user's own
    assert dealt(dist="worksteal", maxschedchunk=None) is None  # another scheduling: left to it
    assert dealt(dist="no", maxschedchunk=None) is None  # no xdist run


def test_xdist_workers_deal_the_longest_conformance_tests_first():
    from rmsnorm_conformance.harness.plugin.active import longest_first

    names = ["test_repeat[native-cpu-float32]", "test_padding_at_thresholds[native-cpu-float32]",
             "test_output[native-cpu-float32]", "test_first_call[native-cpu-bfloat16]",
             "test_fused_add_first_call[native-cpu-float32]", "test_execution_mode[native-cpu-float32]",
             "test_bitwise_parity[triton=triton[compile]-bfloat16]"]
    items = [_Item("test_own_first_call", conformance=False), *map(_Item, names)]
    longest_first(items)  # type: ignore[arg-type]
    assert [i.name for i in items] == [
        "test_bitwise_parity[triton=triton[compile]-bfloat16]",
        "test_first_call[native-cpu-bfloat16]", "test_fused_add_first_call[native-cpu-float32]",
        "test_execution_mode[native-cpu-float32]", "test_padding_at_thresholds[native-cpu-float32]",
        # the rest keep their order: a user's own test, then the short conformance tests
        "test_own_first_call", "test_repeat[native-cpu-float32]", "test_output[native-cpu-float32]"]
