"""Mutation testing of the suites: each planted defect of the zoo (rmsnorm_conformance.zoo) must fail the suite
test of the rule it breaks, naming that rule, its failing configuration and a replay command; correct backends
must not fail.

Each defect runs only the suite tests that cover its rule (``RULE_TESTS``), under the derandomized ``ci``
profile, stopping at its first failure, in a pytest subprocess as a user would run it; one subprocess holds a
group of defects, each to its own selection (tests/helpers/detection_plan.py), so the zoo costs a few process starts.
Holding correct backends to whole suites over many Hypothesis seeds is slower than a CI run allows:
``RMSNORM_SEEDS=20 pytest tests/detection/test_detection.py -k false_alarm`` runs it (reports/cpu/detection.md records
the result).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rmsnorm_conformance.contract import ALL_RULES, rule
from rmsnorm_conformance.harness.drawing.replay import parse_case
from rmsnorm_conformance.suites.rule_index import rule_tests
from rmsnorm_conformance.zoo import DEFECTS, EngineStyleRMSNorm, LaneOrderRMSNorm
from tests.helpers.forkserver import share_hypothesis_constants, shared

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "suites"

# The suite test(s) that hold a backend to each rule, as the suites declare them.
RULE_TESTS: dict[str, list[str]] = rule_tests()

# The suite tests over explicit cases rather than Hypothesis draws, by name: the same cases under every seed.
EXPLICIT_TESTS = "not _at_threshold and not _qk_norm and not _3d_views and not test_first_call"

# How many Hypothesis seeds the false-alarm run uses; 0 skips it.
SEEDS = int(os.environ.get("RMSNORM_SEEDS", "0") or 0)


def test_every_rule_is_checked_by_a_suite_test():
    assert set(RULE_TESTS) == {r.id for r in ALL_RULES}


def test_the_zoo_is_documented_and_names_real_rules():
    assert len(DEFECTS) >= 15
    assert len({d.name for d in DEFECTS}) == len(DEFECTS), "defect names must be unique: they key the reports"
    for defect in DEFECTS:
        assert defect.breaks in RULE_TESTS, f"{defect.__name__} breaks an unknown rule {defect.breaks!r}"
        doc = defect.__doc__ or ""
        assert doc.startswith(f"Breaks {defect.breaks}:"), f"{defect.__name__}'s docstring must name its rule first"
        assert len(doc.split()) >= 25, f"{defect.__name__}'s docstring must say which real kernel bug it imitates"


def _minimal_and_replay(out: str) -> tuple[str, str]:
    """The failing configuration a failure prints (the minimal one, or as drawn under --no-shrink) and its replay."""
    minimal = re.search(r"(?:minimal|failing \(not shrunk: --no-shrink\)) configuration: (\w+\(.*\))\s*$", out, re.M)
    replay = re.search(r"replay: (pytest .*?)\s*$", out, re.M)
    assert minimal and replay, "the failure must print its configuration and a replay command"
    return minimal.group(1), replay.group(1)


# --- The zoo in a few runs -------------------------------------------------------------------------------------
# Each defect is held to exactly the suite tests that `--rule=<its rule>` selects, in every dtype, and stops at its
# first failure as `-x` stops a run of it alone: tests/helpers/detection_plan.py makes that selection per backend inside
# one pytest run of many backends, so the zoo costs a few process starts rather than one per defect. Each run is
# one test (below), so that pytest-xdist spreads the runs over the workers. The interface defects run apart, under
# --strict-interface, so that no numerics defect is held to interface rules it was not planted to break.

GROUPS = 6  # CI runs the first group and the interface group; the long tier the rest (tests/long_tier.py)
NUMERICS_DEFECTS = [d for d in DEFECTS if rule(d.breaks).severity != "interface"]
INTERFACE_DEFECTS = [d for d in DEFECTS if rule(d.breaks).severity == "interface"]


def group_of(backend: type) -> str:
    """The run that holds ``backend``, a defect or a control."""
    if backend in CONTROLS:
        return CONTROLS[backend][0]
    if backend in INTERFACE_DEFECTS:
        return "zoo-interface"
    return f"zoo-{NUMERICS_DEFECTS.index(backend) % GROUPS}"


# The correct controls, each with the selection its run alone took (what its -k and --dtype chose), and its run.
# LaneOrderRMSNorm: the reduction-order defects switch to its order on some condition; that order on its own passes
# Axis-A, so their failures come from the switch, not from the order; fp32 shows any change. (The threshold checks
# of this order run in the false-alarm run over seeds, below.) EngineStyleRMSNorm: an in-place fused add, the
# Hugging Face rounding order and a bf16 offset, each declared, move the reference the variant rules hold it to:
# none of them may read as a breach. Its fused add reduces and rounds as its forward does, so it also holds
# variants.fused_add_as_forward, in place.
CONTROLS: dict[type, tuple[str, dict]] = {
    LaneOrderRMSNorm: ("zoo-0", {"module": "test_axis_a.py", "dtype": "float32",
                                 "name_has_none": ["_at_thresholds"]}),
    EngineStyleRMSNorm: ("zoo-1", {"module": "test_variants.py", "dtype": "bfloat16",
                                   "name_has_any": ["residual", "output", "as_forward", "offset_dtype",
                                                    "purity", "rounding_class", "fp32_weight"]}),
}


@dataclass(frozen=True)
class ZooRun:
    """One pytest run of a group of the zoo: its exit status, terminal output and JSON report."""

    ret: int
    out: str
    report: dict

    def outcomes(self, backend: str) -> dict[str, dict]:
        return {n: o for n, o in self.report["outcomes"].items() if o.get("backend") == backend}

    def failure_section(self, nodeid: str) -> str:
        """The terminal's failure section of one test (pytest's ``____ test_x[id] ____`` block)."""
        name = nodeid.split("::", 1)[1]
        sections = re.split(r"^_+ (\S+) _+$", self.out, flags=re.M)  # a long name has one "_" each side
        for title, body in zip(sections[1::2], sections[2::2], strict=True):
            if title == name:
                return re.split(r"^={3,}", body, maxsplit=1, flags=re.M)[0]  # up to pytest's next "=== x ==="
        raise AssertionError(f"no failure section for {name} in the output:\n{self.out[-3000:]}")


def _run_group(group: str, where: Path) -> ZooRun:
    """The run of a group: the suites as a user runs them, in a subprocess from the scratch directory ``where``,
    the project importable."""
    plan = {d.name: {"rules": [d.breaks], "stop_first": True} for d in DEFECTS if group_of(d) == group}
    plan |= {c.name: selection for c, (g, selection) in CONTROLS.items() if g == group}
    backends = [b for b in (*DEFECTS, *CONTROLS) if b.name in plan]
    (where / "plan.json").write_text(json.dumps(plan))
    share_hypothesis_constants(str(where))
    strict = ["--strict-interface"] if group == "zoo-interface" else []
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env |= {"PYTHONPATH": str(ROOT), "PY_COLORS": "0"}
    command = (sys.executable, "-mpytest", "-p", "no:cacheprovider", f"--basetemp={where / 'tmp'}",
               "-p", "tests.helpers.detection_plan", "--detection-plan=plan.json",
               "--pyargs", "rmsnorm_conformance.suites",
               "--backend=" + ",".join(f"rmsnorm_conformance.zoo:{b.__name__}" for b in backends), "--device=cpu",
               "--sweep=ci", "--no-shrink", "--report=zoo.json", *strict)
    ret, out = _pytest_in(where, command, env)
    report = where / "zoo.json"
    assert report.is_file(), f"the {group} run wrote no report (exit {ret}):\n{out[-3000:]}"
    return ZooRun(ret, out, json.loads(report.read_text()))


def _pytest_in(where: Path, command: tuple[str, ...], env: dict[str, str]) -> tuple[int, str]:
    """Exit status and output (stdout, then stderr) of a pytest command run in ``where``: forked from this test
    process's torch server where its environment allows (tests/helpers/forkserver.py: about 3 CPU-s less a run), else a
    fresh interpreter."""
    server = shared()
    if os.environ.get("RMSNORM_TESTS_FORK") == "0" or not server.forkable(command, env):
        done = subprocess.run(command, cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, check=False)
        return done.returncode, done.stdout
    with open(where / "zoo-stdout.txt", "w") as stdout, open(where / "zoo-stderr.txt", "w") as stderr:
        ret = server.start(command, env, stdout, stderr, cwd=str(where)).wait()
    return ret, (where / "zoo-stdout.txt").read_text() + (where / "zoo-stderr.txt").read_text()


# One test per run of the zoo, each defect and control of it a subtest: a worker that runs a group's pytest also
# checks every backend of it, so no worker waits on a run another worker holds (pytest-xdist's --dist=loadgroup,
# which kept a group's tests on one worker, stopped grouping with pytest 9.2's structured node ids:
# pytest-dev/pytest-xdist#1386).
GROUP_NAMES = sorted({group_of(b) for b in (*DEFECTS, *CONTROLS)})


@pytest.mark.early
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_every_defect_is_caught_and_every_control_passes(tmp_path, subtests, group):
    """Each defect of the group's run is caught in the rule it breaks, and each control passes (a subtest each,
    named by the backend's class)."""
    result = _run_group(group, tmp_path)
    members = [b for b in (*DEFECTS, *CONTROLS) if group_of(b) == group]
    assert members, f"no backend in {group}"
    for backend in members:
        with subtests.test(backend=backend.__name__):
            if backend in CONTROLS:
                check_control_passes_its_selection(result, backend)
            else:
                check_defect_is_caught_in_the_rule_it_breaks(result, backend)


