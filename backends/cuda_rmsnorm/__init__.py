"""The CUDA C++ RMSNorm backend: kernels in the contract's canonical reduction order, as torch custom operators.

Its outputs are bitwise equal to the native reference's on every input (forward, forward_fp32, the
backward's dx and dw, and the variants), and batch-invariant. Importing this package never compiles and never
fails: the operator library is built (or taken from torch's extension cache, or from a prebuilt file named
by ``RMSNORM_CUDA_LIBRARY``) the first time the backend is asked about, or used on, a CUDA device, and any
reason it cannot run there (no GPU, no toolkit, a failed build) is reported by ``unavailable_reason``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...contract.inputs import (
    SAME_DTYPE_PAIRS,
    SUPPORTED_DTYPES,
    check_in_place,
    check_inputs,
    check_no_gradient_in_place,
    check_residual,
    check_unweighted_inputs,
)
from . import _ops
from ._build import BUILD_DIR_ENV, LIBRARY_ENV

__all__ = ["BUILD_DIR_ENV", "LIBRARY_ENV", "CudaRMSNormOp"]


def _fast(call: Callable[..., Any] | None, eps: object, *args: Any) -> Any:
    """The operator's C++ entry for an eager call with a plain float eps, or ``_SLOW`` where the call must take
    the checked path: no entry loaded, under ``torch.compile``, or an error the contract's checks re-raise."""
    if call is None or type(eps) is not float or torch.compiler.is_compiling():
        return _SLOW
    try:
        return call(*args)
    except Exception:  # raised again on the slow path, through the contract's checks
        return _SLOW


_SLOW = object()


class CudaRMSNormOp:
    """RMSNorm as CUDA C++ kernels in the contract's canonical reduction order.

    The launch configuration depends on (dim, dtype) only and every row is reduced in the one canonical
    order, so the bits equal the native reference's and cannot depend on the batch. ``forward`` returns
    ``x.dtype`` and ``forward_fp32`` float32, both differentiable (the backward recomputes each row's rms);
    dx is batch-invariant and dw, reduced without atomics, follows the canonical tree over rows: its bits are the
    native reference's too.
    Variants: ``fused_add`` (and ``fused_add_`` in place), ``forward_offset`` (``1 + w`` in fp32) and
    ``forward_unweighted``.

    An eager call goes straight to the operator's C++ entry; any error there is raised again through the
    contract's own input checks, so bad input fails with the same words as the reference.
    """

    name = "cuda"
    devices = ("cuda",)
    dtypes = SUPPORTED_DTYPES
    supports_backward = True
    fused_add_in_place = False
    offset_dtype = "float32"

    def unavailable_reason(self, device: torch.device | str) -> str | None:
        """None when the kernels can run on `device` (building them on first ask), else why not."""
        return _ops.load(torch.device(device))

    # forward and forward_fp32 are _fast written out: at a few rows the eager call is host-bound, and the helper's
    # frame and its packed arguments are a share of it (issue #23's latency target, 0.7x F.rms_norm).
    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        call = _ops.rms_norm
        if call is not None and type(eps) is float and not torch.compiler.is_compiling():
            try:
                return call(x, weight, eps, False)
            except Exception:  # raised again below, through the contract's checks
                pass
        return self._checked("rms_norm", x, weight, eps, False)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        call = _ops.rms_norm
        if call is not None and type(eps) is float and not torch.compiler.is_compiling():
            try:
                return call(x, weight, eps, True)
            except Exception:  # raised again below, through the contract's checks
                pass
        return self._checked("rms_norm", x, weight, eps, True)

    __call__ = forward

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        """y = (x / rms) * (1 + w), with 1 + w formed in fp32, rounded once to x.dtype."""
        out = _fast(_ops.rms_norm_offset, eps, x, weight, eps)
        if out is not _SLOW:
            return out
        return self._checked("rms_norm_offset", x, weight, eps)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        """y = x / rms rounded once to x.dtype."""
        out = _fast(_ops.rms_norm_unweighted, eps, x, eps)
        if out is not _SLOW:
            return out
        check_unweighted_inputs(x, eps)
        self._require(x.device)
        return _ops.op("rms_norm_unweighted")(x, float(eps))

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        """(y, residual_out): residual_out = x + residual (fp32 add, rounded once), y its RMSNorm as stored."""
        out = _fast(_ops.fused_add_rms_norm, eps, x, residual, weight, eps)
        if out is not _SLOW:
            return out
        check_inputs(x, weight, eps, dtype_pairs=SAME_DTYPE_PAIRS)  # the weight in x's dtype only
        check_residual(x, residual)
        self._require(x.device)
        return _ops.op("fused_add_rms_norm")(x, residual, weight, float(eps))

    def fused_add_(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                   eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        """``fused_add`` in place, as inference engines call it: y into x, residual_out into residual."""
        check_no_gradient_in_place(x, residual)
        if _fast(_ops.fused_add_rms_norm_, eps, x, residual, weight, eps) is not _SLOW:
            # The operator wrote through pointers, below autograd (it has no ADInplaceOrView kernel): tell autograd,
            # so that a graph that saved x or residual refuses to use them (a run on an H200 found it did not).
            torch.autograd.graph.increment_version((x, residual))
            return x, residual
        check_inputs(x, weight, eps, dtype_pairs=SAME_DTYPE_PAIRS)  # the weight in x's dtype only
        check_residual(x, residual)
        check_in_place(x, residual)  # the operator checks it too, in the same words (the fast path above)
        self._require(x.device)
        _ops.op("fused_add_rms_norm_")(x, residual, weight, float(eps))
        if not torch.compiler.is_compiling():  # traced, the schema's (a!) and (b!) say what it writes
            torch.autograd.graph.increment_version((x, residual))
        return x, residual

    def _checked(self, op: str, x: torch.Tensor, weight: torch.Tensor, eps: float, *rest: bool) -> torch.Tensor:
        # The slow path: the contract's checks raise its own errors, then why the backend cannot run here,
        # and only then the operator, whose remaining errors are its own.
        check_inputs(x, weight, eps, dtype_pairs=SAME_DTYPE_PAIRS)  # the weight in x's dtype only
        self._require(x.device)
        return _ops.op(op)(x, weight, float(eps), *rest)

    @staticmethod
    def _require(device: torch.device) -> None:
        # Under torch.compile the operators must already be loaded (any eager call or unavailable_reason
        # loads them): loading takes a lock and may build, which a traced graph cannot hold.
        if not torch.compiler.is_compiling():
            _ops.require(device)

    def __repr__(self) -> str:
        return "CudaRMSNormOp()"
