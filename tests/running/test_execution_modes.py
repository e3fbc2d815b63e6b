"""The execution-mode sample of the default gate (axis_a.execution_mode): a kernel whose compiled path differs from
eager, one whose fused add differs only under inference_mode, one with a path of its own under deterministic
algorithms and one that changes order from 4 threads on fail without any option; --modes=none turns the
sample off; the wrapped modes call every entry point, an in-place fused add included."""

from __future__ import annotations

import json
import os

import pytest
import torch

from rmsnorm_conformance.harness.plugin.parity_gate import parse_modes, sample_on
from rmsnorm_conformance.harness.running.backend import Backend
from rmsnorm_conformance.harness.running.modes import (
    WRAPPED,
    ModeBackend,
    deterministic_algorithms,
    intra_op_threads,
    sample_backend,
    sample_modes,
    thread_counts,
)
from rmsnorm_conformance.zoo import EngineStyleRMSNorm

# What these runs check needs no large batch: the threshold plans and sweeps at a CPU budget's 1/32.
SMALL = "--max-elements=262144"
ARGS = ["--pyargs", "rmsnorm_conformance.suites", "--device=cpu", "--dtype=float32", "--sweep=ci", SMALL]


def test_a_compiled_path_that_differs_fails_the_default_gate(run, pytester):
    backend = "--backend=rmsnorm_conformance.zoo:CompiledPathReduction"
    result = run(*ARGS, backend, "-k", "test_execution_mode_at_thresholds", "--report=r.json")
    assert result.ret == 1, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*contract rule axis_a.execution_mode*under torch.compile differ*"])
    report = json.loads((pytester.path / "r.json").read_text())
    assert {s["rule"] for s in report["summaries"] if s["failures"]} == {"axis_a.execution_mode"}
    assert "torch.compile" in report["environment"]["execution modes"]

    off = run(*ARGS, backend, "-k", "test_execution_mode", "--modes=none", "--report=off.json")
    assert off.ret != 1, off.stdout.str()[-3000:]
    report = json.loads((pytester.path / "off.json").read_text())
    assert report["verdict"] != "FAIL" and not any(s["checks"] for s in report["summaries"])
    assert any("--modes=none" in o["reason"] for o in report["outcomes"].values() if o["outcome"] == "skipped")


COMPILE_TURNED_OFF = """
import torch
import torch._dynamo.config

from rmsnorm_conformance.zoo import CompiledPathReduction

torch._dynamo.config.disable = True  # as TORCH_COMPILE_DISABLE=1 does: torch.compile returns the function itself
torch._dynamo.config.suppress_errors = True  # an error in a compiled path would run the eager code instead


class Kernel(CompiledPathReduction):
    name = "compile_turned_off"
"""


def test_the_compiled_checks_compile_whatever_the_process_set(run, pytester):
    """A kernel whose compiled path differs from eager, imported with Dynamo turned off: torch.compile returned the
    function itself, its compiled path never ran, and the gate passed it (eager against eager). The harness's
    compiled calls now set Dynamo on, with errors raised, for their own calls (modes.compile_settings)."""
    pytester.makepyfile(compile_turned_off=COMPILE_TURNED_OFF)
    result = run(*ARGS, "--backend=compile_turned_off:Kernel", "-k", "test_execution_mode_at_thresholds")
    assert result.ret == 1, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*contract rule axis_a.execution_mode*under torch.compile differ*"])


def test_a_fused_add_that_differs_only_under_inference_mode_fails_the_default_gate(run):
    result = run(*ARGS, "--backend=rmsnorm_conformance.zoo:FusedAddInferencePath",
                 "-k", "test_fused_add_execution_mode_at_thresholds")
    assert result.ret == 1, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*contract rule axis_a.fused_add*fused_add y*under torch.inference_mode() differ*"])


def test_modes_none_turns_the_sample_off_and_stands_alone():
    assert parse_modes("none") == () and not sample_on("none")
    assert sample_on(None) and sample_on("compile")
    assert parse_modes("compile,cudagraph") == ("compile", "cudagraph")
    with pytest.raises(ValueError, match="give it alone"):
        parse_modes("none,compile")
    assert sample_modes(torch.device("cpu")) == ("compile", "deterministic")
    assert sample_modes(torch.device("cuda", 0)) == ("compile", "cudagraph", "deterministic")
    assert parse_modes("deterministic") == ("deterministic",)


def test_the_trainers_modes_put_back_what_the_process_had():
    """Deterministic algorithms and another thread count hold only inside: the process's own settings, whatever
    they were, come back after (a check must leave no global state behind)."""
    before = torch.get_num_threads()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with deterministic_algorithms():
            assert torch.are_deterministic_algorithms_enabled()
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
    with intra_op_threads(4):
        assert torch.get_num_threads() == 4
    assert torch.get_num_threads() == before
    assert {1, 2, 4, os.cpu_count()} == set(thread_counts())


@pytest.mark.parametrize(("defect", "label"), [("DeterministicModePath", "torch.use_deterministic_algorithms(True)"),
                                               ("ManyThreadsReduction", "4 intra-op threads")])
def test_a_path_of_the_trainers_modes_fails_the_default_gate(run, defect, label):
    """A kernel that reduces in another order under deterministic algorithms, or only from 4 threads on, fails the
    execution-mode sample without any option, naming the mode."""
    result = run(*ARGS, f"--backend=rmsnorm_conformance.zoo:{defect}", "-k", "test_execution_mode_at_thresholds")
    assert result.ret == 1, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines([f"*contract rule axis_a.execution_mode*under {label}*differ*"])


def test_a_mode_wraps_every_entry_point_and_keeps_the_declarations():
    inner = Backend(EngineStyleRMSNorm())
    moded = Backend(ModeBackend(inner, "compile"))
    for method in WRAPPED[1:]:
        assert callable(getattr(moded.impl, method, None)) == callable(getattr(inner.impl, method, None))
    assert moded.fused_add_in_place and moded.offset_dtype == inner.offset_dtype
    assert sample_backend(inner, "compile", torch.device("cpu")) is sample_backend(inner, "compile",
                                                                                   torch.device("cpu"))


def test_an_in_place_fused_add_compiled_writes_what_eager_writes():
    inner = Backend(EngineStyleRMSNorm())
    compiled = sample_backend(inner, "compile", torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 64, generator=gen).to(torch.bfloat16)
    residual = torch.randn(3, 64, generator=gen).to(torch.bfloat16)
    w = torch.randn(64, generator=gen).to(torch.bfloat16)
    eager = inner.fused_add(x, residual, w, 1e-6)
    got = compiled.fused_add(x, residual, w, 1e-6)
    for a, b in zip(got, eager, strict=True):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))
