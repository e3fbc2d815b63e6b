"""The torch custom operators ``rmsnorm_cuda::*``: loading their library on first use, their fake (meta)
implementations for torch.compile and opcheck, and the direct handles the backend's eager path calls.

The schemas, the CUDA implementations and the forward's autograd are registered in C++ (binding.cpp) when
the library loads; only the fake implementations live here, since they are what tracing runs in Python.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable
from typing import Any

import torch

NAMESPACE = "rmsnorm_cuda"
OP_NAMES: tuple[str, ...] = (
    "rms_norm",
    "rms_norm_backward",
    "rms_norm_offset",
    "rms_norm_unweighted",
    "fused_add_rms_norm",
    "fused_add_rms_norm_",
)
# The library's Python module and the operators it has direct entries for.
FAST_MODULE = "rmsnorm_cuda_fast"
FAST_NAMES: tuple[str, ...] = ("rms_norm", "rms_norm_offset", "rms_norm_unweighted", "fused_add_rms_norm",
                               "fused_add_rms_norm_")

# The loaded library's path once loaded; the failure reason once loading failed (not retried in this process).
_library: str | None = None
_error: str | None = None
_lock = threading.Lock()
# Devices the loaded library was found able to run on. Every slow-path call (the in-place fused add takes no
# other) asks load() first, and environment_reason() runs `ninja --version` in a subprocess through
# torch.utils.cpp_extension.is_ninja_available(): about a millisecond a call, which made the in-place fused add
# host-bound at every size (0.025 of a copy at 4096 x 4096). A device found ready stays ready in the process.
_ready: set[tuple[str, int | None]] = set()

# The eager entries the backend calls, set once the library is loaded (None before): the library's own
# Python module (rmsnorm_cuda_fast, straight into the operators' typed dispatcher handles) where its check
# passes, else each operator's C++ entry (OpOverload._op, the boxed dispatcher call without the Python
# __call__ around it). Same arguments either way.
rms_norm: Callable[..., Any] | None = None
rms_norm_offset: Callable[..., Any] | None = None
rms_norm_unweighted: Callable[..., Any] | None = None
fused_add_rms_norm: Callable[..., Any] | None = None
fused_add_rms_norm_: Callable[..., Any] | None = None
# The library's Python module once loaded, where it imports (its set_tuning is for sweeps).
_fast: Any | None = None


def environment_reason(device: torch.device) -> str | None:
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
    from . import _build

    if os.environ.get(_build.LIBRARY_ENV):
        return None
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


def load(device: torch.device) -> str | None:
    """None once the operators are registered (building them on first use), else why they cannot run."""
    global _library, _error
    key = (device.type, device.index)
    if key in _ready:
        return None
    reason = environment_reason(device)
    if reason is not None:
        return reason
    with _lock:
        if _library is None and _error is None:
            from . import _build

            try:
                _library = _build.build(_device_arch(device))
                _register_fakes()
                _bind_handles(_library)
            except RuntimeError as exc:
                _error = str(exc)
        if _library is None:
            return str(_error)
        _ready.add(key)
        return None


def require(device: torch.device) -> None:
    """Raise RuntimeError, with the reason, unless the operators can run on `device`."""
    reason = load(device)
    if reason is not None:
        raise RuntimeError(f"the cuda rms_norm backend cannot run on {device}: {reason}")


def op(name: str) -> torch._ops.OpOverload:
    """The operator ``rmsnorm_cuda::name`` (its default overload); the library must be loaded."""
    return getattr(getattr(torch.ops, NAMESPACE), name).default


def fast_module(path: str) -> Any | None:
    """The library's Python module, if it imports and reads torch's tensor objects as torch lays them out."""
    try:
        spec = importlib.util.spec_from_file_location(FAST_MODULE, path)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        probe = torch.empty(0)
        return module if module.layout_matches(probe, probe._cdata) else None
    except Exception:  # any failure leaves the torch.ops entries in place
        return None


def _bind_handles(path: str) -> None:
    global rms_norm, rms_norm_offset, rms_norm_unweighted, fused_add_rms_norm, fused_add_rms_norm_, _fast
    handles = {name: getattr(op(name), "_op", op(name)) for name in OP_NAMES}
    fast = _fast = fast_module(path)
    if fast is not None:
        handles.update({name: getattr(fast, name) for name in FAST_NAMES})
    rms_norm = handles["rms_norm"]
    rms_norm_offset = handles["rms_norm_offset"]
    rms_norm_unweighted = handles["rms_norm_unweighted"]
    fused_add_rms_norm = handles["fused_add_rms_norm"]
    fused_add_rms_norm_ = handles["fused_add_rms_norm_"]


TUNING_KINDS = ("forward", "fused_add", "backward")


def set_tuning(kind: str, k: int = 0, threads: int = 0, stages: int = 0, extra: int = 0) -> None:
    """A sweep's launch configuration for ``kind``: groups a thread and threads a block (forward, fused add: the
    row kernel, which stages no rows and ignores the last two values), or groups a thread (1 or 2), threads a block,
    rows staged and dw's rows per block (backward); 0 keeps a default.
    The library must be loaded. No value changes a bit: every configuration computes the canonical order."""
    if _fast is None:
        raise RuntimeError("the cuda rms_norm library is not loaded, or has no Python module")
    _fast.set_tuning(TUNING_KINDS.index(kind), k, threads, stages, extra)


def _register_fakes() -> None:
    """Shapes, dtypes and strides of every operator's outputs, as the CUDA implementations allocate them
    (contiguous, whatever the inputs' layout)."""
    register = torch.library.register_fake

    @register(f"{NAMESPACE}::rms_norm")
    def _(x: torch.Tensor, weight: torch.Tensor, eps: float, out_fp32: bool = False) -> torch.Tensor:
        return x.new_empty(x.shape, dtype=torch.float32 if out_fp32 else x.dtype)

    @register(f"{NAMESPACE}::rms_norm_backward")
    def _(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float,
          need_dw: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return x.new_empty(x.shape), weight.new_empty((weight.shape[0] if need_dw else 0,))

    @register(f"{NAMESPACE}::rms_norm_offset")
    def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return x.new_empty(x.shape)

    @register(f"{NAMESPACE}::rms_norm_unweighted")
    def _(x: torch.Tensor, eps: float) -> torch.Tensor:
        return x.new_empty(x.shape)

    @register(f"{NAMESPACE}::fused_add_rms_norm")
    def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
          eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        return x.new_empty(x.shape), residual.new_empty(residual.shape)

    @register(f"{NAMESPACE}::fused_add_rms_norm_")
    def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        return None
