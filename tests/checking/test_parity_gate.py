"""The parity gate end to end: a pair with the same reduction order passes, a pair in different orders fails
with the first differing element and a replay that reproduces it, and malformed pairs are usage errors."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_conformance.backends.native import NativeRMSNormOp

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--pyargs", "rmsnorm_conformance.suites", "--rule=parity.bitwise", "--device=cpu", "--sweep=ci",
        "--max-examples=4", "-p", "no:cacheprovider"]


class NativeTwin(NativeRMSNormOp):
    """The reference under another name: at parity with native by construction."""

    name = "native_twin"


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return lambda *args: pytester.runpytest_subprocess(*FAST, *args)


def test_a_pair_in_the_same_order_passes(run, pytester):
    result = run("--backend=native,tests.test_parity_gate:NativeTwin", "--require-parity=native:native_twin",
                 "--report=r.json")
    assert result.ret == 0, result.stdout.str()[-2000:]
    data = json.loads((pytester.path / "r.json").read_text())
    assert data["verdict"] == "PASS"
    pairs = {s["backend"] for s in data["summaries"] if s["rule"] == "parity.bitwise"}
    assert pairs == {"native=native_twin"}
    assert sum(s["checks"] for s in data["summaries"]) >= 3 * 4


def test_native_and_triton_are_at_parity_on_the_cpu(run, pytester):
    """The canonical order's promise in CI: the reference and the Triton kernel (in Triton's interpreter) give
    identical bits under every Axis-A variant's inputs, NaN and Inf padding included, in the ci sweep."""
    pytest.importorskip("triton", reason="Triton is not installed")
    result = run("--backend=native,triton", "--require-parity=native:triton", "--max-examples=12",
                 "--report=r.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    data = json.loads((pytester.path / "r.json").read_text())
    gate = [s for s in data["summaries"] if s["backend"] == "native=triton"]
    assert {s["dtype"] for s in gate} == {"float32", "bfloat16", "float16"}
    assert sum(s["checks"] for s in gate) >= 3 * 12 and not any(s["failures"] for s in gate)


def test_a_pair_in_different_orders_fails_with_bits_and_a_replay(run):
    result = run("--backend=native,rmsnorm_conformance.zoo:LaneOrderRMSNorm", "--require-parity=native:lane_order",
                 "--dtype=float32")
    assert result.ret == 1
    out = result.stdout.str()
    assert "contract rule parity.bitwise" in out and "differs from native on cpu" in out
    assert "(0x" in out, "the first differing element's bit patterns must be shown"
    replay = next(line.split("replay: ", 1)[1] for line in out.splitlines() if "replay: pytest" in line)
    words = shlex.split(replay)
    assert "--require-parity=native:lane_order" in words and "--rule=parity.bitwise" in words
    again = subprocess.run([sys.executable, "-m", *words, "-p", "no:cacheprovider"], capture_output=True, text=True,
                           cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert again.returncode == 1 and "contract rule parity.bitwise" in again.stdout


@pytest.mark.parametrize(("option", "message"), [
    ("--require-parity=native", "give two backend names"),
    ("--require-parity=native:nope", "'nope' is not a selected backend"),
    ("--require-parity=native:native", "trivially at parity"),
    ("--modes=jit", "unknown mode 'jit'"),
])
def test_malformed_pairs_are_usage_errors(run, option, message):
    result = run("--backend=native", option)
    assert result.ret == 4
    assert message in result.stderr.str()
