"""What the engine adapters share: why an engine cannot run here (its package missing, no CUDA), and the
2-D row views their kernels take.

The availability checks never import the engine: several of them load hundreds of megabytes of CUDA code or
need a GPU just to import, and the harness asks every backend's availability on every device, a CPU included.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from typing import Any

import torch


def package_missing(module: str, pip_name: str) -> str | None:
    """A sentence saying ``pip_name`` is not installed, or None when ``module`` can be imported."""
    if sys.modules.get(module) is not None:  # a None entry is how Python marks a module as blocked
        return None
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"{pip_name} is not installed (pip install {pip_name})"


def cuda_missing(device: torch.device, engine: str) -> str | None:
    """Why an engine whose kernels exist only for CUDA GPUs cannot run on ``device``, or None."""
    if device.type != "cuda":
        return f"{engine}'s kernels run on CUDA GPUs only, not on {device.type}"
    if not torch.cuda.is_available():
        return "no CUDA device is available on this machine"
    return None


def rows(t: torch.Tensor) -> torch.Tensor | None:
    """``t`` as a (rows, dim) view sharing its storage, or None when its layout has no such view."""
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return None


def on_rows(kernel: Callable[..., torch.Tensor], x: torch.Tensor, *args: Any,
            keep_ranks: tuple[int, ...] = (2,), **kwargs: Any) -> torch.Tensor:
    """``kernel(x_2d, *args, **kwargs)`` reshaped back to x's shape, for engines whose entry point takes 2-D input.

    An x of a rank in ``keep_ranks`` (the ranks the engine documents) goes in as it is, strided rows included:
    that is the engine's own layout handling, under test. Other ranks go in as a (rows, dim) view, or a
    contiguous copy when no view exists.
    """
    if x.dim() in keep_ranks:
        return kernel(x, *args, **kwargs)
    x2 = rows(x)
    if x2 is None:
        x2 = x.reshape(-1, x.shape[-1])
    return kernel(x2, *args, **kwargs).view(x.shape)


def in_place_on_rows(kernel: Callable[..., Any], x: torch.Tensor, residual: torch.Tensor,
                     *args: Any, **kwargs: Any) -> None:
    """``kernel(x_2d, residual_2d, *args, **kwargs)`` for an engine's in-place fused add, which takes 2-D tensors
    and writes into both: on views of x and residual where they exist, otherwise on contiguous copies whose
    results are then copied back, so that the writes always land in the caller's tensors."""
    if x.dim() == 2 and residual.dim() == 2:
        kernel(x, residual, *args, **kwargs)
        return
    x2, r2 = rows(x), rows(residual)
    if x2 is not None and r2 is not None:
        kernel(x2, r2, *args, **kwargs)
        return
    x2, r2 = x.reshape(-1, x.shape[-1]).contiguous(), residual.reshape(-1, residual.shape[-1]).contiguous()
    kernel(x2, r2, *args, **kwargs)
    x.copy_(x2.view(x.shape))
    residual.copy_(r2.view(residual.shape))
