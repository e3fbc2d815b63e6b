"""Liger-Kernel's Triton RMSNorm as a backend under test (optional: `pip install liger-kernel`).

Liger switches from a one-row-per-program kernel to a 16-rows-per-program kernel once rows reach 32768 at
dims of 256 or less; whether that changes any row's bits is exactly what Axis-A asks. Llama casting mode
(fp32 accumulation, plain weight) is the one the contract describes.
"""

from __future__ import annotations

import importlib.util

import torch


class LigerRMSNorm:
    name = "liger"
    devices = ("cpu", "cuda")

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return LigerRMSNormFunction.apply(x, weight, eps, 0.0, "llama", False)

    def unavailable_reason(self, device: torch.device) -> str | None:
        if importlib.util.find_spec("liger_kernel") is None:
            return "liger-kernel is not installed (pip install liger-kernel)"
        if importlib.util.find_spec("triton") is None:
            return "liger-kernel needs triton, which is not installed"
        if device.type == "cpu":
            # Seen with liger-kernel 0.8.5 and triton 3.9: its forward kernel calls .to() on the scalar
            # `offset`, which the interpreter passes as a Python float.
            return "Liger-Kernel's kernels do not run in Triton's CPU interpreter; run it on a GPU"
        if device.type == "cuda" and not torch.cuda.is_available():
            return "no CUDA device is available on this machine"
        return None
