"""NVIDIA Transformer Engine's RMSNorm (``pip install transformer_engine[pytorch]``) as a backend under test.

Wraps the module ``transformer_engine.pytorch.RMSNorm(normalized_shape, eps=..., params_dtype=...,
zero_centered_gamma=..., device=...)``, called through ``torch.func.functional_call`` with the harness's weight
in place of the module's parameter, so the forward and backward are TE's own (``tex.rmsnorm_fwd`` /
``rmsnorm_bwd`` kernels) and the gradient reaches the weight passed in. ``zero_centered_gamma=True`` is the
weight offset: TE's kernels add 1 to the weight in their fp32 compute type.

TE casts a weight of another dtype to the input's compute dtype before its kernel, so only the weight in x's
dtype is declared. One module is built per (dim, dtype, eps, offset, device) and reused. TE has no public
unfused-API fused add or no-weight RMSNorm. The PyTorch extension is compiled against one torch at install.
"""

from __future__ import annotations

from typing import Any

import torch

from ..contract.inputs import SAME_DTYPE_PAIRS
from ._engine_support import cuda_missing, package_missing


class TransformerEngineRMSNorm:
    name = "transformer_engine"
    devices = ("cpu", "cuda")  # the CPU too, so that a run there says why it is skipped (package, then CUDA)
    dtype_pairs = SAME_DTYPE_PAIRS
    offset_dtype = "float32"

    def __init__(self) -> None:
        self._modules: dict[tuple[Any, ...], torch.nn.Module] = {}

    def _module(self, x: torch.Tensor, eps: float, zero_centered_gamma: bool) -> torch.nn.Module:
        key = (x.shape[-1], x.dtype, float(eps), zero_centered_gamma, x.device)
        if key not in self._modules:
            from transformer_engine.pytorch import RMSNorm

            self._modules[key] = RMSNorm(x.shape[-1], eps=eps, params_dtype=x.dtype,
                                         zero_centered_gamma=zero_centered_gamma, device=x.device)
        return self._modules[key]

    def _call(self, x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered_gamma: bool) -> torch.Tensor:
        module = self._module(x, eps, zero_centered_gamma)
        return torch.func.functional_call(module, {"weight": weight}, (x,))

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self._call(x, weight, eps, zero_centered_gamma=False)

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self._call(x, weight, eps, zero_centered_gamma=True)

    def unavailable_reason(self, device: torch.device) -> str | None:
        reason = package_missing("transformer_engine", "transformer_engine[pytorch]")
        if reason is None and package_missing("transformer_engine_torch", "") is not None:
            reason = ("Transformer Engine's PyTorch extension (transformer_engine_torch) is not installed "
                      "(pip install transformer_engine[pytorch], which builds it against this torch)")
        return reason or cuda_missing(device, "Transformer Engine")
