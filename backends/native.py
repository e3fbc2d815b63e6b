"""The native backend: the contract's fixed-order reference (``contract/reference.py``) as a backend.

It is the ground truth of the project's kernels and the CPU's default in the registry. It adds nothing to the
reference, so that judging it is judging the reference's own invariance; each variant is its reference too.
"""

from __future__ import annotations

import torch

from rmsnorm_conformance.contract.fp8 import (
    reference_fp8_dynamic,
    reference_fp8_fused_add_dynamic,
    reference_fp8_fused_add_static,
    reference_fp8_static,
)
from rmsnorm_conformance.contract.inputs import CONTRACT_DTYPE_PAIRS, SUPPORTED_DTYPES
from rmsnorm_conformance.contract.reference import (
    reference_fp32,
    reference_fused_add,
    reference_offset,
    reference_unweighted,
)


class NativeRMSNormOp:
    """RMSNorm in plain PyTorch: fp32 accumulation, bitwise batch-invariant by construction.

    ``forward`` returns ``x.dtype``; ``forward_fp32`` returns float32; both differentiate through the
    reference's fixed-order backward. It takes every dtype pair the contract defines (an fp32 weight with
    bf16/fp16 x too), and offers every variant: a fused residual add (out of place, with a residual in x's
    dtype or fp32), the ``1 + weight`` offset formed in fp32, and no weight.
    """

    name = "native"
    devices = None  # any device torch runs on
    dtypes = SUPPORTED_DTYPES
    dtype_pairs = CONTRACT_DTYPE_PAIRS
    fused_add_fp32_residual = True
    offset_dtype = "float32"
    rounding_class = "product_fp32"
    fp8_rounding_class = "fp32_once"

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward(x, weight, eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward_fp32(x, weight, eps).to(x.dtype)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return reference_fp32(x, weight, eps)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        y32, residual_out = reference_fused_add(x, residual, weight, eps)
        return y32.to(x.dtype), residual_out

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return reference_offset(x, weight, eps, self.offset_dtype).to(x.dtype)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return reference_unweighted(x, eps).to(x.dtype)

    def forward_fp8_static(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                           scale: torch.Tensor) -> torch.Tensor:
        return reference_fp8_static(x, weight, eps, scale)

    def forward_fp8_dynamic(self, x: torch.Tensor, weight: torch.Tensor,
                            eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        return reference_fp8_dynamic(x, weight, eps)

    def fused_add_fp8_static(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                             scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return reference_fp8_fused_add_static(x, residual, weight, eps, scale)

    def fused_add_fp8_dynamic(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                              eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return reference_fp8_fused_add_dynamic(x, residual, weight, eps)

    def __repr__(self) -> str:
        return "NativeRMSNormOp()"
