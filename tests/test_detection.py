"""Mutation testing of the suites: each planted defect of the zoo (rmsnorm_conformance.zoo) must fail the suite
test of the rule it breaks, naming that rule, its minimal configuration and a replay command; correct backends
must not fail.

Each defect runs only the suite test that covers its rule (``RULE_TESTS``), under the derandomized ``ci``
profile, in a pytester subprocess as a user would run it. Holding correct backends to whole suites over many
Hypothesis seeds is slower than a CI run allows: ``RMSNORM_SEEDS=20 pytest tests/test_detection.py -k
false_alarm`` runs it (reports/cpu/detection.md records the result).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest

from rmsnorm_conformance.contract import ALL_RULES, rule
from rmsnorm_conformance.harness.checking.rule_index import rule_tests
from rmsnorm_conformance.harness.drawing.replay import parse_case
from rmsnorm_conformance.zoo import DEFECTS, LaneOrderRMSNorm

ROOT = Path(__file__).resolve().parents[1]
SUITES = ROOT / "suites"

# The suite test(s) that hold a backend to each rule, as the suites declare them.
RULE_TESTS: dict[str, list[str]] = rule_tests()

# The suite tests over explicit cases rather than Hypothesis draws, by name: the same cases under every seed.
EXPLICIT_TESTS = "not _at_thresholds and not _qk_norm and not test_first_call"

# How many Hypothesis seeds the false-alarm run uses; 0 skips it.
SEEDS = int(os.environ.get("RMSNORM_SEEDS", "0") or 0)


def rule_selection(rule_id: str) -> list[str]:
    """pytest arguments that run only the suite tests covering ``rule_id``, in every dtype."""
    return ["--pyargs", "rmsnorm_conformance.suites", f"--rule={rule_id}"]


@pytest.fixture
def run(pytester, monkeypatch):
    """pytest in a subprocess from a scratch directory, the project importable."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))

    def go(*args):
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)

    return go


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
    minimal = re.search(r"minimal configuration: (\w+\(.*\))\s*$", out, re.M)
    replay = re.search(r"replay: (pytest .*?)\s*$", out, re.M)
    assert minimal and replay, "the failure must print its minimal configuration and a replay command"
    return minimal.group(1), replay.group(1)


@pytest.mark.parametrize("defect", DEFECTS, ids=lambda d: d.__name__)
def test_defect_is_caught_in_the_rule_it_breaks(run, defect):
    """The run fails, every failure names the defect's rule (and no other), and the failure prints the
    minimal configuration with a replay command that runs that case on that test and backend."""
    tests = RULE_TESTS[defect.breaks]
    spec = f"rmsnorm_conformance.zoo:{defect.__name__}"
    strict = ["--strict-interface"] if rule(defect.breaks).severity == "interface" else []
    result = run(*rule_selection(defect.breaks), f"--backend={spec}", "--device=cpu",
                 "--sweep=ci", "-x", *strict)
    out = result.stdout.str()
    assert result.ret == 1, f"{defect.__name__} was not caught by {tests}:\n{out[-3000:]}"
    assert set(re.findall(r"contract rule (\S+) \(", out)) == {defect.breaks}, out[-3000:]
    failed = re.findall(rf"^FAILED \S*?(test_\w+\.py::test_\w+)\[{defect.name}-cpu-[\w-]+\]", out, re.M)
    assert failed and set(failed) <= set(tests), out[-3000:]
    minimal, replay = _minimal_and_replay(out)
    words = shlex.split(replay)
    assert words[1:3] == ["--pyargs", "rmsnorm_conformance.suites"]
    assert f"--backend={spec}" in words and f"--rule={defect.breaks}" in words
    replayed = next(w.removeprefix("--replay=") for w in words if w.startswith("--replay="))
    assert parse_case(replayed) == parse_case(minimal), "the replay must run the minimal configuration"


def test_lane_order_control_passes_axis_a_in_fp32(run):
    """The reduction-order defects switch to LaneOrderRMSNorm's order on some condition; that order on its
    own passes Axis-A, so their failures come from the switch, not from the order. fp32 shows any change. (The
    threshold checks of this order run in the false-alarm run over seeds, below.)"""
    result = run(str(SUITES / "test_axis_a.py"), "--backend=rmsnorm_conformance.zoo:LaneOrderRMSNorm",
                 "--device=cpu",
                 "--sweep=ci", "-k", "float32 and not _at_thresholds")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["RMSNorm conformance: PASS*"])


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


def test_engine_style_declarations_pass_the_variant_rules(run):
    """An in-place fused add, the Hugging Face rounding order and a bf16 offset, each declared, move the
    reference the variant rules hold it to: none of them may read as a breach."""
    result = run(str(SUITES / "test_variants.py"), "--backend=rmsnorm_conformance.zoo:EngineStyleRMSNorm",
                 "--device=cpu",
                 "--sweep=ci", "--dtype=bfloat16", "-k", "residual or output or offset_dtype or purity or "
                 "rounding_class or fp32_weight")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["RMSNorm conformance: PASS*"])


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
