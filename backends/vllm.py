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

``vllm`` also offers RMSNorm fused with fp8 quantization, as vLLM's quantized models call it (the ops of
``torch.ops._C``, registered when ``vllm._custom_ops`` loads the library): ``rms_norm_static_fp8_quant(out, input,
weight, scale, epsilon)``, ``fused_add_rms_norm_static_fp8_quant(out, input, residual, weight, scale, epsilon)``
(``residual += input`` in place) and, through ``vllm._custom_ops.rms_norm_dynamic_per_token_quant(input, weight,
epsilon, quant_dtype, scale_ub=None, residual=None)``, the dynamic per-token scale (``scales`` of shape
``[tokens, 1]``), with the fused add where a residual is given. The in-place fused adds get a copy of the
residual. The kernels round ``x * rms`` to x's dtype and multiply by the weight there before quantizing (the
through_x_dtype class); the dynamic fused add also normalizes the fp32 sum ``x + residual`` rather than the residual
it stores, so no fp8 rounding class is declared for it.

Neither has a backward (inference kernels) or a weight-offset form.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import torch

from ..contract.inputs import SAME_DTYPE_PAIRS
from ._engine_support import cuda_missing, package_missing


def _custom_ops() -> Any:
    from vllm import _custom_ops

    return _custom_ops


def _c_ops() -> Any:
    """``torch.ops._C``, after ``vllm._custom_ops`` has loaded the library that registers vLLM's ops there."""
    _custom_ops()
    return torch.ops._C


def _dynamic_scales(scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """vLLM's ``[tokens, 1]`` scales in the protocol's shape, ``x.shape[:-1] + (1,)``."""
    return scales.view(*x.shape[:-1], 1)


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
    fp8_rounding_class = MappingProxyType({"forward_fp8_static": "through_x_dtype",
                                           "forward_fp8_dynamic": "through_x_dtype",
                                           "fused_add_fp8_static": "through_x_dtype"})

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # the op checks that out is contiguous
        _custom_ops().rms_norm(out, x, weight, eps)
        return out

    def forward_fp8_static(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                           scale: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
        _c_ops().rms_norm_static_fp8_quant(out, x, weight, scale, eps)
        return out

    def forward_fp8_dynamic(self, x: torch.Tensor, weight: torch.Tensor,
                            eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        q, scales = _custom_ops().rms_norm_dynamic_per_token_quant(x, weight, eps, torch.float8_e4m3fn)
        return q, _dynamic_scales(scales, x)

    def fused_add_fp8_static(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                             scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
        residual_out = residual.clone()  # the op adds x into the residual it is given
        _c_ops().fused_add_rms_norm_static_fp8_quant(out, x, residual_out, weight, scale, eps)
        return out, residual_out

    def fused_add_fp8_dynamic(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                              eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        residual_out = residual.clone()
        q, scales = _custom_ops().rms_norm_dynamic_per_token_quant(x, weight, eps, torch.float8_e4m3fn,
                                                                   residual=residual_out)
        return q, _dynamic_scales(scales, x), residual_out

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
