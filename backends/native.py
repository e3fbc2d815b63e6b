"""The native backend: the contract's fixed-order reference (``contract/reference.py``) as a backend.

It is the ground truth of the project's kernels and the CPU's default in the registry. It adds nothing to the
reference, so that judging it is judging the reference's own invariance.
"""

from __future__ import annotations

import torch

from rmsnorm_conformance.contract.inputs import SUPPORTED_DTYPES
from rmsnorm_conformance.contract.reference import reference_fp32


class NativeRMSNormOp:
    """RMSNorm in plain PyTorch: fp32 accumulation, bitwise batch-invariant by construction.

    ``forward`` returns ``x.dtype``; ``forward_fp32`` returns float32; both differentiate through the
    reference's fixed-order backward.
    """

    name = "native"
    devices = None  # any device torch runs on
    dtypes = SUPPORTED_DTYPES

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward(x, weight, eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward_fp32(x, weight, eps).to(x.dtype)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return reference_fp32(x, weight, eps)

    def __repr__(self) -> str:
        return "NativeRMSNormOp()"
