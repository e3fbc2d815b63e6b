"""Backends with planted defects, each breaking one contract rule the way real kernels do, and correct
backends that the suites must never fail.

Each defect names the rule it breaks in ``breaks`` (the zoo's defect list is read from it:
``rmsnorm_conformance.zoo.DEFECTS``); tests/detection/test_detection.py runs the suite test of that rule against it and
expects the run to fail there, and benchmarks/detection.py measures how many examples that takes. A harness
that lets one of these through has lost detection power. Every defect is the native ground truth plus one
bug, so it can fail only through that bug.

A bitwise defect also declares its planted ``mechanism`` as ``(kind, value, stage)``: where its bits start to change
(a ``threshold`` of rows or heads, an ``alignment`` in bytes, a ``period`` of positions, a ``mode``, a ``first call``,
``nondeterministic``, or at ``every`` size) and at which stage (``per-row scale``, ``elementwise``, ...). The diagnosis
of its breach must name it (checking/diagnosis.py; benchmarks/diagnosis.py measures how often it does).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..backends.native import NativeRMSNormOp
from ..contract.families import axis_a, axis_b, gradients, interface, semantics, variants
from ..contract.inputs import SAME_DTYPE_PAIRS, check_inputs, check_residual
from ..contract.reference import (
    reference_backward_fp32,
    reference_fp32,
    sum_fixed_order,
    sum_of_squares_fixed_order,
)

# --- Reduction orders: alternatives to the native pairwise tree -----------------------------------------


def sum_by_lanes(values: torch.Tensor, lanes: int = 64, accumulate: torch.dtype = torch.float32) -> torch.Tensor:
    """Sum over the last dim, keepdim, as a GPU block reduces a row: lane ``i`` sums columns ``i, i + lanes,
    ...`` left to right, then the lanes are summed left to right.

    Built from elementwise adds only, so its order depends on the dim alone: batch-invariant by construction,
    yet a different order from the native tree, hence other low bits. ``accumulate`` rounds every partial
    sum to that dtype, as a kernel whose accumulator registers are narrower than fp32 does.
    """
    dim = values.shape[-1]
    width = -(-dim // lanes) * lanes
    if width != dim:
        values = F.pad(values, (0, width - dim))
    blocks = values.unflatten(-1, (width // lanes, lanes))
    acc = blocks[..., 0, :].to(accumulate)
    for i in range(1, width // lanes):
        acc = (acc.float() + blocks[..., i, :]).to(accumulate)
    total = acc[..., :1]
    for j in range(1, lanes):
        total = (total.float() + acc[..., j: j + 1].float()).to(accumulate)
    return total.float()


def sum_of_squares_by_lanes(x32: torch.Tensor, lanes: int = 64,
                            accumulate: torch.dtype = torch.float32) -> torch.Tensor:
    """:func:`sum_by_lanes` of the squares: the reduction order the order-switching defects switch to."""
    return sum_by_lanes(x32 * x32, lanes, accumulate)


def tree_sum(values: torch.Tensor) -> torch.Tensor:
    """The native backend's pairwise tree over the last dim, keepdim, of values that are already squared
    (or any values: padding adds +0.0, which changes no sum but a -0.0 one)."""
    width = 1 << (values.shape[-1] - 1).bit_length()
    if width != values.shape[-1]:
        values = F.pad(values, (0, width - values.shape[-1]))
    while width > 1:
        width //= 2
        values = values[..., :width] + values[..., width:]
    return values


def _normalise(x32: torch.Tensor, weight: torch.Tensor, eps: float, sum_of_squares: torch.Tensor) -> torch.Tensor:
    """The native backend's arithmetic after the reduction, so that a defect differs only where it says.

    ``x32`` must be the one fp32 upcast of x that the reduction also read: autograd casts each upcast's
    gradient back to x's dtype on its own, so two upcasts would add the two dx terms in bf16.
    """
    return (x32 / torch.sqrt(sum_of_squares / x32.shape[-1] + eps)) * weight.float()


def _rows(x: torch.Tensor) -> int:
    return x.numel() // max(x.shape[-1], 1)


# --- Axis-A: batch invariance ---------------------------------------------------------------------------


class SmallBatchReduction(NativeRMSNormOp):
    """Breaks axis_a.batch_size: below 16 rows the sum of squares runs in another order.

    torch's CUDA reduction does this (``setReduceConfig`` splits a row across more lanes when rows are few),
    which is why the seed's formula is not batch-invariant in fp32 at hidden 4096.
    """

    name = "small_batch_reduction"
    breaks = axis_a.BATCH_SIZE.id
    mechanism = ("threshold", 16, "per-row scale")  # rows: 1-15 in lane order, 16 on in the tree

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if _rows(x) >= 16:
            return super().forward_fp32(x, weight, eps)
        x32 = x.float()
        return _normalise(x32, weight, eps, sum_of_squares_by_lanes(x32))


class LargeBatchReduction(NativeRMSNormOp):
    """Breaks axis_a.batch_size: above 256 rows the sum of squares runs in another order.

    An autotuner keyed on the row count (Triton's ``@autotune(key=["n_rows", ...])``) picks another block
    shape for large batches, so a sampling batch of 8 and a training batch of 4096 round differently.
    """

    name = "large_batch_reduction"
    breaks = axis_a.BATCH_SIZE.id
    mechanism = ("threshold", 257, "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if _rows(x) <= 256:
            return super().forward_fp32(x, weight, eps)
        x32 = x.float()
        return _normalise(x32, weight, eps, sum_of_squares_by_lanes(x32))


class AlignmentDependentReduction(NativeRMSNormOp):
    """Breaks axis_a.slice_offset: a misaligned pointer takes a scalar path that reduces in another order.

    Triton specialises kernels on 16-byte pointer alignment and hand-written kernels pick vectorised loads
    only for aligned rows; a slice of a batch starts wherever the slice starts, so its rows round unlike
    the same rows in the whole batch.
    """

    name = "alignment_dependent_reduction"
    breaks = axis_a.SLICE_OFFSET.id
    mechanism = ("alignment", 16, "per-row scale")  # bytes

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if x.data_ptr() % 16 == 0:
            return super().forward_fp32(x, weight, eps)
        x32 = x.float()
        return _normalise(x32, weight, eps, sum_of_squares_by_lanes(x32))


class BatchStatisticLeak(NativeRMSNormOp):
    """Breaks axis_a.padding: a 2^-10 share of the batch's mean square leaks into every row's.

    A persistent kernel whose shared accumulator is not reset between the rows it owns, or a fused
    quantisation kernel that mixes its batch-wide statistic into the row's by an indexing slip: too small
    to fail a bf16 accuracy bound, but pad rows (or any other rows) change every real row's bits.
    """

    name = "batch_statistic_leak"
    breaks = axis_a.PADDING.id
    mechanism = ("every", None, "per-row scale")  # any pad row moves the batch mean

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float()
        sum_sq = sum_of_squares_fixed_order(x32)
        batch_mean = sum_sq.reshape(-1).mean() if sum_sq.numel() else sum_sq.new_zeros(())
        return _normalise(x32, weight, eps, sum_sq + 2.0**-10 * batch_mean)


class PositionDependentReduction(NativeRMSNormOp):
    """Breaks axis_a.position: rows at odd indices reduce in another order.

    A kernel that packs two rows into one warp, the second half-warp walking its row in another lane
    order: a row's bits depend on the parity of the index the scheduler gave it.
    """

    name = "position_dependent_reduction"
    breaks = axis_a.POSITION.id
    mechanism = ("period", 2, "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float()
        rows = x32.reshape(-1, x.shape[-1])
        tree = sum_of_squares_fixed_order(rows)
        lanes = sum_of_squares_by_lanes(rows)
        odd = (torch.arange(rows.shape[0], device=x.device) % 2 == 1).unsqueeze(-1)
        sum_sq = torch.where(odd, lanes, tree).reshape(*x.shape[:-1], 1)
        return _normalise(x32, weight, eps, sum_sq)


class LeadingDimsReduction(NativeRMSNormOp):
    """Breaks axis_a.leading_dims: a 3-D input takes a per-head path that reduces in another order.

    QK-norm kernels specialised for [T, H, head_dim], or a compiled graph specialised on the input's rank,
    give [T, H, 128] other bits than the same rows flattened to [T*H, 128].
    """

    name = "leading_dims_reduction"
    breaks = axis_a.LEADING_DIMS.id
    mechanism = ("mode", "3-D", "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if x.dim() <= 2:
            return super().forward_fp32(x, weight, eps)
        x32 = x.float()
        return _normalise(x32, weight, eps, sum_of_squares_by_lanes(x32))


class IgnoresStrides(NativeRMSNormOp):
    """Breaks axis_a.strided_rows: reads every input as if it were contiguous.

    The classic pointer bug: row ``r`` is loaded from ``x_ptr + r * dim`` instead of ``x_ptr + r *
    stride(0)``, so a view whose rows sit in a wider buffer (q sliced out of a fused QKV projection) or a
    column-major input is read from the wrong addresses. Contiguous inputs are unaffected.
    """

    name = "ignores_strides"
    breaks = axis_a.STRIDED_ROWS.id
    mechanism = ("mode", "rows inside a wider buffer, column-major rows", "wrong values")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return super().forward_fp32(x.as_strided(x.shape, _contiguous_strides(x.shape)), weight, eps)


def _contiguous_strides(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class RandomReductionOrder(NativeRMSNormOp):
    """Breaks axis_a.repeat: each row's eight partial sums are added in a random order on every call.

    Split-row kernels that combine per-block partial sums with ``atomicAdd`` add them in whatever order the
    blocks finish, so the same call twice gives other bits.
    """

    name = "random_reduction_order"
    breaks = axis_a.REPEAT.id
    mechanism = ("nondeterministic", None, "per-row scale")
    splits = 8

    def __init__(self) -> None:
        # Seeded from the operating system, as the order blocks finish in is: no two runs agree, and a replay
        # reproduces a failure only as often as two random orders round a row differently (about half the
        # time for one row).
        self._arrival = torch.Generator()
        self._arrival.seed()

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float()
        rows = x32.reshape(-1, x.shape[-1])
        dim = rows.shape[-1]
        width = -(-dim // self.splits) * self.splits
        squares = F.pad(rows * rows, (0, width - dim)).unflatten(-1, (self.splits, width // self.splits))
        partials = tree_sum(squares).squeeze(-1)  # one tree per block
        order = torch.rand(partials.shape, generator=self._arrival).argsort(dim=-1).to(partials.device)
        arrived = partials.gather(-1, order)
        total = arrived[:, :1]
        for i in range(1, self.splits):
            total = total + arrived[:, i: i + 1]
        return _normalise(x32, weight, eps, total.reshape(*x.shape[:-1], 1))


# --- Axis-B: accuracy -------------------------------------------------------------------------------------


class DroppedTailBlock(NativeRMSNormOp):
    """Breaks axis_b.output: the last partial block of 64 columns is left out of the sum of squares.

    A block loop written ``for k in range(dim // BLOCK)`` with no masked tail: exact at 4096 and 128, off at
    every dim that is not a multiple of the block (and all zero below one block).
    """

    name = "dropped_tail_block"
    breaks = axis_b.OUTPUT.id
    block = 64

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float()
        whole = x32.shape[-1] // self.block * self.block
        return _normalise(x32, weight, eps, sum_of_squares_fixed_order(x32[..., :whole]))


class LowPrecisionAccumulation(NativeRMSNormOp):
    """Breaks axis_b.output: the sum of squares accumulates in the input's dtype (bf16 or fp16).

    A kernel whose accumulator registers are declared with the input's type: 16 lanes each add their
    squares into a bf16 register, where a running sum of a few hundred swallows every square below its
    half-ULP. fp32 inputs accumulate in fp32 and are correct.
    """

    name = "low_precision_accumulation"
    breaks = axis_b.OUTPUT.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if x.dtype == torch.float32:  # the accumulator has x's type: for fp32 this is the native kernel
            return super().forward_fp32(x, weight, eps)
        x32 = x.float()
        return _normalise(x32, weight, eps, sum_of_squares_by_lanes(x32, lanes=16, accumulate=x.dtype))


class HalfPrecisionSquares(NativeRMSNormOp):
    """Breaks axis_b.output: x * x is computed in the input's dtype before the upcast to fp32.

    ``x.pow(2).float()`` instead of ``x.float().pow(2)``: in fp16 every |x| above 256 squares to Inf, so a
    row with one large activation normalises to zeros; bf16 and fp32 squares stay finite.
    """

    name = "half_precision_squares"
    breaks = axis_b.OUTPUT.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _normalise(x.float(), weight, eps, tree_sum((x * x).float()))


class RoundedForwardFp32(NativeRMSNormOp):
    """Breaks axis_b.forward_fp32: ``forward_fp32`` is ``forward(...).float()``, the low-precision output upcast.

    The shortcut of a kernel library with one kernel per input dtype: the "fp32" entry point returns bf16
    values in an fp32 tensor, 2^-9 off where a caller (a loss, a logit) asked for fp32 accuracy. fp32
    inputs are unaffected.
    """

    name = "rounded_forward_fp32"
    breaks = axis_b.FORWARD_FP32.id

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return super().forward_fp32(x, weight, eps).to(x.dtype)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward(x, weight, eps).float()


# --- Semantics --------------------------------------------------------------------------------------------


class EpsOutsideSqrt(NativeRMSNormOp):
    """Breaks semantics.eps_inside_sqrt: ``x / (sqrt(mean(x^2)) + eps)``.

    The "norm plus eps" form of some early implementations: identical for ordinary rows, off by up to
    sqrt(2) for rows whose mean square is near eps.
    """

    name = "eps_outside_sqrt"
    breaks = semantics.EPS_INSIDE_SQRT.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float()
        mean_square = sum_of_squares_fixed_order(x32) / x32.shape[-1]
        return (x32 / (torch.sqrt(mean_square) + eps)) * weight.float()


class OnePlusWeight(NativeRMSNormOp):
    """Breaks semantics.plain_weight: Gemma-style ``(1 + weight)`` scaling where the contract says plain weight.

    Gemma stores ``weight - 1`` and its kernels scale by ``1 + weight``; a kernel or a checkpoint converter
    that mixes the two conventions is off by the normalised row itself, whatever the weight.
    """

    name = "one_plus_weight"
    breaks = semantics.PLAIN_WEIGHT.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return super().forward_fp32(x, torch.ones_like(weight), eps) * (1 + weight.float())


class WrongOutputDtype(NativeRMSNormOp):
    """Breaks semantics.dtype_routing: ``forward`` returns the fp32 accumulator's dtype, not x.dtype.

    The missing ``.to(input_dtype)`` at the end of a mixed-precision RMSNorm: bf16 callers get fp32
    tensors, twice the memory and a dtype error further down the graph.
    """

    name = "wrong_output_dtype"
    breaks = semantics.DTYPE_ROUTING.id

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward_fp32(x, weight, eps)


class NoShapeGuard(NativeRMSNormOp):
    """Breaks semantics.shape_guard: the weight is flattened and its first D elements read, whatever its shape.

    Kernel wrappers flatten the weight for pointer arithmetic and check only that it holds at least D elements:
    a (D + 1,) weight or a (D, 2) one is read as its first D elements, with no error and other values than any
    1-D weight of the caller's would give (a (1, D) weight happens to be read right).
    """

    name = "no_shape_guard"
    breaks = semantics.SHAPE_GUARD.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return super().forward_fp32(x, weight.reshape(-1)[: x.shape[-1]], eps)


class MutatesInput(NativeRMSNormOp):
    """Breaks semantics.purity: normalises in place in the upcast buffer, which *is* x when x is fp32.

    ``x32 = x.float(); x32.mul_(rstd)`` saves a buffer for bf16 inputs, where ``.float()`` copies; for fp32
    inputs ``.float()`` returns x itself and the caller's activations are overwritten.
    """

    name = "mutates_input"
    breaks = semantics.PURITY.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float()
        mean_square = sum_of_squares_fixed_order(x32) / x32.shape[-1]
        x32.div_(torch.sqrt(mean_square + eps))
        return x32 * weight.float()


class WritesBesideInput(NativeRMSNormOp):
    """Breaks semantics.bounds: stores each row's rstd in the memory just past the end of x.

    A fused kernel that keeps its backward statistics in a workspace it assumes the caller allocated
    right after x: called on a plain tensor, it overwrites whatever lies there. The output itself is right.
    """

    name = "writes_beside_input"
    breaks = semantics.BOUNDS.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        out = super().forward_fp32(x, weight, eps)
        x32 = x.float()
        rstd = torch.rsqrt(sum_of_squares_fixed_order(x32) / x32.shape[-1] + eps).reshape(-1).to(x.dtype)
        end = x.storage_offset() + (x.numel() if x.is_contiguous() else 0)
        room = x.untyped_storage().nbytes() // x.element_size() - end
        if x.is_contiguous() and room > 0:
            # The workspace: the elements beside x in its allocation, where the real kernel writes blindly.
            beside = x.new_empty(0).set_(x.untyped_storage(), end, (min(room, rstd.numel()),))
            beside.copy_(rstd[: beside.numel()])
        return out


class EmptyBatchCrash(NativeRMSNormOp):
    """Breaks semantics.empty_batch: zero rows make zero launch chunks, and the launch fails.

    Wrappers split the rows into chunks of at most 65535 (CUDA's grid y/z limit) with
    ``chunks = ceil(rows / 65535)``, never guarding ``rows == 0``: an empty decode batch crashes.
    """

    name = "empty_batch_crash"
    breaks = semantics.EMPTY_BATCH.id
    max_grid_rows = 65535

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        rows = x.reshape(-1, x.shape[-1])
        chunks = -(-rows.shape[0] // self.max_grid_rows)
        parts = [super(EmptyBatchCrash, self).forward_fp32(c, weight, eps) for c in rows.chunk(chunks)]
        return torch.cat(parts).reshape(x.shape)


class BatchWideNonfiniteGuard(NativeRMSNormOp):
    """Breaks semantics.nonfinite_confined: one NaN or Inf anywhere zeroes the whole batch.

    An AMP-style ``found_inf`` guard applied to the batch, not the row: a single overflowing token in one
    sequence wipes the activations of every other sequence in the batch.
    """

    name = "batch_wide_nonfinite_guard"
    breaks = semantics.NONFINITE_CONFINED.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        out = super().forward_fp32(x, weight, eps)
        return torch.where(torch.isfinite(x).all(), out, torch.zeros_like(out))


class SilentDtypeCast(NativeRMSNormOp):
    """Breaks interface.input_errors: a weight of another dtype is cast to x's instead of rejected.

    Hugging Face's ``self.weight * hidden.to(input_dtype)`` habit: an fp32 weight with bf16 activations is
    quietly rounded, and the caller never learns that its checkpoint and activations disagree.
    """

    name = "silent_dtype_cast"
    breaks = interface.INPUT_ERRORS.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if x.dtype in self.dtypes and weight.dtype in self.dtypes:
            weight = weight.to(x.dtype)
        return super().forward_fp32(x, weight, eps)


# --- Gradients ----------------------------------------------------------------------------------------------


class _AtomicBroadcast(torch.autograd.Function):
    """weight broadcast over the rows; its gradient sums the rows' contributions in a random order."""

    @staticmethod
    def forward(ctx, weight32: torch.Tensor, rows: int, arrival: torch.Generator) -> torch.Tensor:
        ctx.arrival = arrival
        return weight32.expand(rows, weight32.shape[-1])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        # One partial per block of rows (at most 64 blocks), each a fixed-order sum; the partials arrive
        # in a random order, as atomicAdds do.
        partials = torch.stack([block.sum(0) for block in grad.chunk(64)])
        order = torch.randperm(partials.shape[0], generator=ctx.arrival).tolist()
        total = partials[order[0]]
        for i in order[1:]:
            total = total + partials[i]
        return total, None, None


class LowPrecisionGradientSum(NativeRMSNormOp):
    """Breaks gradients.dx_tolerance: the two terms of dx are rounded to the input's dtype, then added.

    dx = rstd * (dy * w) - x * rstd^3 * mean(dy * w * x) cancels heavily in rows of small scale; a backward
    kernel that forms each term in bf16 (or, as here, a forward that upcasts x twice, so that autograd casts
    each term's gradient back to bf16 before summing them) loses the difference. The forward is exact.
    """

    name = "low_precision_gradient_sum"
    breaks = gradients.DX_TOLERANCE.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        mean_square = sum_of_squares_fixed_order(x.float()) / x.shape[-1]
        return (x.float() / torch.sqrt(mean_square + eps)) * weight.float()


class _SavedInBf16(torch.autograd.Function):
    """The reference's forward, whose backward recomputes from x kept in bf16."""

    @staticmethod
    def forward(ctx, x32: torch.Tensor, weight32: torch.Tensor, eps: float) -> torch.Tensor:
        ctx.save_for_backward(x32.bfloat16(), weight32)  # the defect: the activation kept in half the bytes
        ctx.eps = eps
        return reference_fp32(x32, weight32, eps)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x_saved, weight32 = ctx.saved_tensors
        dx, dw = reference_backward_fp32(x_saved, weight32, grad, ctx.eps)
        return dx, dw, None


class ActivationSavedInBf16(NativeRMSNormOp):
    """Breaks gradients.dx_tolerance: the backward recomputes from x kept in bf16, in an fp32 (or fp16) model.

    Training kernels save activations in a lower precision to halve their memory; here x is saved as bf16 for
    the backward, so dx and dw carry one bf16 rounding of x (2^16 fp32 roundings of their terms, where the
    gradient bounds allow 256) while the forward is exact. With bf16 x the saved copy is exact; with fp16 x it
    loses 3 bits, which fp16's gradient bound absorbs on the rows the suite draws: the fp32 sweep catches it.
    """

    name = "activation_saved_in_bf16"
    breaks = gradients.DX_TOLERANCE.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _SavedInBf16.apply(x.float(), weight.float(), eps)


class _RowCountBackward(torch.autograd.Function):
    """The native forward with a hand-written backward whose dot product re-plans below 16 rows."""

    @staticmethod
    def forward(ctx, x32: torch.Tensor, weight32: torch.Tensor, eps: float) -> torch.Tensor:
        denom = torch.sqrt(sum_of_squares_fixed_order(x32) / x32.shape[-1] + eps)
        ctx.save_for_backward(x32, weight32, denom)
        return (x32 / denom) * weight32

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x32, weight32, denom = ctx.saved_tensors
        dim = x32.shape[-1]
        gw = grad * weight32
        # dx = gw / denom - x * mean(gw * x) / denom^3: the mean is the reduction that re-plans.
        few_rows = grad.numel() // dim < 16
        dot = (sum_by_lanes if few_rows else tree_sum)(gw * x32)
        dx = gw / denom - x32 * (dot / dim) / (denom * denom * denom)
        dw = (grad * (x32 / denom)).reshape(-1, dim).sum(0)
        return dx, dw, None


class SmallBatchBackward(NativeRMSNormOp):
    """Breaks gradients.dx_batch_invariance: below 16 rows the backward's dot product runs in another order.

    A backward kernel with its own launch heuristic (split the row across more lanes when rows are few, as
    the forward must not): the forward is batch-invariant and exact, but a row's dx bits change with the
    batch it was trained in.
    """

    name = "small_batch_backward"
    breaks = gradients.DX_BATCH_INVARIANCE.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _RowCountBackward.apply(x.float(), weight.float(), eps)


class AtomicWeightGradient(NativeRMSNormOp):
    """Breaks gradients.dw_determinism: dw adds each row's contribution in the order blocks finish.

    Backward kernels that ``atomicAdd`` per-row (or per-block) dw partials into one buffer, instead of
    writing partials and reducing them in a fixed order: the same backward twice gives other dw bits.
    The forward and dx are the native ones.
    """

    name = "atomic_weight_gradient"
    breaks = gradients.DW_DETERMINISM.id

    def __init__(self) -> None:
        self._arrival = torch.Generator()
        self._arrival.seed()  # from the operating system, as the order blocks finish in is

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float().reshape(-1, x.shape[-1])
        mean_square = sum_of_squares_fixed_order(x32) / x32.shape[-1]
        w_rows = _AtomicBroadcast.apply(weight.float(), x32.shape[0], self._arrival)
        return ((x32 / torch.sqrt(mean_square + eps)) * w_rows).reshape(x.shape)


# --- Declared capabilities, the variants and rounding classes ------------------------------------------------


def _sum_fp32(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return x.float() + residual.float()


class MixedPairSmallBatch(NativeRMSNormOp):
    """Breaks axis_a.batch_size: with an fp32 weight and bf16/fp16 x, below 16 rows the sum of squares runs in
    another order.

    Kernels dispatch on the (input, weight) type pair, and the mixed-precision instantiation is a separate
    code path with its own launch heuristic (more lanes per row for small batches, as torch's reduction does);
    only a harness that sweeps the declared fp32-weight pair ever runs it.
    """

    name = "mixed_pair_small_batch"
    breaks = axis_a.BATCH_SIZE.id
    mechanism = ("threshold", 16, "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if weight.dtype == x.dtype or _rows(x) >= 16:
            return super().forward_fp32(x, weight, eps)
        x32 = x.float()
        return _normalise(x32, weight, eps, sum_of_squares_by_lanes(x32))


class ResidualRoundedTwice(NativeRMSNormOp):
    """Breaks variants.fused_add_residual: an fp32 residual is rounded to x's dtype, added there, and the sum
    rounded again before it is stored back in fp32.

    A fused add templated on one scalar type for input and residual (as engines' fused_add_rms_norm kernels
    are), wrapped for a trainer that keeps its residual stream in fp32 by casting the residual down and the
    result back up: the fp32 residual silently loses its precision at every layer.
    """

    name = "residual_rounded_twice"
    breaks = variants.FUSED_ADD_RESIDUAL.id

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        residual_out = (x + residual.to(x.dtype)).to(residual.dtype)
        return super().forward_fp32(residual_out.float(), weight.float(), eps).to(x.dtype), residual_out


class NormalizesFp32Sum(NativeRMSNormOp):
    """Breaks variants.fused_add_stored_residual: y normalizes the fp32 sum x + residual, while the residual it
    stores is that sum rounded to the residual's dtype.

    A fused kernel that keeps the fp32 sum in shared memory for its second pass instead of re-reading the
    residual it wrote: the next layer adds to the rounded residual, so y and residual_out describe two
    different hidden states, and the kernel is bitwise equal to no unfused pair of add and norm.
    """

    name = "normalizes_fp32_sum"
    breaks = variants.FUSED_ADD_STORED_RESIDUAL.id

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        total = _sum_fp32(x, residual)
        return super().forward_fp32(total, weight.float(), eps).to(x.dtype), total.to(residual.dtype)


class FusedAddOwnOrder(NativeRMSNormOp):
    """Breaks variants.fused_add_as_forward: the fused add reduces the stored residual's squares in 64 lanes, while
    forward keeps the native tree; each order alone is correct and batch-invariant.

    Engines ship the fused add as a kernel of its own beside the plain norm (fused_add_rms_norm beside rms_norm),
    with its own vectorised loads and block reduction: an RL sampler that calls the fused kernel and a trainer that
    adds the residual and then calls the plain norm give the same hidden state other low bits, and the policy's
    sampling and training log-probabilities drift apart.
    """

    name = "fused_add_own_order"
    breaks = variants.FUSED_ADD_AS_FORWARD.id

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        _, residual_out = super().fused_add(x, residual, weight, eps)
        stored = residual_out.float()
        return _normalise(stored, weight, eps, sum_of_squares_by_lanes(stored)).to(x.dtype), residual_out


class FusedAddNormalizesInput(NativeRMSNormOp):
    """Breaks variants.fused_add_output: y normalizes x, the layer output, not x + residual.

    The second pass of a two-pass fused kernel reading its row back from the input pointer instead of the
    residual pointer it just wrote (an argument-order slip between ``input`` and ``residual``): residual_out
    is right, y is the norm of the wrong hidden state.
    """

    name = "fused_add_normalizes_input"
    breaks = variants.FUSED_ADD_OUTPUT.id

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        return super().forward(x, weight, eps), _sum_fp32(x, residual).to(residual.dtype)


class UndeclaredInPlaceFusedAdd(NativeRMSNormOp):
    """Breaks variants.purity: the fused add writes residual_out into the caller's residual, and does not
    declare fused_add_in_place.

    Engines' fused_add_rms_norm updates ``residual`` in place by design; wrapped as an out-of-place function
    that returns ``(y, residual)``, the caller's residual tensor (still needed by a training step's backward,
    or by a second sampler) changes under it.
    """

    name = "undeclared_in_place_fused_add"
    breaks = variants.PURITY.id

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        y, residual_out = super().fused_add(x, residual, weight, eps)
        residual.copy_(residual_out)
        return y, residual


class FusedAddAlignmentSwitch(NativeRMSNormOp):
    """Breaks axis_a.fused_add: the fused add takes its vectorised path only when x, residual and weight are
    16-byte aligned, and a scalar path that reduces in another order otherwise.

    Engines dispatch their fused add on pointer alignment (a vectorised kernel for aligned rows, a generic
    one else), so the rows of a chunked-prefill slice, which start wherever the slice starts, round unlike
    the same rows of the whole batch.
    """

    name = "fused_add_alignment_switch"
    breaks = variants.AXIS_A_FUSED_ADD.id
    mechanism = ("alignment", 16, "per-row scale")

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        y, residual_out = super().fused_add(x, residual, weight, eps)
        if all(t.data_ptr() % 16 == 0 for t in (x, residual, weight)):
            return y, residual_out
        stored = residual_out.float()
        return _normalise(stored, weight, eps, sum_of_squares_by_lanes(stored)).to(x.dtype), residual_out


class OffsetLargeBatchReduction(NativeRMSNormOp):
    """Breaks axis_a.offset: above 256 rows the weight-offset (Gemma) kernel reduces in another order.

    A Gemma norm kernel autotuned with the row count in its key picks another block shape for prefill-size
    batches than for decode-size ones, so a row's bits depend on how many tokens share its batch.
    """

    name = "offset_large_batch_reduction"
    breaks = variants.AXIS_A_OFFSET.id
    mechanism = ("threshold", 257, "per-row scale")

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if _rows(x) <= 256:
            return super().forward_offset(x, weight, eps)
        check_inputs(x, weight, eps)
        x32 = x.float()
        return _normalise(x32, 1.0 + weight.float(), eps, sum_of_squares_by_lanes(x32)).to(x.dtype)


class UnweightedSmallBatchReduction(NativeRMSNormOp):
    """Breaks axis_a.unweighted: below 16 rows the no-weight norm reduces in another order.

    The no-weight path of a norm library is often a plain ``x * rsqrt(x.pow(2).mean(-1) + eps)`` in torch ops,
    whose CUDA reduction splits a row across more lanes when rows are few: the weighted kernel is
    batch-invariant, its no-weight sibling is not.
    """

    name = "unweighted_small_batch_reduction"
    breaks = variants.AXIS_A_UNWEIGHTED.id
    mechanism = ("threshold", 16, "per-row scale")

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if _rows(x) >= 16:
            return super().forward_unweighted(x, eps)
        x32 = x.float()
        ones = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
        return _normalise(x32, ones, eps, sum_of_squares_by_lanes(x32)).to(x.dtype)


class OffsetInWeightDtype(NativeRMSNormOp):
    """Breaks variants.offset_dtype: forms 1 + weight in the weight's dtype (bf16) while declaring fp32.

    A Gemma port that adds the offset to the bf16 parameter before calling a plain-weight kernel
    (``rms_norm(x, 1 + self.weight)``), where Gemma's reference adds it in fp32: about one output in four
    rounds the other way, too little for any accuracy bound and enough to break parity with the trainer.
    """

    name = "offset_in_weight_dtype"
    breaks = variants.OFFSET_DTYPE.id

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return super().forward(x, 1 + weight, eps)


class OffsetIgnored(NativeRMSNormOp):
    """Breaks variants.offset_output: forward_offset scales by the plain weight, as if the offset were zero.

    A kernel library whose Gemma flag (``offset=1.0`` or ``casting_mode="gemma"``) is not passed through by a
    wrapper: a checkpoint that stores ``weight - 1`` is normalised with weights around zero.
    """

    name = "offset_ignored"
    breaks = variants.OFFSET_OUTPUT.id

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return super().forward(x, weight, eps)


class UnweightedLowPrecisionSum(NativeRMSNormOp):
    """Breaks variants.unweighted_output: the no-weight path accumulates its sum of squares in x's dtype.

    A norm whose ``elementwise_affine=False`` branch skips the fp32 upcast the weighted branch has: 16 lanes
    add their squares in bf16 registers, and a running sum of a few hundred swallows every square below its
    half-ULP. fp32 inputs are unaffected.
    """

    name = "unweighted_low_precision_sum"
    breaks = variants.UNWEIGHTED_OUTPUT.id

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if x.dtype == torch.float32:
            return super().forward_unweighted(x, eps)
        x32 = x.float()
        ones = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
        return _normalise(x32, ones, eps, sum_of_squares_by_lanes(x32, lanes=16, accumulate=x.dtype)).to(x.dtype)


class WeightRoundedToInputDtype(NativeRMSNormOp):
    """Breaks mixed_precision.fp32_weight: an fp32 weight is rounded to x's dtype before the multiply.

    Hugging Face's ``self.weight * hidden.to(input_dtype)`` habit carried into a kernel that takes an fp32
    weight: the weight loses 16 bits before it is used. An inference engine shipped exactly this regression
    for Qwen3's q/k norms with fp32 weights, compounding through every layer's attention.
    """

    name = "weight_rounded_to_input_dtype"
    breaks = variants.MIXED_PRECISION_FP32_WEIGHT.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return super().forward_fp32(x, weight.to(x.dtype), eps)


class HfOrderDeclaredAsFp32Product(NativeRMSNormOp):
    """Breaks variants.rounding_class: declares the fp32-product class but rounds the normalized row to x's
    dtype before the weight multiply (the Hugging Face Llama order).

    Liger-Kernel's llama casting mode and Hugging Face's own RMSNorm round twice; a kernel ported from them but
    documented as "fp32 math, one rounding" cannot be bitwise equal to a true fp32-product kernel, and an RL
    team pairing the two on that promise gets a silent train/sample mismatch.
    """

    name = "hf_order_declared_as_fp32_product"
    breaks = variants.ROUNDING_CLASS.id
    rounding_class = "product_fp32"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        ones = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
        normalized = super().forward_fp32(x, ones, eps).to(x.dtype)
        return (normalized.float() * weight.float()).to(x.dtype)


class UndeclaredMixedPair(NativeRMSNormOp):
    """Breaks interface.input_errors: declares only weights in x's dtype, yet takes an fp32 weight with bf16 x.

    A kernel wrapper that checks x's dtype and nothing else (Triton kernels load the weight through its own
    pointer type, whatever it is): the pair was never tested by its authors, and a caller cannot learn from the
    declaration whether the mixed path exists.
    """

    name = "undeclared_mixed_pair"
    breaks = interface.INPUT_ERRORS.id
    dtype_pairs = SAME_DTYPE_PAIRS


# --- Thresholds, layouts, entry points, grad mode, first calls: what only explicit checks reach -----------


def _lanes_if(condition: bool, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The native output, or where ``condition`` holds the same arithmetic reduced in lane order."""
    if not condition:
        return reference_fp32(x, weight, eps)
    x32 = x.float()
    return _normalise(x32, weight, eps, sum_of_squares_by_lanes(x32))


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # an H200's, as the contract's thresholds assume where no GPU is present


class PrefillSplitReduction(NativeRMSNormOp):
    """Breaks axis_a.batch_size: from 2048 rows at hidden 4096 and wider, each row's sum of squares is split
    across more lanes and combined in another order.

    Inference engines tune their norm kernels for prefill-size batches (thousands of tokens) apart from decode
    ones, with another block shape or a split reduction once the grid is large; a training step on a 4096-token
    sequence and a sampling step on one token then round the same row differently. The sweep's element budget
    on a CPU tops out at 1024 rows of 4096, so only the threshold checks reach it.
    """

    name = "prefill_split_reduction"
    breaks = axis_a.BATCH_SIZE.id
    mechanism = ("threshold", 2048, "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(_rows(x) >= 2048 and x.shape[-1] >= 4096, x, weight, eps)


class PersistentKernelReduction(NativeRMSNormOp):
    """Breaks axis_a.batch_size: above two rows per SM (264 on a 132-SM H200) a persistent kernel loops over
    its rows with a loop body that reduces in another order.

    Persistent kernels launch a fixed grid of about two programs per SM and give each program a strided set of
    rows; below that count each row gets its own program through another code path. A fixed place like 264 is
    exactly what a derandomized sweep misses on every run while random ones catch it now and then.
    """

    name = "persistent_kernel_reduction"
    breaks = axis_a.BATCH_SIZE.id
    mechanism = ("threshold", 265, "per-row scale")  # two rows per SM of the CPU's assumed 132

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(_rows(x) > 2 * _sm_count(x.device), x, weight, eps)


class RowPackingReduction(NativeRMSNormOp):
    """Breaks axis_a.slice_offset: from 32768 rows at dims up to 256, rows are packed 16 to a program and
    reduced in another order.

    Liger-Kernel's RMSNorm switches to a 16-rows-per-program kernel at 32768 rows at small dims (measured at
    dim 128, README): a QK-norm batch of 32768 tokens x heads and a slice of it taken by chunked prefill then
    round the same rows differently.
    """

    name = "row_packing_reduction"
    breaks = axis_a.SLICE_OFFSET.id
    mechanism = ("threshold", 32768, "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(_rows(x) >= 32768 and x.shape[-1] <= 256, x, weight, eps)


class ManyHeadsQKNorm(NativeRMSNormOp):
    """Breaks axis_a.leading_dims: a [T, H, 128] input with 32 heads or more takes a per-token path (one
    program normalises all heads of a token, a warp per head) that reduces in another order.

    QK-norm kernels specialise on the head count: few heads (key/value) keep one row per program, many
    (Qwen3-8B's 32 query heads and up) batch a token's heads together. The flattened [T*H, 128] call keeps the
    row path, so the same head's bits depend on how the caller shaped the tensor.
    """

    name = "many_heads_qk_norm"
    breaks = axis_a.LEADING_DIMS.id
    mechanism = ("threshold", 32, "per-row scale")  # heads

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(x.dim() == 3 and x.shape[-2] >= 32 and x.shape[-1] == 128, x, weight, eps)


class StridedWeightReadContiguously(NativeRMSNormOp):
    """Breaks axis_b.output: the weight is read from ``weight.data_ptr()`` as if it were contiguous.

    A kernel wrapper that checks x's strides but passes the weight's pointer alone: a weight that is a strided
    view of a larger parameter (every other element of an interleaved buffer) is read element after element
    from its first address, so the kernel multiplies by the neighbours' values. Contiguous weights, and
    offset slices (whose pointer already includes the offset), are unaffected.
    """

    name = "strided_weight_read_contiguously"
    breaks = axis_b.OUTPUT.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        as_read = weight.as_strided(weight.shape, (1,))
        return super().forward_fp32(x, as_read, eps)


class MisalignedWeightPath(NativeRMSNormOp):
    """Breaks axis_a.strided_rows: a weight whose address is not 16-byte aligned sends the whole kernel down
    a scalar path that reduces in another order.

    Vectorised norm kernels check every pointer they load with 16-byte vectors (x, the weight, the output)
    and fall back to scalar loads when any is misaligned; the fallback's loop also sums in another order. An
    offset slice of a flat parameter buffer (FSDP) is such a weight: the same rows round differently than
    with the model's own contiguous weight.
    """

    name = "misaligned_weight_path"
    breaks = axis_a.STRIDED_ROWS.id
    mechanism = ("alignment", 16, "per-row scale")  # the weight's address

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(weight.data_ptr() % 16 != 0, x, weight, eps)


class Fp32EntrySmallBatchReduction(NativeRMSNormOp):
    """Breaks axis_a.padding: ``forward_fp32`` alone splits rows across more lanes below 16 rows; ``forward``
    is the native kernel.

    Kernel libraries instantiate one kernel per output dtype, each with its own launch heuristic; the fp32
    output path (for a loss or logits in fp32) is rarely the one anyone checked for batch invariance. Padding
    a decode batch of 3 up to 16 changes its fp32 outputs' bits.
    """

    name = "fp32_entry_small_batch_reduction"
    breaks = axis_a.PADDING.id
    mechanism = ("threshold", 16, "per-row scale")  # rows, real and pad together

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return reference_fp32(x, weight, eps).to(x.dtype)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(_rows(x) < 16, x, weight, eps)


class _TrainingKernel(torch.autograd.Function):
    """The training path: a forward kernel that also keeps the statistics for the backward, reducing in lane
    order; its backward is the native one's formula."""

    @staticmethod
    def forward(ctx, x32: torch.Tensor, weight32: torch.Tensor, eps: float) -> torch.Tensor:
        denom = torch.sqrt(sum_of_squares_by_lanes(x32) / x32.shape[-1] + eps)
        ctx.save_for_backward(x32, weight32, denom)
        return (x32 / denom) * weight32

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x32, weight32, denom = ctx.saved_tensors
        gw = grad * weight32
        dot = tree_sum(gw * x32)
        dx = gw / denom - x32 * (dot / x32.shape[-1]) / (denom * denom * denom)
        dw = (grad * (x32 / denom)).reshape(-1, x32.shape[-1]).sum(0)
        return dx, dw, None


class TrainingPathReduction(NativeRMSNormOp):
    """Breaks axis_a.grad_mode: inputs that require grad (training) take another forward kernel than plain
    inputs or inference_mode (sampling), and it reduces in another order.

    Kernel libraries dispatch on ``torch.is_grad_enabled() and x.requires_grad``: the training path is an
    autograd Function whose forward kernel also writes rstd for the backward, the inference path a leaner
    kernel (this project's Triton and CUDA backends make the same dispatch, with one reduction order). If
    the two kernels reduce differently, the trainer's log-probs and the sampler's disagree on every token.
    """

    name = "training_path_reduction"
    breaks = axis_a.GRAD_MODE.id
    mechanism = ("mode", "require grad", "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
            return _TrainingKernel.apply(x.float(), weight.float(), eps)
        return super().forward_fp32(x, weight, eps)


# Keys (dim, dtype, device) the autotuner below has tuned, for the life of the process: module state, as a
# kernel's autotuning cache is, so a fresh instance in the same process finds it warm.
_TUNED: set[tuple[int, torch.dtype, str]] = set()


class AutotuneFirstCall(NativeRMSNormOp):
    """Breaks axis_a.first_call: the first call for a (dim, dtype) returns the output of the autotuner's last
    timing run, whose launch config reduces in another order; later calls run the config it chose.

    A hand-rolled autotuner times every candidate config on the first call for a key and returns the buffer
    its timing loop last wrote, instead of re-running the winner; a JIT path that serves an eager fallback
    while the kernel compiles does the same. Only the first call per key and process differs, so a
    long-running test process, whose caches are warm, never sees it: a fresh process does.
    """

    name = "autotune_first_call"
    breaks = axis_a.FIRST_CALL.id
    mechanism = ("first call", 1, "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        key = (x.shape[-1], x.dtype, str(x.device))
        first = key not in _TUNED
        _TUNED.add(key)
        return _lanes_if(first, x, weight, eps)




# --- The variants held to every check forward is held to: what only the shared check set reaches --------------


class RmsFromFp32Sum(NativeRMSNormOp):
    """Breaks variants.fused_add_stored_residual: the fused add takes its rms from the fp32 sum x + residual, and
    normalizes the residual it stored (rounded to the residual's dtype) with it.

    A one-pass fused kernel that accumulates the sum of squares while it adds, before it rounds the sum for the
    store, then re-reads the stored residual for the normalize pass: its normalized row is right, its rms is
    that of another tensor. Counted over all elements at once, its bits side with the stored residual in bf16.
    """

    name = "rms_from_fp32_sum"
    breaks = variants.FUSED_ADD_STORED_RESIDUAL.id

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        check_inputs(x, weight, eps)
        total = _sum_fp32(x, residual)
        stored = total.to(residual.dtype)
        y = _normalise(stored.float(), weight, eps, sum_of_squares_fixed_order(total)).to(x.dtype)
        return y, stored


class StaticResidualBuffer(NativeRMSNormOp):
    """Breaks semantics.fresh_output: the fused add returns one static buffer as residual_out, rewritten by
    every call.

    A CUDA-graph friendly wrapper that allocates residual_out once per shape and returns it each time: the
    caller's residual stream from the previous layer changes under it at the next call. Every other output is
    fresh, so a check that watches only the first returned tensor never sees it.
    """

    name = "static_residual_buffer"
    breaks = semantics.FRESH_OUTPUT.id

    def __init__(self) -> None:
        self._buffers: dict[tuple, torch.Tensor] = {}

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        y, residual_out = super().fused_add(x, residual, weight, eps)
        key = (tuple(residual_out.shape), residual_out.dtype, str(residual_out.device))
        buffer = self._buffers.setdefault(key, torch.empty_like(residual_out))
        buffer.copy_(residual_out)
        return y, buffer


class FusedAddFirstCall(NativeRMSNormOp):
    """Breaks axis_a.first_call: the fused add's first call for a (dim, dtype) reduces in another order (the
    autotuner's last timing run), later calls in the order it chose.

    A fused add-and-norm kernel autotuned on its first call per key, returning the buffer of its last timing
    run: only a fresh process sees it, and a sweep that meets it first can only report a failure that does not
    reproduce, blamed on whichever Axis-A variant made that call.
    """

    name = "fused_add_first_call"
    breaks = axis_a.FIRST_CALL.id
    mechanism = ("first call", 1, "per-row scale")

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        check_inputs(x, weight, eps)
        check_residual(x, residual, fp32_residual=True)
        key = ("fused_add", x.shape[-1], x.dtype, residual.dtype, str(x.device))
        first = key not in _TUNED
        _TUNED.add(key)
        stored = _sum_fp32(x, residual).to(residual.dtype)
        return _lanes_if(first, stored, weight, eps).to(x.dtype), stored


class InPlaceReturnsSwapped(NativeRMSNormOp):
    """Breaks variants.fused_add_residual: an in-place fused add writes y into x and residual_out into residual,
    and returns them swapped, (residual, x).

    The wrapper of an in-place engine op that returns its arguments for chaining, in the op's own argument order
    (``residual`` first in some engines' signatures): a caller that uses the return value takes the residual
    stream for the normalized hidden state.
    """

    name = "in_place_returns_swapped"
    breaks = variants.FUSED_ADD_RESIDUAL.id
    fused_add_in_place = True
    fused_add_fp32_residual = False

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        y, residual_out = super().fused_add(x, residual, weight, eps)
        residual.copy_(residual_out)
        x.copy_(y)
        return residual, x


class OffsetInferencePath(NativeRMSNormOp):
    """Breaks axis_a.offset: under torch.inference_mode() or no_grad the weight-offset norm takes a leaner
    kernel that reduces in another order.

    Gemma norm wrappers dispatch on ``torch.is_grad_enabled()``: the sampler's path (inference mode) is a fused
    inference kernel, the trainer's an autograd Function; if their reductions differ, a Gemma policy's
    log-probs disagree between training and sampling.
    """

    name = "offset_inference_path"
    breaks = variants.AXIS_A_OFFSET.id
    mechanism = ("mode", "no_grad", "per-row scale")

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(not torch.is_grad_enabled(), x, 1.0 + weight.float(), eps).to(x.dtype)


class CompiledPathReduction(NativeRMSNormOp):
    """Breaks axis_a.execution_mode: under torch.compile the norm takes another path that reduces in another
    order; eager calls run the native kernel.

    Kernel wrappers check ``torch.compiler.is_compiling()`` to hand Dynamo a traceable fallback (a decomposed
    formula instead of the hand-written kernel Dynamo cannot see into). If the fallback sums in another order, an
    engine's compiled graph and the trainer's eager calls give every token other bits, and an eager-only gate
    never sees it.
    """

    name = "compiled_path_reduction"
    breaks = axis_a.EXECUTION_MODE.id
    mechanism = ("mode", "torch.compile", "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(torch.compiler.is_compiling(), x, weight, eps)


class FusedAddInferencePath(NativeRMSNormOp):
    """Breaks axis_a.fused_add: under torch.inference_mode() the fused add (and only it) runs a leaner kernel
    that reduces in another order; with grad enabled or under no_grad it is the native kernel.

    Engines dispatch the fused residual add on ``torch.is_inference_mode_enabled()``: the sampler's decode loop
    runs in inference mode and gets a fused inference kernel, the trainer's forward the autograd path. If the
    two reduce differently, every layer's normalized hidden state differs between sampling and training.
    """

    name = "fused_add_inference_path"
    breaks = variants.AXIS_A_FUSED_ADD.id
    mechanism = ("mode", "inference_mode", "per-row scale")

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        y, residual_out = super().fused_add(x, residual, weight, eps)
        if not torch.is_inference_mode_enabled():
            return y, residual_out
        stored = residual_out.float()
        return _normalise(stored, weight, eps, sum_of_squares_by_lanes(stored)).to(x.dtype), residual_out


class OffsetStridedWeightReadContiguously(NativeRMSNormOp):
    """Breaks variants.offset_output: forward_offset reads the weight from ``weight.data_ptr()`` as if it were
    contiguous.

    As StridedWeightReadContiguously, in the Gemma path only: its wrapper checks x's strides but hands the
    kernel the weight's pointer alone, so a strided view of an interleaved parameter buffer is read element after
    element from its first address.
    """

    name = "offset_strided_weight_read_contiguously"
    breaks = variants.OFFSET_OUTPUT.id

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return super().forward_offset(x, weight.as_strided(weight.shape, (1,)), eps)


class UnweightedRoundsTwice(NativeRMSNormOp):
    """Breaks variants.rounding_class: the no-weight norm rounds 1/rms to x's dtype, then the row times it, while
    the backend declares the fp32-product class (rounded once) for every entry point.

    The no-weight branch of a norm written in 16-bit torch ops, ``x * torch.rsqrt(var + eps).to(x.dtype)``: within
    any accuracy bound, and bitwise equal to no kernel that rounds once, which is what an RL team pairing it with
    a fused kernel of the declared class was promised.
    """

    name = "unweighted_rounds_twice"
    breaks = variants.ROUNDING_CLASS.id

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        x32 = x.float()
        inverse = 1.0 / torch.sqrt(sum_of_squares_fixed_order(x32) / x32.shape[-1] + eps)
        return (x32 * inverse.to(x.dtype).float()).to(x.dtype)


class UnweightedBatchWideNonfiniteGuard(NativeRMSNormOp):
    """Breaks semantics.nonfinite_confined: one NaN or Inf anywhere zeroes the no-weight norm's whole batch.

    As BatchWideNonfiniteGuard, in the no-weight path only (QK-norm without affine, or a router's norm): an
    AMP-style ``found_inf`` guard applied to the batch, not the row, so one overflowing token wipes every other
    sequence's activations.
    """

    name = "unweighted_batch_wide_nonfinite_guard"
    breaks = semantics.NONFINITE_CONFINED.id

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        out = super().forward_unweighted(x, eps)
        return torch.where(torch.isfinite(x).all(), out, torch.zeros_like(out))


# --- The shapes real models run and the modes trainers use ------------------------------------------------------
# Each hides where a sweep of dims up to 8192, 64 heads, 2-D views, the default modes, one other thread count and a
# trained weight does not go.

# Rows wider than this take the wide-row paths below (Llama-3.1-405B's hidden 16384, Falcon-180B's 14848).
_WIDE = 8192


class WideRowSplitReduction(NativeRMSNormOp):
    """Breaks axis_a.batch_size: rows wider than 8192 in a batch of fewer than 4 rows are each split over several
    programs, whose partial sums combine in another order.

    A kernel that gives each row one program while rows fill the GPU, and splits a row over several programs when
    they do not (a decode step of Llama-3.1-405B: one token of 16384), so that few wide rows still use every SM.
    The split only pays past 8192 columns, so a gate whose dims stop at 8192 never takes it; a decode step and a
    prefill of the same token then round it differently.
    """

    name = "wide_row_split_reduction"
    breaks = axis_a.BATCH_SIZE.id
    mechanism = ("threshold", 4, "per-row scale")  # rows, at dims past 8192

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(x.shape[-1] > _WIDE and _rows(x) < 4, x, weight, eps)


class WideRowDroppedTail(NativeRMSNormOp):
    """Breaks axis_b.output: rows wider than 8192 take a block loop of 1024 columns with no masked tail, so the
    columns past the last whole block are left out of the sum of squares.

    Kernels keep the whole row in registers up to some width and loop over blocks beyond it; the loop written
    ``for k in range(dim // BLOCK)`` is exact at 16384 and drops 512 columns of Falcon-180B's 14848 and 1023 of
    16383. Dims up to 8192 take the register path and are exact.
    """

    name = "wide_row_dropped_tail"
    breaks = axis_b.OUTPUT.id
    block = 1024

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        dim = x.shape[-1]
        if dim <= _WIDE:
            return super().forward_fp32(x, weight, eps)
        x32 = x.float()
        whole = dim // self.block * self.block
        return _normalise(x32, weight, eps, sum_of_squares_fixed_order(x32[..., :whole]))


class SecondLaunchPastHead64(NativeRMSNormOp):
    """Breaks axis_a.leading_dims: a [T, H, 128] input with more than 64 heads is normalised in two launches, the
    heads past the 64th by a second kernel that reduces in another order.

    A QK-norm kernel that maps heads to a grid axis sized for 64 (Qwen3-32B's query heads) and launches again for
    the rest: DeepSeek-V3's and Llama-3.1-405B's 128 query heads take the second launch for half of them, while
    the flattened [T*H, 128] call keeps one launch, so a head's bits depend on how the caller shaped the tensor.
    """

    name = "second_launch_past_head_64"
    breaks = axis_a.LEADING_DIMS.id
    mechanism = ("threshold", 65, "per-row scale")  # heads

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if x.dim() < 3 or x.shape[-2] <= 64:
            return super().forward_fp32(x, weight, eps)
        first = reference_fp32(x[..., :64, :], weight, eps)
        rest = _lanes_if(True, x[..., 64:, :], weight, eps)
        return torch.cat([first, rest], dim=-2)


class StridedLastDimAs2D(NativeRMSNormOp):
    """Breaks axis_a.strided_rows: a 3-D input whose last dim is strided is read with 2-D column-major indexing,
    element (r, c) at r * stride(-2) + c * stride(-1), as if its rows were one 2-D column-major matrix.

    A wrapper that supports a column-major [rows, dim] input by passing the kernel the last two strides: a
    transposed [B, dim, S] activation viewed as [B, S, dim] has the same two strides, but its second batch entry
    starts dim * S elements on, so the kernel reads the first entry's memory in its place. Contiguous copies, and
    2-D column-major inputs, are read right.
    """

    name = "strided_last_dim_as_2d"
    breaks = axis_a.STRIDED_ROWS.id
    mechanism = ("mode", "3-D column-major", "wrong values")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if x.dim() < 3 or x.stride(-1) == 1:
            return super().forward_fp32(x, weight, eps)
        as_read = x.as_strided((_rows(x), x.shape[-1]), (x.stride(-2), x.stride(-1)))
        return reference_fp32(as_read, weight, eps).reshape(x.shape)


class DeterministicModePath(NativeRMSNormOp):
    """Breaks axis_a.execution_mode: under ``torch.use_deterministic_algorithms(True)`` the norm takes another path
    that reduces in another order.

    Kernel libraries check ``torch.are_deterministic_algorithms_enabled()`` and swap a split or atomic reduction for
    a deterministic fallback. Many RL trainers turn the mode on and samplers leave it off, so the trainer's
    log-probs and the sampler's come from two reduction orders, while a gate that never turns the mode on sees one.
    """

    name = "deterministic_mode_path"
    breaks = axis_a.EXECUTION_MODE.id
    mechanism = ("mode", "deterministic", "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(torch.are_deterministic_algorithms_enabled(), x, weight, eps)


class ManyThreadsReduction(NativeRMSNormOp):
    """Breaks axis_a.execution_mode: with 4 or more intra-op threads each row's sum of squares is split over the
    threads and their partial sums combined in another order.

    A CPU kernel that parallelises within a row once it has threads to spare (``at::parallel_reduce`` with a grain
    size): on a CI machine of two cores, under pytest-xdist one thread a worker, it never splits; on a 64-core
    training host it always does, and the same row rounds differently there.
    """

    name = "many_threads_reduction"
    breaks = axis_a.EXECUTION_MODE.id
    mechanism = ("threshold", 4, "per-row scale")  # intra-op threads

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _lanes_if(torch.get_num_threads() >= 4, x, weight, eps)


class _DxOnlyBackward(torch.autograd.Function):
    """The native forward with a hand-written backward that has a dx-only path for a frozen weight, whose dot
    product re-plans below 16 rows; with the weight trained, one fused dx and dw pass in the native order."""

    @staticmethod
    def forward(ctx, x32: torch.Tensor, weight32: torch.Tensor, eps: float) -> torch.Tensor:
        denom = torch.sqrt(sum_of_squares_fixed_order(x32) / x32.shape[-1] + eps)
        ctx.save_for_backward(x32, weight32, denom)
        return (x32 / denom) * weight32

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, None]:
        x32, weight32, denom = ctx.saved_tensors
        dim = x32.shape[-1]
        gw = grad * weight32
        dx_only = not ctx.needs_input_grad[1]
        dot = (sum_by_lanes if dx_only and grad.numel() // dim < 16 else tree_sum)(gw * x32)
        dx = gw / denom - x32 * (dot / dim) / (denom * denom * denom)
        dw = None if dx_only else (grad * (x32 / denom)).reshape(-1, dim).sum(0)
        return dx, dw, None


class FrozenWeightBackward(NativeRMSNormOp):
    """Breaks gradients.dx_batch_invariance: with the weight frozen (LoRA) the backward takes a dx-only kernel
    whose dot product splits rows over more lanes below 16 rows.

    Backward kernels branch on ``ctx.needs_input_grad``: with no dw to write they launch a leaner dx kernel with a
    launch heuristic of its own. LoRA fine-tuning freezes every norm weight, so it alone meets that kernel, and a
    gate that checks dx with the weight trained passes it.
    """

    name = "frozen_weight_backward"
    breaks = gradients.DX_BATCH_INVARIANCE.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return _DxOnlyBackward.apply(x.float(), weight.float(), eps)


class _ThreadSplitWeightGradient(torch.autograd.Function):
    """weight broadcast over the rows; its gradient sums the rows in one partial sum per intra-op thread from 256
    rows on, the partials added in thread order."""

    @staticmethod
    def forward(ctx, weight32: torch.Tensor, rows: int) -> torch.Tensor:
        return weight32.expand(rows, weight32.shape[-1])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        parts = torch.get_num_threads() if grad.shape[0] >= 256 else 1
        partials = [sum_fixed_order(block, dim=0).reshape(-1) for block in grad.chunk(parts)]
        total = partials[0]
        for partial in partials[1:]:
            total = total + partial
        return total, None


class ThreadSplitWeightGradient(NativeRMSNormOp):
    """Breaks gradients.dw_determinism: from 256 rows dw's sum over rows is split into one partial sum per intra-op
    thread, so dw's bits depend on the thread count.

    A CPU backward that parallelises dw's reduction over rows with ``at::parallel_for`` and adds the per-thread
    partials: run to run on one machine it is deterministic, and a training job that moves to a host with another
    core count (or sets OMP_NUM_THREADS) gets other dw bits. The forward and dx are the native ones.
    """

    name = "thread_split_weight_gradient"
    breaks = gradients.DW_DETERMINISM.id

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float().reshape(-1, x.shape[-1])
        mean_square = sum_of_squares_fixed_order(x32) / x32.shape[-1]
        w_rows = _ThreadSplitWeightGradient.apply(weight.float(), x32.shape[0])
        return ((x32 / torch.sqrt(mean_square + eps)) * w_rows).reshape(x.shape)


# --- Correct backends: the suites must pass them ------------------------------------------------------------


class LaneOrderRMSNorm(NativeRMSNormOp):
    """A correct RMSNorm with another fixed reduction order than the native tree: 64 lanes summed left to
    right, as a GPU block would. Batch-invariant by construction (elementwise adds whose order depends on
    the dim alone); the suites must pass it, or they fail kernels for rounding rather than for breaking
    the contract. Its variants reduce in the same lane order."""

    name = "lane_order"
    # Against native in a parity pair: another order, at every batch size, so a per-row scale.
    parity_mechanism = ("every", None, "per-row scale")

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return self._scaled(x.float(), weight.float(), eps)

    def _scaled(self, x32: torch.Tensor, scale32: torch.Tensor, eps: float) -> torch.Tensor:
        return _normalise(x32, scale32, eps, sum_of_squares_by_lanes(x32))

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        check_inputs(x, weight, eps)
        residual_out = _sum_fp32(x, residual).to(residual.dtype)
        return self._scaled(residual_out.float(), weight.float(), eps).to(x.dtype), residual_out

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return self._scaled(x.float(), 1.0 + weight.float(), eps).to(x.dtype)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        ones = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
        return self._scaled(x.float(), ones, eps).to(x.dtype)


class EngineStyleRMSNorm(LaneOrderRMSNorm):
    """A correct kernel with every declaration an engine's norm kernels make: the fused add writes in place
    (y into x, residual_out into residual), the normalized row is rounded to x's dtype before the weight
    multiply (the Hugging Face order, declared as its rounding class), and ``1 + weight`` is formed in the
    weight's dtype (declared). The suites must pass it: each declaration moves the reference it is held to."""

    name = "engine_style"
    # Against native in a parity pair, in float32 (the dtype benchmarks/diagnosis.py holds it to): rounding the
    # normalized row to x's dtype is exact there, so its bits are LaneOrderRMSNorm's and the one difference is the
    # lane order of its sum of squares, a per-row scale. The Hugging Face order's second rounding of each element
    # (an elementwise stage, its rounding class named) shows in 16-bit dtypes alone.
    parity_mechanism = ("every", None, "per-row scale")
    fused_add_in_place = True
    fused_add_fp32_residual = False
    offset_dtype = "weight"
    rounding_class = "normalized_rounded"

    def _hf_order(self, x32: torch.Tensor, scale32: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
        ones = torch.ones_like(scale32)
        normalized = _normalise(x32, ones, eps, sum_of_squares_by_lanes(x32)).to(dtype)
        return (normalized.float() * scale32).to(dtype)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return self._hf_order(x.float(), weight.float(), eps, x.dtype)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return self._hf_order(x.float(), weight.float(), eps, torch.float32)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
        check_inputs(x, weight, eps)
        check_residual(x, residual)
        residual.copy_(_sum_fp32(x, residual).to(residual.dtype))
        x.copy_(self._hf_order(residual.float(), weight.float(), eps, x.dtype))

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        return self._hf_order(x.float(), (1 + weight).float(), eps, x.dtype)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        ones = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
        return self._hf_order(x.float(), ones, eps, x.dtype)


def make_correct_backend() -> NativeRMSNormOp:
    """A zero-argument factory, for `--backend=module:factory`."""
    return NativeRMSNormOp()


correct_instance = NativeRMSNormOp()


class CudaOnly(NativeRMSNormOp):
    """Declares CUDA only: on a CPU it must be skipped with that reason, never run and never passed."""

    name = "cuda_only"
    devices = ("cuda",)


cuda_only = CudaOnly()


class ImpoliteRMSNorm:
    """A correct kernel with an impolite interface: the reference's numbers, but a RuntimeError that names no
    shape for a wrong-shaped weight, and float64 (or int32, or any weight dtype) accepted and computed.

    Numerics rules gate and interface rules only warn: it must pass the default gate with interface warnings
    listed, and fail only under --strict-interface.
    """

    name = "impolite"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if weight.shape != x.shape[-1:]:
            raise RuntimeError("weight does not match the input")
        return reference_fp32(x.float(), weight.float(), eps).to(x.dtype)


class RefusesStridedWeight:
    """A correct kernel that refuses a strided weight with a clear error, as xformers ("weights must be
    contiguous") and quack ("Mismatched mW.strides[0]") do, and does not declare it: the reference's numbers on
    every weight it takes.

    A refusal is not a breach: it must read as refused (its own table, the limits in "Pick a kernel"), pass the
    default gate, and fail only under --strict-interface; never as an Axis-A batch-size breach.
    """

    name = "refuses_strided_weight"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward_fp32(x, weight, eps).to(x.dtype)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if not weight.is_contiguous():
            raise ValueError("weights must be contiguous")
        return reference_fp32(x, weight, eps)


class DeclaresContiguousLayouts(RefusesStridedWeight):
    """The same kernel declaring what it takes (``layouts = ("contiguous",)``): cases with a strided or
    misaligned tensor are not run, with the limit as the reason, and nothing reads as refused."""

    name = "declares_contiguous_layouts"
    layouts = ("contiguous",)


class DeclaresMaxDim4096:
    """A correct kernel for rows of at most 4096 elements (the target model's hidden size), as kernels built for
    one model ship, that declares it (``max_dim = 4096``) and raises a clear ValueError past it. Every check
    holds it only to the dims it takes: the first calls in a fresh process at the threshold dims past 4096 (5120,
    8192) and the cross-backend table's shapes past it are not run for it, and nothing it raises past its limit
    reads as a failure of any rule."""

    name = "declares_max_dim_4096"
    max_dim = 4096

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward_fp32(x, weight, eps).to(x.dtype)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if x.shape[-1] > 4096:
            raise ValueError(f"rows of {x.shape[-1]} elements are past this kernel's 4096")
        return reference_fp32(x, weight, eps)
