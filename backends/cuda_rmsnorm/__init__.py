"""The CUDA C++ RMSNorm backend: batch-invariant forward and backward kernels, built on first use.

Importing this package never compiles and never fails: the extension is built (or loaded from torch's
extension cache) the first time the backend is asked about, or used on, a CUDA device, and any reason it
cannot run there (no GPU, no toolkit, a failed build) is reported by ``unavailable_reason``.
"""

from __future__ import annotations

import threading
from types import ModuleType

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from rmsnorm_conformance.contract.inputs import SUPPORTED_DTYPES, check_inputs

from ._build import BUILD_DIR_ENV

__all__ = ["BUILD_DIR_ENV", "CudaRMSNormOp"]

# The built extension once loaded; the failure reason once a build failed (not retried in this process).
_module: ModuleType | None = None
_build_error: str | None = None
_build_lock = threading.Lock()


def _environment_reason(device: torch.device) -> str | None:
    """Why no CUDA build can run on `device`, from what torch and the machine say, without building."""
    if device.type != "cuda":
        return f"the cuda backend runs on cuda devices, not {device.type}"
    if getattr(torch.version, "hip", None):
        return "the cuda backend needs a CUDA build of torch, not a ROCm one"
    if not torch.version.cuda:
        return f"torch {torch.__version__} was built without CUDA, so the CUDA extension cannot be built"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (torch.cuda.is_available() is False)"
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        return f"no CUDA device {device} (torch sees {torch.cuda.device_count()})"
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME is None:
        return "no CUDA toolkit found to build the extension: set CUDA_HOME or put nvcc on the PATH"
    if not cpp_extension.is_ninja_available():
        return "ninja is needed to build the CUDA extension (pip install ninja)"
    return None


def _device_arch(device: torch.device) -> str | None:
    """The device's own arch when it is older than Hopper (sm_90 PTX cannot run there), else None."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return f"{major}{minor}" if major < 9 else None


def _load(device: torch.device) -> ModuleType | str:
    """The extension, built on first use; or why it is unavailable on `device`."""
    global _module, _build_error
    reason = _environment_reason(device)
    if reason is not None:
        return reason
    with _build_lock:
        if _module is None and _build_error is None:
            from . import _build

            try:
                _module = _build.build(_device_arch(device))
            except RuntimeError as exc:
                _build_error = str(exc)
        return _module if _module is not None else str(_build_error)


def _require(device: torch.device) -> ModuleType:
    loaded = _load(device)
    if isinstance(loaded, str):
        raise RuntimeError(f"the cuda rms_norm backend cannot run on {device}: {loaded}")
    return loaded


class _RMSNormFunction(torch.autograd.Function):
    """Autograd through the kernels: the forward saves each row's fp32 1/rms, the backward reuses it."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, weight: torch.Tensor, eps: float, out_fp32: bool) -> torch.Tensor:
        y, rstd = _module.forward_train(x, weight, eps, out_fp32)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, rstd = ctx.saved_tensors
        dx, dw = _module.backward(dy, x, weight, rstd, ctx.needs_input_grad[1])
        return (dx if ctx.needs_input_grad[0] else None), dw, None, None


class CudaRMSNormOp:
    """RMSNorm as CUDA C++ kernels whose bits do not depend on the batch.

    Launch configuration depends on (dim, dtype) only; every row is reduced in one fixed order in fp32;
    ``forward`` returns ``x.dtype`` and ``forward_fp32`` float32, both differentiable; dx is
    batch-invariant and dw is reduced without atomics, bitwise identical run to run.
    """

    name = "cuda"
    devices = ("cuda",)
    dtypes = SUPPORTED_DTYPES
    supports_backward = True

    def unavailable_reason(self, device: torch.device | str) -> str | None:
        """None when the kernels can run on `device` (building them on first ask), else why not."""
        loaded = _load(torch.device(device))
        return loaded if isinstance(loaded, str) else None

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self._apply(x, weight, eps, False)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self._apply(x, weight, eps, True)

    __call__ = forward

    def _apply(self, x: torch.Tensor, weight: torch.Tensor, eps: float, out_fp32: bool) -> torch.Tensor:
        # The hot path: the shared checks, then straight into C++ unless autograd needs a graph node.
        check_inputs(x, weight, eps)
        ext = _module if _module is not None else _require(x.device)
        if (x.requires_grad or weight.requires_grad) and torch.is_grad_enabled():
            return _RMSNormFunction.apply(x, weight, float(eps), out_fp32)
        return ext.forward(x, weight, float(eps), out_fp32)

    def __repr__(self) -> str:
        return "CudaRMSNormOp()"