def check_defect_is_caught_in_the_rule_it_breaks(result: ZooRun, defect: type) -> None:
    """The defect fails one test of its rule, every failure names the defect's rule (and no other), and the
    failure prints its configuration with a replay command that runs that case on that test and backend. The runs
    take --no-shrink: shrinking re-runs a failing check on smaller cases for a simpler configuration to print, and
    changes no verdict (about a quarter of the zoo runs' CPU)."""
    tests = RULE_TESTS[defect.breaks]
    spec = f"rmsnorm_conformance.zoo:{defect.__name__}"
    assert result.ret == 1, f"the {group_of(defect)} run did not fail:\n{result.out[-3000:]}"
    mine = result.outcomes(defect.name)
    failed = {n: o for n, o in mine.items() if o["outcome"] in ("failed", "error")}
    assert failed, f"{defect.__name__} was not caught by {tests}: {mine}"
    # As under -x: the first failure ends the defect's run, so one test failed and its later tests did not run.
    assert len(failed) == 1, failed
    ((nodeid, outcome),) = failed.items()
    assert outcome["rule"] == defect.breaks, outcome
    assert outcome["reason"].startswith(f"contract rule {defect.breaks} ("), outcome
    # Caught by what it plants, not by an exception of its own making (two gradient defects once crashed in
    # autograd, and read as caught).
    assert f"{defect.name} raised " not in outcome["reason"], outcome["reason"]
    breached = {s["rule"] for s in result.report["summaries"] if s["backend"] == defect.name and s["failures"]}
    assert breached == {defect.breaks}, breached
    (row,) = [r for r in result.report["pick"]["rows"] if r["backend"] == defect.name]
    assert [*row["numerics_breached"], *row["interface_breached"]] == [defect.breaks], row
    # pytest's FAILED line names a suite test of the rule, in the defect's id.
    printed = re.findall(rf"^FAILED \S*?(test_\w+\.py::test_\w+)\[{defect.name}-cpu-[\w-]+\]", result.out, re.M)
    assert printed == [nodeid.split("[", 1)[0]] and set(printed) <= set(tests), printed
    section = result.failure_section(nodeid)
    assert set(re.findall(r"contract rule (\S+) \(", section)) == {defect.breaks}, section[-3000:]
    minimal, replay = _minimal_and_replay(section)
    assert replay == outcome["replay"]
    words = shlex.split(replay)
    assert words[1:3] == ["--pyargs", "rmsnorm_conformance.suites"]
    assert f"--backend={spec}" in words and f"--rule={defect.breaks}" in words
    replayed = next(w.removeprefix("--replay=") for w in words if w.startswith("--replay="))
    assert parse_case(replayed) == parse_case(minimal), "the replay must run the configuration printed"


