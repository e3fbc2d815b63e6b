"""The native backend: the contract's fixed-order reference (``contract/reference.py``) as a backend.

It is the ground truth of the project's kernels and the CPU's default in the registry. It adds nothing to the
reference, so that judging it is judging the reference's own invariance; each variant is its reference too.

Under ``torch.compile`` the entry points run as torch custom operators, one opaque node each, whose implementation
is the eager reference: Inductor's code for the reference's own elementwise ops does not keep their bits on a
GPU (an H200, torch 2.11, README's RL command with --modes=compile: 1-ulp differences in up to 93 % of a row's
elements, forward, offset, no weight and fused add), and the ground truth must be
the same function in every execution mode. A PyTorch RMSNorm as Inductor compiles it is what the
``torch_compile`` backend holds to the contract.
"""

from __future__ import annotations

from typing import Any

import torch

from ..contract.fp8 import (
    reference_fp8_dynamic,
    reference_fp8_fused_add_dynamic,
    reference_fp8_fused_add_static,
    reference_fp8_static,
)
from ..contract.inputs import (
    CONTRACT_DTYPE_PAIRS,
    SUPPORTED_DTYPES,
    check_inputs,
    check_residual,
    check_unweighted_inputs,
)
from ..contract.reference import (
    offset_scale,
    reference_backward_fp32,
    reference_fp32,
    reference_fused_add,
    reference_offset,
    reference_unweighted,
)

# Which reference the compiled path's operator runs: what multiplies the normalized row.
_PLAIN, _OFFSET, _UNWEIGHTED = 0, 1, 2
_OFFSET_DTYPE = "float32"


def _reference(x: torch.Tensor, weight: torch.Tensor | None, eps: float, mode: int) -> torch.Tensor:
    if mode == _OFFSET:
        return reference_offset(x, weight, eps, _OFFSET_DTYPE)
    if mode == _UNWEIGHTED:
        return reference_unweighted(x, eps)
    return reference_fp32(x, weight, eps)


@torch.library.custom_op("rmsnorm_conformance::native_rms_norm", mutates_args=(),
                         schema="(Tensor x, Tensor? weight, float eps, int mode) -> Tensor")
def _native_op(x, weight, eps, mode):  # noqa: ANN001
    return _reference(x, weight, eps, mode)


@_native_op.register_fake
def _(x, weight, eps, mode):  # noqa: ANN001
    return x.new_empty(x.shape, dtype=torch.float32)


@torch.library.custom_op("rmsnorm_conformance::native_rms_norm_backward", mutates_args=(),
                         schema="(Tensor x, Tensor? weight, Tensor grad, float eps, int mode) -> (Tensor, Tensor)")
def _native_backward_op(x, weight, grad, eps, mode):  # noqa: ANN001
    """dx in x's dtype and dw in the weight's (empty without one), as autograd through the eager reference."""
    ones = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
    scale32 = ones if weight is None else offset_scale(weight, _OFFSET_DTYPE) if mode == _OFFSET else weight.float()
    dx, dscale = reference_backward_fp32(x, scale32, grad, eps)
    # d(1 + w) / dw is 1: the offset's gradient is the scale's, as autograd passes it through the add.
    return dx.to(x.dtype), (dscale.to(weight.dtype) if weight is not None else x.new_empty(0))


@_native_backward_op.register_fake
def _(x, weight, grad, eps, mode):  # noqa: ANN001
    return x.new_empty(x.shape), (weight.new_empty(weight.shape) if weight is not None else x.new_empty(0))


def _setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    x, weight, eps, mode = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps, ctx.mode = eps, mode


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    x, weight = ctx.saved_tensors
    dx, dw = torch.ops.rmsnorm_conformance.native_rms_norm_backward(x, weight, grad, ctx.eps, ctx.mode)
    return (dx if ctx.needs_input_grad[0] else None), (dw if ctx.needs_input_grad[1] else None), None, None


_native_op.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("rmsnorm_conformance::native_fused_add_rms_norm", mutates_args=(),
                         schema="(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)")
def _native_fused_add_op(x, residual, weight, eps):  # noqa: ANN001
    y32, residual_out = reference_fused_add(x, residual, weight, eps)
    return y32.to(x.dtype), residual_out


@_native_fused_add_op.register_fake
def _(x, residual, weight, eps):  # noqa: ANN001
    return x.new_empty(x.shape), residual.new_empty(x.shape)


class NativeRMSNormOp:
    """RMSNorm in plain PyTorch: fp32 accumulation, bitwise batch-invariant by construction.

    ``forward`` returns ``x.dtype``; ``forward_fp32`` returns float32; both differentiate through the
    reference's fixed-order backward. It takes every dtype pair the contract defines (an fp32 weight with
    bf16/fp16 x too), and offers every variant: a fused residual add (out of place, with a residual in x's
    dtype or fp32), the ``1 + weight`` offset formed in fp32, and no weight.
    """

    name = "native"
    devices = None  # any device torch runs on
    dtypes = SUPPORTED_DTYPES
    dtype_pairs = CONTRACT_DTYPE_PAIRS
    fused_add_fp32_residual = True
    offset_dtype = _OFFSET_DTYPE
    rounding_class = "product_fp32"
    fp8_rounding_class = "fp32_once"

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward(x, weight, eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward_fp32(x, weight, eps).to(x.dtype)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if torch.compiler.is_compiling():
            check_inputs(x, weight, eps)
            return torch.ops.rmsnorm_conformance.native_rms_norm(x, weight, float(eps), _PLAIN)
        return reference_fp32(x, weight, eps)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        if torch.compiler.is_compiling():
            check_inputs(x, weight, eps)
            check_residual(x, residual, fp32_residual=True)
            return torch.ops.rmsnorm_conformance.native_fused_add_rms_norm(x, residual, weight, float(eps))
        y32, residual_out = reference_fused_add(x, residual, weight, eps)
        return y32.to(x.dtype), residual_out

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if torch.compiler.is_compiling():
            check_inputs(x, weight, eps)
            return torch.ops.rmsnorm_conformance.native_rms_norm(x, weight, float(eps), _OFFSET).to(x.dtype)
        return reference_offset(x, weight, eps, self.offset_dtype).to(x.dtype)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if torch.compiler.is_compiling():
            check_unweighted_inputs(x, eps)
            return torch.ops.rmsnorm_conformance.native_rms_norm(x, None, float(eps), _UNWEIGHTED).to(x.dtype)
        return reference_unweighted(x, eps).to(x.dtype)

    def forward_fp8_static(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                           scale: torch.Tensor) -> torch.Tensor:
        return reference_fp8_static(x, weight, eps, scale)

    def forward_fp8_dynamic(self, x: torch.Tensor, weight: torch.Tensor,
                            eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        return reference_fp8_dynamic(x, weight, eps)

    def fused_add_fp8_static(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                             scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return reference_fp8_fused_add_static(x, residual, weight, eps, scale)

    def fused_add_fp8_dynamic(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                              eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return reference_fp8_fused_add_dynamic(x, residual, weight, eps)

    def __repr__(self) -> str:
        return "NativeRMSNormOp()"
