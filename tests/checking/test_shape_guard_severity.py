"""semantics.shape_guard gates by harm: a wrong-shaped weight that gives other values or shapes fails the run, while
a (1, D) weight that broadcasts to the 1-D weight's values is an interface breach (interface.shape_error), which
warns. A correct plain function with no shape check of its own reads PASS with that warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

KERNELS = """
import torch


def plain(x, weight, eps=1e-6):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def first_column(x, weight, eps=1e-6):
    # Reads a 2-D weight's first column as the whole weight, as a kernel indexing weight[i * stride] might.
    w = weight[..., 0].expand(x.shape[-1]) if weight.dim() > 1 else weight
    return plain(x, w, eps)
"""


@pytest.fixture
def gate(pytester, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    pytester.makepyfile(kernels=KERNELS)

    def go(spec):
        return pytester.runpytest_subprocess(
            "--pyargs", "rmsnorm_conformance.suites", f"--backend=kernels:{spec}", "--device=cpu",
            "--dtype=float32", "--rule=semantics.shape_guard,interface.shape_error", "--sweep=ci",
            "--max-examples=5", "-p", "no:cacheprovider", "--report=r.json")

    return go


def test_a_correct_plain_function_passes_with_an_interface_warning(gate, pytester):
    result = gate("plain")
    out = result.stdout.str()
    assert result.ret == 0, out
    result.stdout.fnmatch_lines(["RMSNorm conformance: PASS*", "Interface warnings*", "*interface.shape_error*"])
    data = json.loads((pytester.path / "r.json").read_text())
    guard = [s for s in data["summaries"] if s["rule"] == "semantics.shape_guard"]
    assert guard and sum(s["checks"] for s in guard) > 0 and not any(s["failures"] for s in guard)
    assert any(s["warnings"] for s in data["summaries"] if s["rule"] == "interface.shape_error")


def test_a_broadcast_weight_read_into_other_values_fails_the_shape_guard(gate):
    result = gate("first_column")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "contract rule semantics.shape_guard (shape guard) broken" in out
    assert "gave other values than the 1-D weight it broadcasts as" in out
