"""FlashInfer's RMSNorm kernels as a backend under test (optional: ``pip install flashinfer-python``).

Wraps ``flashinfer.norm``: ``rmsnorm(input, weight, eps)`` for ``forward``, ``fused_add_rmsnorm(input, residual,
weight, eps)`` for the fused add (in place: ``residual += input``, then ``input = RMSNorm(residual) * weight``),
``gemma_rmsnorm(input, weight, eps)`` for the weight offset (``* (weight + 1)``), and
``gemma_fused_add_rmsnorm(input, residual, weight, eps)`` as :meth:`FlashInferRMSNorm.fused_add_offset` (the
contract has no variant for an offset fused add yet, so no rule checks that one).

As FlashInfer 0.7 writes them, the kernels are CuTe DSL kernels compiled at first use (nvidia-cutlass-dsl), or,
with ``FLASHINFER_USE_CUDA_NORM=1`` or where the DSL cannot target the GPU, CUDA kernels JIT-built by nvcc. Both
take input, residual and weight in one dtype (no fp32 weight with 16-bit x), add the offset to the weight in
fp32 (``w + 1.0`` in registers), multiply the fp32 normalized row by it and round once; the CuTe kernels take
float32, float16 and bfloat16, the CUDA ones float16 and bfloat16 only. ``rmsnorm`` takes 2-D input and 3-D
``[tokens, heads, head_dim]`` input (a per-head kernel); other ranks are passed as their 2-D rows. No backward,
no no-weight form.

fp8 output: ``rmsnorm_quant(out, input, weight, scale, eps)`` and ``fused_add_rmsnorm_quant(out, input, residual,
weight, scale, eps)`` (``residual += input`` in place) quantize to ``out``'s dtype with a static scale of shape
``(1,)``: the fp32 normalized row times the weight, times ``1 / scale``, clamped to +-448 and cast once (the
fp32_once class); they take 2-D input. FlashInfer ships no dynamic per-token fp8 form. Its fused kernel
normalizes the fp32 sum ``x + residual`` rather than the residual it stores, so no fp8 rounding class is declared
for it.
"""

from __future__ import annotations

import os
from types import MappingProxyType

import torch

from ..contract.inputs import SAME_DTYPE_PAIRS
from ._engine_support import cuda_missing, in_place_on_rows, on_rows, package_missing

HALF_PAIRS: tuple[tuple[torch.dtype, torch.dtype], ...] = ((torch.bfloat16, torch.bfloat16),
                                                            (torch.float16, torch.float16))


def cute_dsl_path() -> bool:
    """Will FlashInfer run its CuTe DSL norm kernels (fp32 included) rather than the CUDA JIT ones?"""
    return os.environ.get("FLASHINFER_USE_CUDA_NORM", "0") != "1" and package_missing("cutlass", "") is None


class FlashInferRMSNorm:
    name = "flashinfer"
    devices = ("cpu", "cuda")  # the CPU too, so that a run there says why it is skipped (package, then CUDA)
    supports_backward = False
    fused_add_in_place = True
    offset_dtype = "float32"
    rounding_class = "product_fp32"
    fp8_rounding_class = MappingProxyType({"forward_fp8_static": "fp32_once"})

    def __init__(self) -> None:
        # Read once at load: the harness checks the declaration, and FlashInfer picks its path per process.
        self.dtype_pairs = SAME_DTYPE_PAIRS if cute_dsl_path() else HALF_PAIRS

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from flashinfer.norm import rmsnorm

        return on_rows(rmsnorm, x, weight, eps, keep_ranks=(2, 3))

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
        from flashinfer.norm import fused_add_rmsnorm

        in_place_on_rows(fused_add_rmsnorm, x, residual, weight, eps)

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from flashinfer.norm import gemma_rmsnorm

        return on_rows(gemma_rmsnorm, x, weight, eps, keep_ranks=(2, 3))

    def fused_add_offset(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                         eps: float = 1e-6) -> None:
        """Gemma's fused add, in place like :meth:`fused_add`, with ``1 + weight`` formed in fp32."""
        from flashinfer.norm import gemma_fused_add_rmsnorm

        in_place_on_rows(gemma_fused_add_rmsnorm, x, residual, weight, eps)

    def forward_fp8_static(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                           scale: torch.Tensor) -> torch.Tensor:
        from flashinfer.norm import rmsnorm_quant

        def quantized(rows: torch.Tensor) -> torch.Tensor:
            out = torch.empty(rows.shape, dtype=torch.float8_e4m3fn, device=rows.device)
            rmsnorm_quant(out, rows, weight, scale.reshape(1), eps)
            return out

        return on_rows(quantized, x)

    def fused_add_fp8_static(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                             scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from flashinfer.norm import fused_add_rmsnorm_quant

        x2 = x.reshape(-1, x.shape[-1])
        residual_out = residual.reshape(-1, residual.shape[-1]).clone()  # the kernel adds x into it
        out = torch.empty(x2.shape, dtype=torch.float8_e4m3fn, device=x.device)
        fused_add_rmsnorm_quant(out, x2, residual_out, weight, scale.reshape(1), eps)
        return out.view(x.shape), residual_out.view(residual.shape)

    def unavailable_reason(self, device: torch.device) -> str | None:
        return package_missing("flashinfer", "flashinfer-python") or cuda_missing(device, "FlashInfer")
