"""Liger-Kernel's Triton RMSNorm as a backend under test (optional: `pip install liger-kernel`): its llama
casting mode for ``forward``, its fused residual add, its Gemma casting mode (offset 1.0) for the weight offset,
and its no-weight path.

Liger switches from a one-row-per-program kernel to a 16-rows-per-program kernel once rows reach 32768 at
dims of 256 or less; whether that changes any row's bits is exactly what Axis-A asks. Its rounding classes, as
its kernels are written (liger_kernel/ops/rms_norm.py and fused_add_rms_norm.py, 0.8.5): llama mode rounds the
normalized row to x's dtype before the weight multiply (the Hugging Face order); gemma mode multiplies by
``1 + weight`` in fp32 and rounds once. The weight is loaded through its own pointer type, so an fp32 weight
with bf16/fp16 x is taken as such.
"""

from __future__ import annotations

import importlib.util
import os
from types import MappingProxyType

import torch

from ..contract.inputs import CONTRACT_DTYPE_PAIRS


class LigerRMSNorm:
    name = "liger"
    devices = ("cpu", "cuda")
    dtype_pairs = CONTRACT_DTYPE_PAIRS
    offset_dtype = "float32"  # gemma mode casts the weight to fp32 and adds the offset there
    rounding_class = MappingProxyType({"forward": "normalized_rounded", "fused_add": "normalized_rounded",
                                       "forward_offset": "product_fp32"})

    def __init__(self) -> None:
        if not _offers_fused_add():
            self.fused_add = None  # a Liger-Kernel older than its fused add: the variant is skipped as not offered

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return LigerRMSNormFunction.apply(x, weight, eps, 0.0, "llama", False)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

        return LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 0.0, "llama", False)

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return LigerRMSNormFunction.apply(x, weight, eps, 1.0, "gemma", False)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return LigerRMSNormFunction.apply(x, None, eps, 0.0, "llama", False)

    def unavailable_reason(self, device: torch.device) -> str | None:
        if importlib.util.find_spec("liger_kernel") is None:
            return "liger-kernel is not installed (pip install liger-kernel)"
        if importlib.util.find_spec("triton") is None:
            return "liger-kernel needs triton, which is not installed"
        if device.type == "cpu":
            # Seen with liger-kernel 0.8.5 and triton 3.9: its forward kernel calls .to() on the scalar
            # `offset`, which the interpreter passes as a Python float.
            return "Liger-Kernel's kernels do not run in Triton's CPU interpreter; run it on a GPU"
        if device.type == "cuda" and not torch.cuda.is_available():
            return "no CUDA device is available on this machine"
        return None


def _offers_fused_add() -> bool:
    """Whether the installed Liger-Kernel has its fused add module (True where none is installed: the backend is
    then skipped as unavailable, not for a missing variant).

    Looked up as a file beside the package, not with ``find_spec("liger_kernel.ops.fused_add_rms_norm")``: that
    imports ``liger_kernel.ops``, which imports peft, transformers and scikit-learn where they are installed, and
    pytest-xdist's controller builds this object while it resolves ``--backend``, before it starts a worker (8.4 s
    of the RL command's start on an H200 machine).
    """
    spec = importlib.util.find_spec("liger_kernel")
    if spec is None or not spec.submodule_search_locations:
        return True
    return any(os.path.isfile(os.path.join(folder, "ops", "fused_add_rms_norm.py"))
               for folder in spec.submodule_search_locations)
