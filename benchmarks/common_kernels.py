"""The RMSNorm implementations people start from, in the shapes they ship in, as backends for
benchmarks/verdicts.py and benchmarks/hf_gradients.py: a plain function, and Hugging Face's modules written as
transformers writes them (modeling_llama.py, modeling_qwen3.py, modeling_gemma.py), so that transformers is not
needed. ``F.rms_norm`` and ``torch.compile`` are the harness's own adapters (torch_rms_norm, torch_compile).
"""

from __future__ import annotations

import torch
from torch import nn


def plain_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The formula as a function, in fp32 inside, with no shape check of its own."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


class LlamaRMSNorm(nn.Module):
    """transformers' LlamaRMSNorm (Qwen3RMSNorm is the same code): the normalized row rounded to x's dtype, then
    multiplied by the weight in the weight's dtype."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return llama_rms_norm(hidden_states, self.weight, self.variance_epsilon)


class GemmaRMSNorm(nn.Module):
    """transformers' GemmaRMSNorm: all in fp32, scaled by 1 + weight (its weights are stored zero-centred), rounded
    to x's dtype once at the end."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gemma_rms_norm(x, self.weight, self.eps)


def llama_rms_norm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    output = x.float()
    output = output * torch.rsqrt(output.pow(2).mean(-1, keepdim=True) + eps)
    output = output * (1.0 + weight.float())
    return output.type_as(x)
