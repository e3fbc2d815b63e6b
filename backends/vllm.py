"""vLLM's RMSNorm kernels as backends under test (optional: vLLM, which pins its own CUDA torch).

``vllm`` wraps the CUDA custom ops behind ``vllm._custom_ops``: ``rms_norm(out, input, weight, epsilon)`` writes
the normalized rows into a preallocated ``out``, and ``fused_add_rms_norm(input, residual, weight, epsilon)``
works in place (``residual += input``, then ``input = RMSNorm(residual)``), as vLLM's decoder layers call them.
Both kernels are templated on one scalar type for input, residual and weight: the weight is in x's dtype, and
the residual too. ``weight=None`` (vLLM's ``RMSNorm(has_weight=False)``) is the no-weight variant.

``vllm_batch_invariant`` wraps vLLM's batch-invariant mode (``VLLM_BATCH_INVARIANT=1``):
``rms_norm_batch_invariant(input, weight, eps, residual=None)`` in ``vllm.model_executor.determinism.batch_invariant``
(``rms_norm`` in ``vllm.model_executor.layers.batch_invariant`` in older releases), a one-row-per-program Triton
kernel that multiplies the fp32 normalized row by the weight in fp32 and rounds once; with a residual it calls
the same in-place ``fused_add_rms_norm`` as above, which vLLM documents as batch invariant.

Neither has a backward (inference kernels) or a weight-offset form.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import torch

from rmsnorm_conformance.contract.inputs import SAME_DTYPE_PAIRS

from ._engine_support import cuda_missing, package_missing


def _custom_ops() -> Any:
    from vllm import _custom_ops

    return _custom_ops


def batch_invariant_rms_norm() -> Any:
    """vLLM's batch-invariant RMSNorm entry point, where this vLLM keeps it."""
    try:
        from vllm.model_executor.determinism.batch_invariant import rms_norm_batch_invariant
    except ImportError:
        from vllm.model_executor.layers.batch_invariant import rms_norm as rms_norm_batch_invariant
    return rms_norm_batch_invariant


class VllmRMSNorm:
    name = "vllm"
    devices = ("cpu", "cuda")  # the CPU too, so that a run there says why it is skipped (package, then CUDA)
    dtype_pairs = SAME_DTYPE_PAIRS  # one scalar_t for input and weight
    supports_backward = False
    fused_add_in_place = True

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # the op checks that out is contiguous
        _custom_ops().rms_norm(out, x, weight, eps)
        return out

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
        _custom_ops().fused_add_rms_norm(x, residual, weight, eps)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        _custom_ops().rms_norm(out, x, None, eps)
        return out

    def unavailable_reason(self, device: torch.device) -> str | None:
        return package_missing("vllm", "vllm") or cuda_missing(device, "vLLM")


class VllmBatchInvariantRMSNorm:
    name = "vllm_batch_invariant"
    devices = ("cpu", "cuda")  # the CPU too, so that a run there says why it is skipped (package, then CUDA)
    # The Triton forward takes any weight dtype, but its fused add is the same-scalar_t CUDA op.
    dtype_pairs = SAME_DTYPE_PAIRS
    supports_backward = False
    fused_add_in_place = True
    rounding_class = MappingProxyType({"forward": "product_fp32"})

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return batch_invariant_rms_norm()(x, weight, eps)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
        batch_invariant_rms_norm()(x, weight, eps, residual=residual)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return batch_invariant_rms_norm()(x, None, eps)

    def unavailable_reason(self, device: torch.device) -> str | None:
        return (package_missing("vllm", "vllm") or package_missing("triton", "triton")
                or cuda_missing(device, "vLLM"))
