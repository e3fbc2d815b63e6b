"""quack's RMSNorm (``pip install quack-kernels``) as a backend under test: CuTe DSL kernels for Hopper and newer.

Wraps ``quack.rmsnorm(x, weight, bias=None, residual=None, out_dtype=None, residual_dtype=None, eps=1e-6,
prenorm=False, weight_offset=0.0)``, an autograd function (forward and backward kernels):

- ``forward``: ``rmsnorm(x, weight, eps=eps)``; ``forward_fp32``: the same with ``out_dtype=torch.float32``;
- ``fused_add``: ``rmsnorm(x, weight, residual=residual, residual_dtype=residual.dtype, prenorm=True)`` returns
  ``(y, residual_out)`` in new tensors (not in place); the residual may be fp32 with 16-bit x;
- ``forward_offset``: ``weight_offset=1.0``, which quack adds to the weight in fp32;
- ``forward_unweighted``: ``weight=None``.

The weight is loaded in its own dtype (fp32 weights with 16-bit x are taken as such) and the fp32 normalized row
is multiplied by it and rounded once. Kernels are compiled at first use per (dtypes, dim).
"""

from __future__ import annotations

import torch

from ..contract.inputs import CONTRACT_DTYPE_PAIRS
from ._engine_support import cuda_missing, package_missing


class QuackRMSNorm:
    name = "quack"
    devices = ("cpu", "cuda")  # the CPU too, so that a run there says why it is skipped (package, then CUDA)
    dtype_pairs = CONTRACT_DTYPE_PAIRS
    fused_add_fp32_residual = True
    offset_dtype = "float32"
    rounding_class = "product_fp32"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from quack import rmsnorm

        return rmsnorm(x, weight, eps=eps)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from quack import rmsnorm

        return rmsnorm(x, weight, out_dtype=torch.float32, eps=eps)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        from quack import rmsnorm

        y, residual_out = rmsnorm(x, weight, residual=residual, residual_dtype=residual.dtype, eps=eps, prenorm=True)
        return y, residual_out

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from quack import rmsnorm

        return rmsnorm(x, weight, eps=eps, weight_offset=1.0)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from quack import rmsnorm

        return rmsnorm(x, None, eps=eps)

    def unavailable_reason(self, device: torch.device) -> str | None:
        reason = package_missing("quack", "quack-kernels") or cuda_missing(device, "quack")
        if reason is None and torch.cuda.get_device_capability(device) < (9, 0):
            name = torch.cuda.get_device_name(device)
            return f"quack's kernels target SM90 (Hopper) and newer; {name} is older"
        return reason
