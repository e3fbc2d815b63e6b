"""Backends with planted defects, each breaking one contract rule the way real kernels do.

The harness's own tests run the suites against them and expect the run to fail in that rule; a harness
that lets one of these through has lost detection power.
"""

from __future__ import annotations

import torch

from backends.native import NativeRMSNormOp
from backends.validation import check_inputs


class OnePlusWeight(NativeRMSNormOp):
    """Gemma-style `(1 + weight)` scaling where the contract says plain weight."""

    name = "one_plus_weight"

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return super().forward_fp32(x, torch.ones_like(weight), eps) * (1 + weight.float())


class SmallBatchReduction(NativeRMSNormOp):
    """Below 16 rows the sum of squares runs in another order, as torch's CUDA reduction re-plans."""

    name = "small_batch_reduction"

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        rows = x.numel() // max(x.shape[-1], 1)
        if rows >= 16:
            return super().forward_fp32(x, weight, eps)
        x32 = x.float()
        ms = torch.flip(x32 * x32, dims=[-1]).cumsum(-1)[..., -1:] / x.shape[-1]
        return x32 / torch.sqrt(ms + eps) * weight.float()


def make_correct_backend() -> NativeRMSNormOp:
    """A zero-argument factory, for `--backend=module:factory`."""
    return NativeRMSNormOp()


correct_instance = NativeRMSNormOp()


class CudaOnly(NativeRMSNormOp):
    """Declares CUDA only: on a CPU it must be skipped with that reason, never run and never passed."""

    name = "cuda_only"
    devices = ("cuda",)


cuda_only = CudaOnly()
