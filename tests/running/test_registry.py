"""Backend resolution: names, entry points, `module:attr` classes, factories and instances, dispatch."""

from __future__ import annotations

import pytest
import torch

from rmsnorm_conformance.harness.running.backend import Backend
from rmsnorm_conformance.harness.running.registry import (
    KernelRegistry,
    OpBackend,
    instantiate,
    load_backend,
    parse_backend_option,
)


@pytest.mark.parametrize("spec", ["rmsnorm_conformance.zoo:OnePlusWeight",
                                  "rmsnorm_conformance.zoo:make_correct_backend",
                                  "rmsnorm_conformance.zoo:correct_instance", "native"])
def test_backend_specs_resolve(spec):
    backend = load_backend(spec)
    assert isinstance(backend, Backend)
    assert backend.forward(torch.ones(1, 4), torch.ones(4), 1e-6).shape == (1, 4)


def test_unknown_specs_are_named():
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        load_backend("nope")
    with pytest.raises(ImportError, match="no_such_module"):
        load_backend("no_such_module:Thing")
    with pytest.raises(ImportError, match="has no attribute 'Missing'"):
        load_backend("rmsnorm_conformance.zoo:Missing")
    with pytest.raises(TypeError, match="neither a backend"):
        instantiate(42)


def test_minimal_protocol_gets_defaults():
    class Minimal:
        name = "minimal"

        def forward(self, x, weight, eps=1e-6):
            return x * weight

    b = Backend(Minimal())
    assert b.dtypes == (torch.float32, torch.bfloat16, torch.float16)
    assert b.device_types == ("cpu", "cuda")
    assert not b.has_forward_fp32
    assert b.unavailable_reason("cpu") is None
    assert b.supports_backward("cpu")  # probed: its output has a grad_fn
    with pytest.raises(TypeError, match="forward"):
        Backend(object())


def test_option_parsing_expands_all_and_drops_duplicates():
    assert parse_backend_option("native,native") == ["native"]
    assert parse_backend_option("all")[:3] == ["native", "triton", "cuda"]


def test_dispatch_skips_what_cannot_run_and_falls_back():
    registry = KernelRegistry({"cpu": {"rms_norm": ["no_such_module:X", OpBackend.PYTORCH_NATIVE_RMS_NORM]}})
    assert registry.get_op("rms_norm", "cpu").name == "native"
    registry.register("rms_norm", "rmsnorm_conformance.zoo:make_correct_backend", device_kinds=("cpu",))
    assert registry.priority("rms_norm", "cpu")[0] == "rmsnorm_conformance.zoo:make_correct_backend"
    with pytest.raises(KeyError, match="no backends registered for op 'softmax'"):
        registry.get_op("softmax", "cpu")
