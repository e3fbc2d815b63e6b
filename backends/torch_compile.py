"""`torch.compile` of the seed's eager formula, as a backend under test.

This is what a team gets by compiling the reference implementation they started from; whether Inductor's
generated reduction keeps a row's bits independent of the batch is for the harness to answer.
"""

from __future__ import annotations

import functools

import torch

from rmsnorm_conformance.contract.reference import seed_formula_fp32


def seed_formula(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return seed_formula_fp32(x, weight, eps).to(x.dtype)


@functools.cache
def _compiled():  # compiled once per process, on first use
    return torch.compile(seed_formula, dynamic=None)


class CompiledSeedFormula:
    name = "torch_compile"
    devices = ("cpu", "cuda")

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return _compiled()(x, weight, eps)

    def unavailable_reason(self, device: torch.device) -> str | None:
        if not hasattr(torch, "compile"):
            return f"torch {torch.__version__} has no torch.compile"
        return None
