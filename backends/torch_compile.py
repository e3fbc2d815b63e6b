"""`torch.compile` of the eager formulas, as a backend under test: the seed's RMSNorm and each variant's.

This is what a team gets by compiling the reference implementation they started from; whether Inductor's
generated reductions keep a row's bits independent of the batch is for the harness to answer. The variants are
the formulas engines and Hugging Face write in eager torch: ``x + residual`` then the norm, Gemma's
``* (1 + weight.float())``, and the norm with no weight.
"""

from __future__ import annotations

import functools

import torch

from ..contract.inputs import CONTRACT_DTYPE_PAIRS
from ..contract.reference import seed_formula_fp32


def seed_formula(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return seed_formula_fp32(x, weight, eps).to(x.dtype)


def fused_add_formula(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    # x + residual is computed in fp32 and rounded once to the promoted dtype: the residual's when it is fp32.
    residual_out = (x + residual).to(residual.dtype)
    return seed_formula_fp32(residual_out, weight, eps).to(x.dtype), residual_out


def offset_formula(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return seed_formula_fp32(x, 1.0 + weight.float(), eps).to(x.dtype)


def unweighted_formula(x: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


@functools.cache
def _compiled(formula: object) -> object:  # compiled once per process and formula, on first use
    return torch.compile(formula, dynamic=None)


class CompiledSeedFormula:
    name = "torch_compile"
    devices = ("cpu", "cuda")
    dtype_pairs = CONTRACT_DTYPE_PAIRS
    fused_add_fp32_residual = True
    rounding_class = "product_fp32"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return _compiled(seed_formula)(x, weight, eps)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        return _compiled(fused_add_formula)(x, residual, weight, eps)

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return _compiled(offset_formula)(x, weight, eps)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return _compiled(unweighted_formula)(x, eps)

    def unavailable_reason(self, device: torch.device) -> str | None:
        if not hasattr(torch, "compile"):
            return f"torch {torch.__version__} has no torch.compile"
        return None
