"""Unsloth's Triton RMSNorm (``pip install unsloth``) as a backend under test.

Wraps ``unsloth.kernels.fast_rms_layernorm(layernorm, X, gemma=False)``, which reads ``layernorm.weight`` and
``layernorm.variance_epsilon`` (an autograd function: forward and backward kernels), and
``unsloth.kernels.fused_add_rms_layernorm.fast_add_rms_layernorm_inference(X, residual, weight, eps)``, its
decode-step fused add (in place: ``residual = X + residual`` rounded to X's dtype, then ``X = RMSNorm(residual)
* weight``; no autograd). ``gemma=True`` is the weight offset: the weight is cast to fp32 and ``+ 1.0`` added
there.

The weight is loaded in its own dtype. The llama form rounds the normalized row to the weight's dtype before the
multiply (Hugging Face's Llama order when the weight is in x's dtype); the fused add rounds it to x's dtype; the
gemma form stays in fp32 and rounds once. No no-weight form. Importing ``unsloth`` needs a GPU and its
dependencies (unsloth_zoo, transformers, trl, peft, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import torch

from ..contract.inputs import CONTRACT_DTYPE_PAIRS
from ._engine_support import cuda_missing, package_missing


@dataclass
class _Norm:
    """The two attributes ``fast_rms_layernorm`` reads from the Hugging Face RMSNorm module it patches."""

    weight: torch.Tensor
    variance_epsilon: float


class UnslothRMSNorm:
    name = "unsloth"
    devices = ("cpu", "cuda")  # the CPU too, so that a run there says why it is skipped (package, then CUDA)
    dtype_pairs = CONTRACT_DTYPE_PAIRS
    fused_add_in_place = True
    offset_dtype = "float32"
    rounding_class = MappingProxyType({"fused_add": "normalized_rounded", "forward_offset": "product_fp32"})

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from unsloth.kernels import fast_rms_layernorm

        return fast_rms_layernorm(_Norm(weight, eps), x, gemma=False)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
        from unsloth.kernels.fused_add_rms_layernorm import fast_add_rms_layernorm_inference

        fast_add_rms_layernorm_inference(x, residual, weight, eps)

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from unsloth.kernels import fast_rms_layernorm

        return fast_rms_layernorm(_Norm(weight, eps), x, gemma=True)

    def unavailable_reason(self, device: torch.device) -> str | None:
        return (package_missing("unsloth", "unsloth") or package_missing("triton", "triton")
                or cuda_missing(device, "Unsloth"))
