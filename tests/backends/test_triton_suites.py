"""The Triton backend held to the conformance suites on a machine without a GPU, where it runs in Triton's
interpreter: one Python operation at a time, about 30 ms a call, so that the ``ci`` sweep of every suite costs
some 580 test-seconds on two cores, a third of CI's whole test time (measured on the CI machine).

CI's suites therefore run the native backend under ``ci`` (README.md's test command), and this test runs Triton's
under ``smoke``, as a user runs it before a commit: every rule the backend offers, on the simplest cases, in a
pytest of its own, in bfloat16 (with its fp32-weight pairs: the mixed-precision rule too). The kernel is one
source for every dtype, and its float32 and float16 instantiations are held bitwise to native by the tests named
below. The interpreted kernel is still held bitwise to native over dims, dtypes, layouts and batch
sizes by tests/backends/test_triton_backend.py and tests/checking/test_parity_gate.py; the Triton gate proper (the
``ci`` and default sweeps, compiled) runs on a GPU (reports/gpu/time-to-verdict.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rmsnorm_conformance.backends import triton_rmsnorm
from rmsnorm_conformance.contract import ALL_RULES

ROOT = Path(__file__).resolve().parents[2]

# Rules with nothing to check on this backend: opcheck holds torch.library ops given as the backend, parity
# needs a second backend, and Triton offers no fp8 entry point (each is skipped as not offered).
NOT_FOR_TRITON = {"interface.opcheck", "parity.bitwise", "axis_a.fp8", "variants.fp8_output", "variants.fp8_scale",
                  "variants.fp8_rounding_class",
                  "interface.in_place_version"}  # its fused_add is the protocol's out-of-place one


@pytest.mark.early
def test_triton_in_the_interpreter_passes_every_rule_under_smoke(pytester, monkeypatch):
    reason = triton_rmsnorm.TritonRMSNormOp().unavailable_reason("cpu")
    if reason:  # CI installs Triton (the test extra): there its absence is a failure, not a skip
        (pytest.fail if os.environ.get("CI") else pytest.skip)(reason)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    monkeypatch.setenv("PY_COLORS", "0")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--pyargs", "rmsnorm_conformance.suites", "--backend=triton", "--device=cpu",
        "--sweep=smoke", "--dtype=bfloat16", "--report=triton.json")
    out = result.stdout.str()
    assert result.ret == 0, out[-4000:]
    assert "RMSNorm conformance: PASS (smoke)" in out, out[-4000:]
    report = json.loads((pytester.path / "triton.json").read_text())
    assert report["selection"]["sweep"] == "smoke" and report["named_backends"] == ["triton"]
    assert report["totals"]["failed_checks"] == 0 and report["totals"]["failed_tests"] == 0, report["totals"]
    ((row,),) = [[r for r in report["pick"]["rows"] if r["backend"] == "triton"]]
    assert row["verdict"] == "PASS" and not row["interface_breached"] and not row["refused"], row
    checked = {s["rule"] for s in report["summaries"] if s["backend"] == "triton" and s["checks"] > 0}
    assert checked == {r.id for r in ALL_RULES} - NOT_FOR_TRITON, sorted(checked ^ ({r.id for r in ALL_RULES}
                                                                                      - NOT_FOR_TRITON))
