"""The severity gate end to end: a kernel whose numbers are right but whose errors are impolite (a RuntimeError
that names no shape for a wrong-shaped weight, float64 and int32 accepted and computed) passes the default
gate with its interface warnings listed, and fails only under --strict-interface, only on interface rules."""

from __future__ import annotations

import json
import re

import pytest

# In float32, with few examples: the gate is about which rules fail, not about search depth. The strict run holds
# the kernel to every suite under smoke (every rule, the simplest cases: 10 s, against 43 s under ci with two
# examples a test and every explicit case).
ARGS = ["--pyargs", "rmsnorm_conformance.suites", "--backend=rmsnorm_conformance.zoo:ImpoliteRMSNorm", "--device=cpu",
        "--dtype=float32"]


@pytest.mark.early
def test_impolite_but_correct_kernel_passes_by_default_and_fails_only_when_strict(run, pytester):
    # The default gate over the tests of the interface rules: their breaches are warnings and the run passes. The
    # strict run below holds the kernel to every suite, and its numerics tests pass there; strictness changes no
    # numerics check, so the default gate's numerics verdict is the strict run's.
    lenient = run(*ARGS, "--sweep=ci", "--max-examples=2", "--rule=interface.*", "--report=lenient.json")
    assert lenient.ret == 0, lenient.stdout.str()[-3000:]
    # Summed up, a row a backend and rule with the count and the smallest case, and no pytest warning a case.
    lenient.stdout.fnmatch_lines(["RMSNorm conformance: PASS*", "Interface warnings and refused inputs*",
                                  "*impolite*interface.shape_error*", "replay:", "[[]1[]] pytest --pyargs *"])
    out = lenient.stdout.str()
    assert "warnings summary" not in out and "InterfaceWarning" not in out, out[-3000:]
    report = json.loads((pytester.path / "lenient.json").read_text())
    assert report["verdict"] == "PASS" and report["totals"]["failed_checks"] == 0
    warned = {s["rule"] for s in report["summaries"] if s["warnings"]}
    assert warned == {"interface.shape_error", "interface.input_errors"}

    strict = run(*ARGS, "--sweep=smoke", "--strict-interface", "--report=strict.json")
    assert strict.ret == 1
    report = json.loads((pytester.path / "strict.json").read_text())
    numerics = [s for s in report["summaries"] if s["severity"] == "numerics"]
    assert sum(s["checks"] for s in numerics) > 0 and not any(s["failures"] for s in numerics)
    out = strict.stdout.str()
    assert set(re.findall(r"contract rule (\S+) \(", out)) == {"interface.shape_error", "interface.input_errors"}
    assert set(re.findall(r"^FAILED \S*::(test_\w+)\[", out, re.M)) == {"test_shape_error", "test_input_errors"}


def test_verbose_lists_each_interface_breach(run):
    """-v prints the full tables: a row per backend, device, dtype and rule, with the breach's detail."""
    result = run(*ARGS, "--sweep=ci", "--max-examples=1", "--rule=interface.shape_error", "-v")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["Interface warnings (fail only under --strict-interface)",
                                 "*impolite*cpu*float32*interface.shape_error*"])
    assert "Interface warnings and refused inputs" not in result.stdout.str()
