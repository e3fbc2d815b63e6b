"""PyTorch's own RMSNorm as a backend under test, through the public backend protocol only.

Two adapters, because users call it two ways: `F.rms_norm` in the input dtype (what `nn.RMSNorm` does), and
upcast to fp32 then cast back (what many training stacks do to keep fp32 accumulation explicit).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class TorchRMSNorm:
    """`torch.nn.functional.rms_norm` on the tensors as given."""

    name = "torch_rms_norm"
    devices = None  # wherever torch runs

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    def unavailable_reason(self, device: torch.device) -> str | None:
        return None if hasattr(F, "rms_norm") else f"torch {torch.__version__} has no F.rms_norm (2.4+)"


class TorchRMSNormUpcast(TorchRMSNorm):
    """`F.rms_norm` on fp32 copies of x and weight, the result cast back to x.dtype."""

    name = "torch_rms_norm_fp32"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward_fp32(x, weight, eps).to(x.dtype)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps)
