"""The reference passes its own contract under the strict profile: native, a ci sweep, every dtype, every rule
whose bound the profile sets (the profile changes output bounds only: Axis-B, the variants' outputs, and the
semantics checks held to the output bound). A failure here is a false alarm of the harness, as the variants'
strict oracle once was when it left out the case's eps."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The rules held to the profile's output bound (assert_within with the default bound).
PROFILE_RULES = ("axis_b.output", "axis_b.forward_fp32", "semantics.eps_inside_sqrt", "semantics.dim_one",
                 "variants.fused_add_output", "variants.offset_output", "variants.unweighted_output")


def test_native_passes_the_strict_profile(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--pyargs", "rmsnorm_conformance.suites", "--backend=native", "--device=cpu",
        "--sweep=ci", "--contract-profile=strict", f"--rule={','.join(PROFILE_RULES)}", "--report=strict.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    data = json.loads((pytester.path / "strict.json").read_text())
    assert data["verdict"] == "PASS" and data["totals"]["failed_checks"] == 0
    checked = {s["rule"] for s in data["summaries"] if s["checks"]}
    assert set(PROFILE_RULES) <= checked, f"rules that ran no check: {set(PROFILE_RULES) - checked}"
