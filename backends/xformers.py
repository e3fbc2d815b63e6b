"""xformers' Triton RMSNorm (``pip install xformers``) as a backend under test.

Wraps ``xformers.ops.rmsnorm.rms_norm(x, weight, eps)`` for ``forward`` (``weight=None`` for the no-weight
variant) and ``xformers.ops.rmsnorm.rms_norm_add(x, y, weight, eps)`` for the fused add. ``rms_norm_add`` adds
``y`` into its first argument in place and returns the normalized sum as a new tensor; the adapter hands it a
copy of the residual as that first argument, so ``residual_out`` is that copy, ``y`` the returned tensor, and the
caller's tensors stay as they were. The output takes the first argument's dtype, so the residual is in x's dtype.

One row per program; the weight is loaded in its own dtype and multiplied into the fp32 normalized row, rounded
once. xformers documents these as experimental and forward-only (they raise when gradients are required) and
takes contiguous tensors only (``ValueError`` otherwise). Triton kernels, on GPUs of compute capability 8.0
and up.
"""

from __future__ import annotations

from types import MappingProxyType

import torch

from ..contract.inputs import CONTRACT_DTYPE_PAIRS
from ._engine_support import cuda_missing, package_missing


class XformersRMSNorm:
    name = "xformers"
    devices = ("cpu", "cuda")  # the CPU too, so that a run there says why it is skipped (package, then CUDA)
    dtype_pairs = CONTRACT_DTYPE_PAIRS
    supports_backward = False
    rounding_class = MappingProxyType({"forward": "product_fp32"})

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from xformers.ops.rmsnorm import rms_norm

        return rms_norm(x, weight, eps)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        from xformers.ops.rmsnorm import rms_norm_add

        residual_out = residual.clone()
        y = rms_norm_add(residual_out, x, weight, eps)
        return y, residual_out

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from xformers.ops.rmsnorm import rms_norm

        return rms_norm(x, None, eps)

    def unavailable_reason(self, device: torch.device) -> str | None:
        reason = (package_missing("xformers", "xformers") or package_missing("triton", "triton")
                  or cuda_missing(device, "xformers' Triton RMSNorm"))
        if reason is None and torch.cuda.get_device_capability(device) < (8, 0):
            return "xformers enables its Triton kernels on GPUs of compute capability 8.0 and up only"
        return reason
