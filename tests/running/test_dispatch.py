"""Registry dispatch (the project's own kernel registry, not a conformance rule, so not in the suites every kernel
author runs): ``get_op("rms_norm", device=...)`` finds a backend that can run and is correct there."""

from __future__ import annotations

import pytest
import torch

from rmsnorm_conformance.contract.reference import seed_formula_fp32
from rmsnorm_conformance.harness import (
    OpBackend,
    kernel_registry,
)


def test_cpu_dispatch_is_native():
    assert kernel_registry.get_op("rms_norm", "cpu").name == OpBackend.PYTORCH_NATIVE_RMS_NORM.short_name


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_dispatch_falls_back_and_computes(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device is available on this machine")
    op = kernel_registry.get_op("rms_norm", device)
    assert op.unavailable_reason(device) is None
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4096, generator=g).to(device=device, dtype=torch.bfloat16)
    w = torch.randn(4096, generator=g).to(device=device, dtype=torch.bfloat16)
    out = op.forward(x, w, 1e-6)
    expected = seed_formula_fp32(x, w, 1e-6)
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=1.6e-2)
    assert out.dtype == torch.bfloat16


def test_cuda_priority_ends_in_native():
    for kind in ("cuda", "rocm", "cpu"):
        order = kernel_registry._priorities[kind]["rms_norm"]
        assert order[-1] is OpBackend.PYTORCH_NATIVE_RMS_NORM, kind


def test_unknown_op_names_the_op():
    with pytest.raises(KeyError, match="layer_norm"):
        kernel_registry.get_op("layer_norm", "cpu")