def check_control_passes_its_selection(result: ZooRun, control: type) -> None:
    """LaneOrderRMSNorm passes Axis-A in fp32 (its sweeps, not the thresholds) and EngineStyleRMSNorm the variant
    rules its declarations move (bf16): no selected test failed, checks ran, and the backend's verdict is PASS."""
    # The report's outcomes list what did not pass (a skip says why, as a declaration allows); none may fail.
    failed = {n: o for n, o in result.outcomes(control.name).items() if o["outcome"] not in ("passed", "skipped")}
    assert not failed, failed
    checked = [s for s in result.report["summaries"] if s["backend"] == control.name]
    assert sum(s["checks"] for s in checked) > 0 and not any(s["failures"] for s in checked), checked
    (row,) = [r for r in result.report["pick"]["rows"] if r["backend"] == control.name]
    assert row["verdict"] == "PASS" and not row["interface_breached"], row


def test_the_detection_plan_selects_what_rule_and_k_select(run, pytester):
    """The plan selects, in one run, what a run of each backend alone selected: for a defect the tests of its
    --rule in every dtype, for a control what its -k chose. Compared by collecting both ways."""
    defect = next(d for d in DEFECTS if d.breaks == "axis_a.padding")
    plan = {defect.name: {"rules": [defect.breaks], "stop_first": True}, LaneOrderRMSNorm.name:
            CONTROLS[LaneOrderRMSNorm][1]}
    both = f"rmsnorm_conformance.zoo:{defect.__name__},rmsnorm_conformance.zoo:{LaneOrderRMSNorm.__name__}"
    (pytester.path / "plan.json").write_text(json.dumps(plan))
    combined = run("-p", "tests.helpers.detection_plan", "--detection-plan=plan.json", "--pyargs",
                   "rmsnorm_conformance.suites", f"--backend={both}", "--device=cpu", "--collect-only", "-q")
    alone = run("--pyargs", "rmsnorm_conformance.suites", f"--backend=rmsnorm_conformance.zoo:{defect.__name__}",
                "--device=cpu", f"--rule={defect.breaks}", "--collect-only", "-q")
    control = run(str(SUITES / "test_axis_a.py"), f"--backend=rmsnorm_conformance.zoo:{LaneOrderRMSNorm.__name__}",
                  "--device=cpu", "--dtype=float32", "-k", "not _at_thresholds", "--collect-only", "-q")

    def ids(result) -> set[str]:
        return {line.rsplit("::", 1)[-1] for line in result.stdout.lines if "::" in line}

    assert ids(alone) and ids(control), (alone.stdout.str()[-2000:], control.stdout.str()[-2000:])
    assert ids(combined) == ids(alone) | ids(control)


