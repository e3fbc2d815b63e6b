"""Backends with planted defects, each breaking one contract rule the way real kernels do, and two correct
backends that the suites must never fail.

Each defect names the rule it breaks in ``breaks``; tests/test_detection.py runs the suite test of that rule
against it and expects the run to fail there, and benchmarks/detection.py measures how many examples that
takes. A harness that lets one of these through has lost detection power. Every defect is the native
ground truth plus one bug, so it can fail only through that bug.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.contract.inputs import check_inputs
from rmsnorm_conformance.contract.reference import sum_of_squares_fixed_order

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
    breaks = "axis_a.batch_size"

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
    breaks = "axis_a.batch_size"

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
    breaks = "axis_a.slice_offset"

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
    breaks = "axis_a.padding"

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
    breaks = "axis_a.position"

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
    breaks = "axis_a.leading_dims"

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
    breaks = "axis_a.strided_rows"

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
    breaks = "axis_a.repeat"
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
    breaks = "axis_b.output"
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
    breaks = "axis_b.output"

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
    breaks = "axis_b.output"

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
    breaks = "axis_b.forward_fp32"

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
    breaks = "semantics.eps_inside_sqrt"

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
    breaks = "semantics.plain_weight"

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return super().forward_fp32(x, torch.ones_like(weight), eps) * (1 + weight.float())


class WrongOutputDtype(NativeRMSNormOp):
    """Breaks semantics.dtype_routing: ``forward`` returns the fp32 accumulator's dtype, not x.dtype.

    The missing ``.to(input_dtype)`` at the end of a mixed-precision RMSNorm: bf16 callers get fp32
    tensors, twice the memory and a dtype error further down the graph.
    """

    name = "wrong_output_dtype"
    breaks = "semantics.dtype_routing"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward_fp32(x, weight, eps)


class NoShapeGuard(NativeRMSNormOp):
    """Breaks semantics.shape_guard: the weight is flattened before the check, so a wrong shape broadcasts.

    Kernel wrappers flatten the weight for pointer arithmetic and then check only its length: a (1, D)
    weight passes silently, and a (D, 2) one is reported by its flattened shape, not its own.
    """

    name = "no_shape_guard"
    breaks = "semantics.shape_guard"

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return super().forward_fp32(x, weight.reshape(-1), eps)


class MutatesInput(NativeRMSNormOp):
    """Breaks semantics.purity: normalises in place in the upcast buffer, which *is* x when x is fp32.

    ``x32 = x.float(); x32.mul_(rstd)`` saves a buffer for bf16 inputs, where ``.float()`` copies; for fp32
    inputs ``.float()`` returns x itself and the caller's activations are overwritten.
    """

    name = "mutates_input"
    breaks = "semantics.purity"

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float()
        mean_square = sum_of_squares_fixed_order(x32) / x32.shape[-1]
        x32.div_(torch.sqrt(mean_square + eps))
        return x32 * weight.float()


class WritesBesideInput(NativeRMSNormOp):
    """Breaks semantics.purity: stores each row's rstd in the memory just past the end of x.

    A fused kernel that keeps its backward statistics in a workspace it assumes the caller allocated
    right after x: called on a plain tensor, it overwrites whatever lies there. The output itself is right.
    """

    name = "writes_beside_input"
    breaks = "semantics.purity"

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
    breaks = "semantics.empty_batch"
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
    breaks = "semantics.nonfinite_confined"

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        out = super().forward_fp32(x, weight, eps)
        return torch.where(torch.isfinite(x).all(), out, torch.zeros_like(out))


class SilentDtypeCast(NativeRMSNormOp):
    """Breaks interface.input_errors: a weight of another dtype is cast to x's instead of rejected.

    Hugging Face's ``self.weight * hidden.to(input_dtype)`` habit: an fp32 weight with bf16 activations is
    quietly rounded, and the caller never learns that its checkpoint and activations disagree.
    """

    name = "silent_dtype_cast"
    breaks = "interface.input_errors"

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
    breaks = "gradients.dx_tolerance"

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        mean_square = sum_of_squares_fixed_order(x.float()) / x.shape[-1]
        return (x.float() / torch.sqrt(mean_square + eps)) * weight.float()


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
    breaks = "gradients.dx_batch_invariance"

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
    breaks = "gradients.dw_determinism"

    def __init__(self) -> None:
        self._arrival = torch.Generator()
        self._arrival.seed()  # from the operating system, as the order blocks finish in is

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float().reshape(-1, x.shape[-1])
        mean_square = sum_of_squares_fixed_order(x32) / x32.shape[-1]
        w_rows = _AtomicBroadcast.apply(weight.float(), x32.shape[0], self._arrival)
        return ((x32 / torch.sqrt(mean_square + eps)) * w_rows).reshape(x.shape)


DEFECTS: tuple[type[NativeRMSNormOp], ...] = (
    SmallBatchReduction, LargeBatchReduction, AlignmentDependentReduction, BatchStatisticLeak,
    PositionDependentReduction, LeadingDimsReduction, IgnoresStrides, RandomReductionOrder,
    DroppedTailBlock, LowPrecisionAccumulation, HalfPrecisionSquares, RoundedForwardFp32,
    EpsOutsideSqrt, OnePlusWeight, WrongOutputDtype, NoShapeGuard, MutatesInput, WritesBesideInput,
    EmptyBatchCrash, BatchWideNonfiniteGuard, SilentDtypeCast,
    LowPrecisionGradientSum, SmallBatchBackward, AtomicWeightGradient,
)


# --- Correct backends: the suites must pass them ------------------------------------------------------------


class LaneOrderRMSNorm(NativeRMSNormOp):
    """A correct RMSNorm with another fixed reduction order than the native tree: 64 lanes summed left to
    right, as a GPU block would. Batch-invariant by construction (elementwise adds whose order depends on
    the dim alone); the suites must pass it, or they fail kernels for rounding rather than for breaking
    the contract."""

    name = "lane_order"

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        x32 = x.float()
        return _normalise(x32, weight, eps, sum_of_squares_by_lanes(x32))


def make_correct_backend() -> NativeRMSNormOp:
    """A zero-argument factory, for `--backend=module:factory`."""
    return NativeRMSNormOp()


correct_instance = NativeRMSNormOp()


class CudaOnly(NativeRMSNormOp):
    """Declares CUDA only: on a CPU it must be skipped with that reason, never run and never passed."""

    name = "cuda_only"
    devices = ("cuda",)


cuda_only = CudaOnly()
