"""flash-linear-attention's Triton RMSNorm (``pip install fla-core``; it imports ``einops``) as a backend under test.

Wraps ``fla.modules.layernorm.rms_norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False,
residual_in_fp32=False)`` (in fla-core 0.6 the module lives at ``fla.modules.norm.layernorm``, and
``fla.modules.layernorm`` is its alias), an autograd function with forward and backward kernels:

- ``forward``: ``rms_norm(x, weight, None, eps=eps)``; ``forward_unweighted``: the same with ``weight=None``;
- ``fused_add``: ``rms_norm(x, weight, None, residual=residual, eps=eps, prenorm=True)`` returns
  ``(y, residual_out)`` in new tensors; ``residual_out`` takes the residual's dtype, so an fp32 residual with
  16-bit x is taken.

As fla-core 0.6.0 writes the kernels (``layer_norm_fwd_kernel``, ``layer_norm_fwd_kernel_row``): the weight is
loaded in its own dtype and cast to fp32, the fp32 normalized row is multiplied by it and rounded once to x's
dtype. The fused add sums ``x + residual`` in fp32, stores that sum rounded to the residual's dtype, and
normalizes the fp32 sum, not the residual as stored (the ``fp32_sum`` class); with an fp32 residual the two are
the same. Up to dim 512 a kernel of ``BT`` rows per program runs, autotuned over BT and warps with the row
count's 2048-row bucket in its key, so the configuration it picks may change with the batch size; wider rows go
one row per program. Inputs are made contiguous first. Dims above 64 KB a row raise (32768 bf16/fp16, 16384
fp32). No offset form, no fp32-output form (its ``out_dtype`` is not reachable through ``rms_norm``).
"""

from __future__ import annotations

from types import MappingProxyType

import torch

from ..contract.inputs import CONTRACT_DTYPE_PAIRS
from ._engine_support import cuda_missing, package_missing


class FlaRMSNorm:
    name = "fla"
    devices = ("cpu", "cuda")  # the CPU too, so that a run there says why it is skipped (package, then CUDA)
    dtype_pairs = CONTRACT_DTYPE_PAIRS
    supports_backward = True
    fused_add_fp32_residual = True
    # Not declared for fused_add: it normalizes the fp32 sum, so no class of the stored residual describes it.
    rounding_class = MappingProxyType({"forward": "product_fp32", "forward_unweighted": "product_fp32"})

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from fla.modules.layernorm import rms_norm

        return rms_norm(x, weight, None, eps=eps)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        from fla.modules.layernorm import rms_norm

        y, residual_out = rms_norm(x, weight, None, residual=residual, eps=eps, prenorm=True)
        return y, residual_out

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from fla.modules.layernorm import rms_norm

        return rms_norm(x, None, None, eps=eps)

    def unavailable_reason(self, device: torch.device) -> str | None:
        reason = (package_missing("fla", "fla-core") or package_missing("einops", "einops")
                  or package_missing("triton", "triton"))
        if reason is None and device.type == "cpu":
            # Seen with fla-core 0.6.0 and triton 3.9: the autotuner times its configs through a GPU driver,
            # and raises "0 active drivers" in the interpreter.
            return ("fla's RMSNorm kernels are autotuned over several configs, which Triton's CPU interpreter "
                    "cannot time; run it on a GPU")
        return reason or cuda_missing(device, "fla")