@pytest.mark.skipif(not SEEDS, reason="set RMSNORM_SEEDS=N to hold correct backends to whole suites over N seeds")
@pytest.mark.parametrize("seed", range(max(SEEDS, 1)))
def test_no_false_alarm_for_correct_backends(run, pytester, seed):
    """The native ground truth and an independent correct order pass every suite under Hypothesis seed
    ``seed``: a failure here is the harness's (or a bound's) fault, not the backend's. The explicit checks
    (thresholds, QK-norm shapes, first calls) are the same under every seed: seed 0 alone runs them."""
    explicit = [] if seed == 0 else ["-k", EXPLICIT_TESTS]
    result = run(str(SUITES), "--backend=native,rmsnorm_conformance.zoo:LaneOrderRMSNorm", "--device=cpu",
                 "--sweep=dev", f"--hypothesis-seed={seed}", "--report=seed.json", *explicit)
    data = json.loads((pytester.path / "seed.json").read_text())
    failed = [f"{nodeid}: {o.get('reason', '')}" for nodeid, o in data["outcomes"].items()
              if o["outcome"] in ("failed", "error")]
    assert result.ret == 0 and not failed, "\n".join(failed) or result.stdout.str()[-3000:]
    assert data["verdict"] == "PASS" and data["totals"]["failed_checks"] == 0
    checked = {s["backend"] for s in data["summaries"] if s["checks"]}
    assert checked == {"native", LaneOrderRMSNorm.name}


# --- The variants: correct kernels with every declaration must pass ------------------------------------------

CORRECT_VARIANT_BACKENDS = ("native,rmsnorm_conformance.zoo:LaneOrderRMSNorm,"
                            "rmsnorm_conformance.zoo:EngineStyleRMSNorm")


@pytest.mark.skipif(not SEEDS, reason="set RMSNORM_SEEDS=N to hold correct variants to their suite over N seeds")
@pytest.mark.parametrize("seed", range(max(SEEDS, 1)))
def test_no_false_alarm_for_correct_variants(run, pytester, seed):
    """The native variants, the lane-order ones and the engine-style ones (in place, Hugging Face order, bf16
    offset, all declared) pass the variant suite under Hypothesis seed ``seed``."""
    result = run(str(SUITES / "test_variants.py"), f"--backend={CORRECT_VARIANT_BACKENDS}", "--device=cpu",
                 "--sweep=dev", f"--hypothesis-seed={seed}", "--report=seed.json")
    data = json.loads((pytester.path / "seed.json").read_text())
    failed = [f"{nodeid}: {o.get('reason', '')}" for nodeid, o in data["outcomes"].items()
              if o["outcome"] in ("failed", "error")]
    assert result.ret == 0 and not failed, "\n".join(failed) or result.stdout.str()[-3000:]
    assert data["verdict"] == "PASS" and data["totals"]["failed_checks"] == 0
