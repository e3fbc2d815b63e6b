"""SGLang's kernel package as a backend under test (optional: ``pip install sgl-kernel``, built for one torch).

Wraps ``sgl_kernel.rmsnorm(input, weight, eps)``, ``sgl_kernel.fused_add_rmsnorm(input, residual, weight, eps)``
(in place: ``residual += input``, then ``input = RMSNorm(residual) * weight``), ``sgl_kernel.gemma_rmsnorm`` for
the weight offset (``* (weight + 1)``) and ``sgl_kernel.gemma_fused_add_rmsnorm`` as
:meth:`SglKernelRMSNorm.fused_add_offset` (no contract variant checks an offset fused add yet).

These are FlashInfer's CUDA norm kernels compiled into sgl-kernel's ``torch.ops.sgl_kernel`` library: one dtype
for input, residual and weight, float16 and bfloat16 only, 2-D ``(batch, hidden)`` input; the offset is added to
the weight in fp32. Importing ``sgl_kernel`` loads its CUDA library for the GPU's architecture, so it needs a
GPU and a torch of the ABI it was built against. No backward, no no-weight form, and no fp8 output: sgl-kernel
exposes no RMSNorm fused with fp8 quantization (SGLang takes FlashInfer's ``rmsnorm_quant`` for that, behind
``SGLANG_USE_FLASHINFER_RMSNORM_QUANT_OPS``: the ``flashinfer`` backend holds it).
"""

from __future__ import annotations

import torch

from ._engine_support import cuda_missing, in_place_on_rows, on_rows, package_missing

HALF_PAIRS: tuple[tuple[torch.dtype, torch.dtype], ...] = ((torch.bfloat16, torch.bfloat16),
                                                            (torch.float16, torch.float16))


class SglKernelRMSNorm:
    name = "sgl_kernel"
    devices = ("cpu", "cuda")  # the CPU too, so that a run there says why it is skipped (package, then CUDA)
    dtype_pairs = HALF_PAIRS
    supports_backward = False
    fused_add_in_place = True
    offset_dtype = "float32"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        import sgl_kernel

        return on_rows(sgl_kernel.rmsnorm, x, weight, eps)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
        import sgl_kernel

        in_place_on_rows(sgl_kernel.fused_add_rmsnorm, x, residual, weight, eps)

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        import sgl_kernel

        return on_rows(sgl_kernel.gemma_rmsnorm, x, weight, eps)

    def fused_add_offset(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                         eps: float = 1e-6) -> None:
        """Gemma's fused add, in place like :meth:`fused_add`, with ``1 + weight`` formed in fp32."""
        import sgl_kernel

        in_place_on_rows(sgl_kernel.gemma_fused_add_rmsnorm, x, residual, weight, eps)

    def unavailable_reason(self, device: torch.device) -> str | None:
        return package_missing("sgl_kernel", "sgl-kernel") or cuda_missing(device, "sgl-kernel")
