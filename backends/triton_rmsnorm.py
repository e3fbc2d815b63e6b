"""RMSNorm in Triton, in the contract's canonical reduction order: forward, backward (dx and a deterministic dw
without atomics), the fused residual add and the weight variants, bitwise equal to the native reference.

Each reduction is written as explicit pairwise adds (reshape, then a sum over an axis of two), so its order is
the contract's whatever tree Triton's own reductions use; divisions (one reciprocal of the rms per row, which
the elements multiply by) and square roots are correctly rounded and no multiply-add is fused (kernels are
compiled with ``enable_fp_fusion=False``). Every compile-time choice is a function of (dim, dtype) alone, so
one binary serves every batch.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, NamedTuple

import torch

from ..contract.canonical_order import GROUP, padded_width
from ..contract.inputs import (
    CONTRACT_DTYPE_PAIRS,
    SUPPORTED_DTYPES,
    check_in_place,
    check_inputs,
    check_no_gradient_in_place,
    check_residual,
    check_unweighted_inputs,
)

# Triton decides at decoration time whether @triton.jit kernels compile or run in its interpreter, so the
# environment as it was at import is what counts for this process.
_INTERPRETED: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"

try:
    import numpy as np  # Triton's interpreter runs on it
    import triton
    import triton.language as tl
except ImportError as exc:  # the module must import without triton; unavailable_reason reports it
    np = triton = tl = None
    _IMPORT_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    _IMPORT_ERROR = None

# Every access that the kernels vectorise is 16 bytes wide; inputs whose base is not 16-byte aligned are
# copied (see _rows_2d), so the alignment the binary assumes is always true.
_ALIGN_BYTES = 16
_INT32_LIMIT = 2**31

# The backward reduces dw over the rows in the canonical order: each program owns a subtree of the tree over
# the rows (groups of eight rows at a stride of 1/8 of the padded batch) and writes one fp32 partial row; at
# least 32 rows per program keep the partial rows' traffic near 4% of the inputs' at bf16.
DW_ROWS_PER_PROGRAM = 32
# dw's partial rows are added in passes of at most this many rows per output row.
_DW_PASS = 64
# On the GPU every pass's tile is _DW_PASS rows, those past the pass's rows read as +0.0: the halving tree over a
# power of two padded with +0.0 rows is the tree over the rows themselves, a -0.0 aside, which the final + 0.0 makes
# +0.0 either way. One binary of dw's kernel then serves every batch of a dim class and dtype, not one per power
# of two of partial rows: a cold Triton run on an H200 built 61 of them in its workers, none prepared. The
# interpreter keeps the pass's own row count: it pays for every element of a tile, masked or not.
_DW_FULL_PASS = not _INTERPRETED
# Shared memory the backward's pipeline may take for its tiles in flight: (stages - 1) iterations of `unroll` tiles
# of x and dy (Triton 3.6 for sm_90: 133,120 bytes for 4 tiles of 4096 bf16 at 3 stages, 131,072 of them the tiles;
# benchmarks/triton_sass.py). A block on an H100 or H200 may have 227 KB; fewer tiles an iteration where it would
# not fit (fp32 rows of 4096, say), rather than a launch that fails.
_STAGED_BYTES = 192 * 1024


class LaunchConfig(NamedTuple):
    """The compile-time shape of a launch; a function of (dim, dtype, backward, interpreted) only."""

    groups: int  # groups of GROUP columns per tile: a power of two
    rows: int  # forward: rows per program; backward: rows (leaves of dw's tree) per tile, a power of two
    tiles: int  # tiles per row: 1 keeps a row whole in registers; more loops over strided tiles of it
    vec: int  # elements per 16-byte access; every row start is a multiple of it (else the input is copied)
    num_warps: int
    subtree: int = 0  # backward: rows of dw's tree per program, a power of two >= 32 (0 in the forward)
    strided: bool = False  # backward: tile t holds leaves t, t + T, ... of the subtree (see the kernel)
    prefetch: bool = False  # backward: the next tile's rows are loaded before this tile is reduced
    joint: bool = False  # backward: a row's sum of squares and dot product are reduced together
    flat: bool = False  # tile loaded as [rows, columns] and reshaped (backward: with prefetch; forward: whole rows)
    maxnreg: int = 0  # backward: registers a thread at most (0: the compiler's choice)
    stages: int = 0  # backward: tiles in flight through Triton's software pipeline (0: prefetch or none)
    unroll: int = 1  # backward, pipelined: tiles an iteration, a power of two
    row_select: bool = False  # backward, GPU: a padding row's dw products zeroed through its inv (see _bwd_leaf)
    split_rows: bool = False  # backward, strided: a tile's rows as a loop-invariant part plus one scalar (_bwd_rows)


class _Tuning(NamedTuple):
    tile: int  # elements per tile that the rows-per-tile choice aims at
    max_rows: int  # cap on rows per tile for tiny dims
    max_block: int  # widest padded row kept whole in one tile; wider rows loop over tiles of loop_block
    loop_block: int
    warp_elems: int  # elements per warp that the warp count aims at
    max_warps: int
    subtree_elems: int = 0  # backward: elements of dw's subtree per program that it aims at (0: subtree_rows)
    min_warps: int = 4
    strided: bool = False  # backward: strided tiles (GPU only: the interpreter keeps one tile per subtree)
    subtree_rows: int = DW_ROWS_PER_PROGRAM  # backward: rows of dw's subtree per program, at least
    prefetch: bool = False  # backward: load tile t + 1 before reducing tile t (GPU only)
    joint: bool = False  # backward: both row sums through one tree of pairs (GPU only)
    flat: bool = False  # tiles loaded as [rows, columns] (backward: with prefetch, GPU only; forward: whole rows)
    maxnreg: int = 0  # backward: a cap on registers a thread (GPU only; 0: none)
    stages: int = 0  # backward: the loop over tiles pipelined this deep, loads staged in shared memory (GPU only)
    staged_rows: int = 2  # backward: the pipeline only where a tile holds at least this many rows (else prefetch)
    unroll: int = 1  # backward, pipelined: tiles an iteration, a power of two (GPU only)
    row_unroll: int = 0  # backward, pipelined: tiles an iteration where a tile is one row (0: unroll)
    row_stages: int = 0  # backward, pipelined: stages at most where a tile is loop_block columns of one row (0: stages)
    unroll_aligned_only: bool = False  # backward: one tile an iteration where accesses are one element (vec 1)
    row_select: bool = False  # backward (GPU): a padding row's dw products zeroed through its inv (see _bwd_leaf)
    split_rows: bool = False  # backward (GPU, strided): a tile's rows as a loop-invariant part plus one scalar


# GPU forward, from the sweep of benchmarks/forward_tuning.py on an H200 with the reciprocal (bf16, fraction of
# a device copy): 1024 elements a program and one warp per 1024 elements,
# as few as one, ran the forward / fused add at 0.887 / 0.926 at 2097152 x 128 (8 rows a program, 1 warp),
# against 0.728 / 0.806 with the previous 16 rows and 4 warps; at 65536 x 4096 both are one row and 4 warps
# (0.983 / 0.990). More rows a program at 128 were slower (32 rows: 0.474).
#
# Whole rows are loaded as [rows, columns] and reshaped (flat): Triton 3.6 laid the 3-D tile [rows, groups, 8] out
# with eight rows across a warp's lanes and passed each row's sum through shared memory, which held the forward at
# 2097152 x 128 to 0.885 of a copy with L1 99 % busy (Nsight Compute, on an H200); the 2-D tile is
# laid out a row across 16 lanes, its tree in shuffles (Triton 3.6 and 3.9 for sm_90, compiled off the GPU).
_GPU_FWD = _Tuning(tile=1024, max_rows=128, max_block=16384, loop_block=4096, warp_elems=1024, max_warps=16,
                   min_warps=1, flat=True)
# The fused add (the same kernel with a residual: twice the bytes a row) from the same sweep: 4 rows a program and one
# warp at 2097152 x 128 ran at 1.006 of a copy against 0.926 with the forward's 8 rows (1.009 in a bench run;
# reports/gpu/bench.md has the current figures). Rows narrower than 1024 elements get half the forward's rows a program;
# wider ones its configuration (one row a program, the same warps).
_GPU_FUSED = _GPU_FWD._replace(tile=512)
# GPU backward, from benchmarks/triton_tuning.py --backward-variants on an H200 (bf16, fraction of a device copy
# of dx + dw): the next tile's rows loaded before this tile is reduced (prefetch), the
# subtree's lowest levels added element by element across tiles (strided), a row's two sums through one tree
# (joint), tiles loaded as [rows, columns] (flat) and 32 rows a program at 4096: 0.37 -> 0.615 at 65536 x 4096
# (one row a tile, 8 warps, 255 registers and no spill; 64 rows a program spilled) and 0.44 -> 0.68 at
# 2097152 x 128 (8 rows a tile, 4 warps; 16 rows: 0.48, 32 rows and 8 warps: 0.19). Wider rows take the
# two-kernel path (row statistics first).
#
# Where a tile holds several rows, the loop is Triton's software pipeline three stages deep instead (loads staged
# in shared memory through cp.async): 0.689 -> 0.755 at 2097152 x 128 (96 registers
# instead of 103; 2 stages 0.614, 4 stages 0.717). At 4096 (one row a tile, 242 registers either way) every
# pipelined variant was slower than the prefetch: 3 stages 0.589, 4 stages 0.601 against 0.613, and 16 or 32 warps
# a row 0.25-0.45.
#
# With four tiles an iteration of the pipelined loop (unroll: the stack of finished subtrees kept once an iteration,
# not once a tile) the pipeline is ahead at both shapes and is the loop everywhere:
# 0.614 (prefetch) -> 0.676 at 65536 x 4096 and 0.756 -> 0.814 at 2097152 x 128; two tiles 0.678 / 0.721, eight
# with two stages 0.648 / 0.733, four with two stages 0.593 / 0.736. fp32 at 4096 takes two tiles (_STAGED_BYTES).
# Where a tile is one row (dims from 1024 on) two tiles an iteration ran as fast as four (0.678 / 0.676 in one
# sweep, 0.677 / 0.677 in the next) and compile in half the time (0.53 against 0.99 CPU-seconds at 4096 for sm_90,
# benchmarks/triton_sass.py): a cold conformance run compiles the backward for each padded width, vector width and
# dtype it draws. Dims that are no multiple of 16 bytes (one-element accesses: no engine's hidden or head dim, most
# of a conformance run's draws) take one tile an iteration: their binaries compile in a third of the time where a
# tile holds several rows (0.45-0.59 against 1.14-1.42 CPU-s at 100 and 129) and in 0.55-0.65 of it where it is
# one row (0.35-0.57 against 0.60-1.00 at 1001 and 4095; bf16 and fp32,
# `benchmarks/triton_sass.py --dims 100,129,1001,4095 --fields '{}' --fields '{"unroll_aligned_only": false}'`).
#
# A padding row's dw products are zeroed through its inv (row_select: one select a row) rather than product by product
# (one an element), and a power-of-two dim divides as a multiply (_per_dim): with Triton 3.6 for sm_90 off the GPU
# (benchmarks/triton_sass.py), the main loop went from 654 to 594 SASS instructions a tile at 4096 (254 -> 250
# registers) and from 300 to 254 at 128 (96 registers either way: five blocks a multiprocessor kept). The rows of a
# strided tile as a loop-invariant part plus one scalar (split_rows) take 254 -> 225 at 128 but 119 registers, a
# block fewer: it ran slower on an H200 (0.818 against 0.850 at 2097152 x 128), so not the default.
#
# Where a tile is one row, more of them are in flight: the block holds 8 warps alone on its multiprocessor (250
# registers a thread), and each stage more hides more of the loads' latency. On an H200 (benchmarks/
# triton_tuning.py --backward-variants, bf16, fraction of a copy): at 65536 x 4096 3 / 4 / 5 / 6 stages 0.690 /
# 0.698 / 0.707 / 0.718 (166 KB of shared memory at 6, 253 registers, no spill); at 2097152 x 128 (eight rows a
# tile, five blocks a multiprocessor at 3 stages) more stages cost blocks: 0.850 / 0.734 / 0.634 / 0.517. So up to
# six stages where a tile is 4096 columns of one row (dims from 2049 on: a block alone on its multiprocessor), as
# many as fit beside its two tiles an iteration (fp32: four; Triton 3.6 off the GPU: 197,632 bytes of shared memory,
# 255 registers, no spill), three elsewhere: narrower one-row tiles hold several blocks a multiprocessor, which
# more stages' shared memory would cost (at 1024, 82 KB a block at six against 33 KB), and one-element accesses keep
# their short compile (no engine's dim; most of a conformance run's draws). The stages change no operation or order.
_GPU_BWD = _Tuning(tile=1024, max_rows=64, max_block=4096, loop_block=4096, warp_elems=512,
                   max_warps=16, subtree_elems=1 << 13, strided=True, joint=True, flat=True,
                   stages=3, staged_rows=1, unroll=4, row_unroll=2, row_stages=6, unroll_aligned_only=True,
                   row_select=True)
# The interpreter pays a fixed Python cost per operation and per program, and numpy's cost per element of the
# whole tile, masked or not: a forward tile of 2^15 elements (8 rows of 4096, 256 of 128) made a one-row call
# 7 ms instead of 28 with 2^18 and a 2^18-element call 45 ms instead of 29; the suites' calls are mostly small
# (CI's Triton threshold tests, bf16: 132 s -> 48 s). In the backward, subtrees of up to 4096 rows in one tile.
_INTERP_FWD = _Tuning(tile=1 << 15, max_rows=4096, max_block=1 << 20, loop_block=1 << 16, warp_elems=512,
                      max_warps=4)
_INTERP_BWD = _Tuning(tile=1 << 18, max_rows=4096, max_block=1 << 16, loop_block=1 << 16, warp_elems=512,
                      max_warps=4, subtree_elems=1 << 18, subtree_rows=64)


@functools.cache
def launch_config(dim: int, dtype: torch.dtype, *, backward: bool = False, fused_add: bool = False,
                  interpreted: bool = _INTERPRETED) -> LaunchConfig:
    """The configuration for rows of ``dim`` elements of ``dtype`` (of the forward kernel with a residual where
    ``fused_add``): never a function of the row count."""
    tuning = {(True, True): _INTERP_BWD, (True, False): _INTERP_FWD,
              (False, True): _GPU_BWD, (False, False): _GPU_FUSED if fused_add else _GPU_FWD}[interpreted, backward]
    width = padded_width(dim)
    block = width if width <= tuning.max_block else tuning.loop_block
    rows = min(max(tuning.tile // block, 1), tuning.max_rows)
    subtree = 0
    if backward:
        subtree = tuning.subtree_rows
        if tuning.subtree_elems:
            subtree = min(max(1 << (max(tuning.subtree_elems // block, 1).bit_length() - 1), subtree), 4096)
        # at most six levels of the subtree are left to the stack of finished subtrees (see _push)
        rows = min(max(rows, subtree // 64), subtree)
    # 16-byte accesses where the dim is a multiple of them (every engine's hidden and head dims are), else one
    # element: two vector widths, not four, so a padded width has two binaries (see dim_constexpr).
    per_access = _ALIGN_BYTES // torch.empty((), dtype=dtype).element_size()
    vec = per_access if dim % per_access == 0 else 1
    num_warps = min(max(rows * block // tuning.warp_elems, tuning.min_warps), tuning.max_warps)
    gpu_backward = backward and not interpreted
    stages = tuning.stages if gpu_backward and rows >= tuning.staged_rows else 0
    unroll = (tuning.row_unroll or tuning.unroll) if rows == 1 else tuning.unroll
    unroll = unroll if stages and subtree >= unroll * rows and (vec > 1 or not tuning.unroll_aligned_only) else 1
    tile_bytes = rows * block * 2 * _ALIGN_BYTES // per_access  # a tile's x and dy
    while unroll > 1 and (stages - 1) * unroll * tile_bytes > _STAGED_BYTES:
        unroll //= 2
    if stages and rows == 1 and block == tuning.loop_block and vec > 1 and tuning.row_stages:
        # as many stages as fit beside the unroll, up to row_stages (four for fp32)
        stages = max(stages, min(tuning.row_stages, 1 + _STAGED_BYTES // (unroll * tile_bytes)))
    tiles = width // block
    flat = gpu_backward and tuning.flat if backward else tuning.flat and tiles == 1
    return LaunchConfig(groups=block // GROUP, rows=rows, tiles=tiles, vec=vec, num_warps=num_warps,
                        subtree=subtree, strided=gpu_backward and tuning.strided,
                        prefetch=gpu_backward and tuning.prefetch and not stages, joint=gpu_backward and tuning.joint,
                        flat=flat, maxnreg=tuning.maxnreg if gpu_backward else 0,
                        stages=stages, unroll=unroll, row_select=gpu_backward and tuning.row_select,
                        split_rows=gpu_backward and tuning.strided and tuning.split_rows)


def dim_constexpr(dim: int) -> int:
    """The kernels' DIM: ``dim`` where it is its own padded width (a power of two, at least GROUP), else 0.

    A kernel is compiled per value of its constexprs: for sm_90, 0.4 s for the forward and 0.7 s for the backward
    (Triton 3.9, off the GPU). With the dim itself a constexpr, every new dim was a new binary of each kernel, and a
    conformance run draws hundreds of dims. The kernels take the dim at runtime too (``n_cols``), so the other dims
    of one padded width and one vector width (16 bytes or one element: launch_config) share a binary. A power of
    two keeps its own binary with the dim a constant: the shapes that matter for speed (128, 4096, 8192) compile to
    the same PTX as before. The arithmetic is the same either way, and so are the bits.
    """
    return dim if dim == padded_width(dim) else 0


def dw_programs(n_rows: int, subtree: int = DW_ROWS_PER_PROGRAM) -> int:
    """Programs of the backward: one per subtree of ``subtree`` rows of the padded batch."""
    return max(padded_width(n_rows) // subtree, 1)


if triton is not None:
    # Kernel parameters carry no annotations (hence the noqa marks): Triton reads an annotation as a type or
    # specialisation directive.
    #
    # The interpreter converts bf16 with a general bit-level routine that is slow and truncates instead of
    # rounding to nearest even; under it the kernels convert bf16 themselves, exactly as torch does.
    _EMULATE_BF16 = tl.constexpr(_INTERPRETED)

    def _device_function(fn: Any) -> Any:
        """A helper the kernels call: jitted when compiled, a plain function under the interpreter, which
        otherwise re-patches triton.language on every call of a jitted helper (a fifth of its run time)."""
        return fn if _INTERPRETED else triton.jit(fn)

    @_device_function
    def _load_f32(ptrs, mask):  # noqa: ANN001
        """Load and widen to fp32; masked lanes read as +0.0."""
        if _EMULATE_BF16 and ptrs.dtype.element_ty == tl.bfloat16:
            bits = tl.load(ptrs.to(tl.pointer_type(tl.uint16)), mask=mask, other=0)
            return (bits.to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        else:
            return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)

    @_device_function
    def _bf16_bits(value):  # noqa: ANN001
        """fp32 ``value`` rounded to bf16 (to nearest even), as the bf16 bit pattern in a uint32."""
        bits = value.to(tl.uint32, bitcast=True)
        # Wrap-around only happens for NaN bit patterns, which the where replaces; the interpreter would
        # otherwise check every add for overflow at a cost of several passes over the tile.
        rounding = tl.add((bits >> 16) & 1, 0x7FFF, sanitize_overflow=False)
        rounded = tl.add(bits, rounding, sanitize_overflow=False) >> 16
        return tl.where(value != value, 0x7FC0, rounded)  # torch's quiet NaN

    @_device_function
    def _store_f32(ptrs, value, mask):  # noqa: ANN001
        """Round fp32 ``value`` to the pointee dtype (to nearest even) and store it."""
        if _EMULATE_BF16 and ptrs.dtype.element_ty == tl.bfloat16:
            tl.store(ptrs.to(tl.pointer_type(tl.uint16)), _bf16_bits(value).to(tl.uint16), mask=mask)
        else:
            tl.store(ptrs, value.to(ptrs.dtype.element_ty), mask=mask)

    @_device_function
    def _round_f32(value, ptrs):  # noqa: ANN001
        """fp32 ``value`` rounded once to the pointee dtype of ``ptrs``, widened back to fp32."""
        if ptrs.dtype.element_ty == tl.float32:
            return value
        elif _EMULATE_BF16 and ptrs.dtype.element_ty == tl.bfloat16:
            return (_bf16_bits(value) << 16).to(tl.float32, bitcast=True)
        else:
            return value.to(ptrs.dtype.element_ty).to(tl.float32)

    if _INTERPRETED:
        _SUM_COMBINE = getattr(tl.standard, "_sum_combine", None)

        def _sum(x, axis):  # noqa: ANN001
            """tl.sum without its jit wrapper, whose every call re-patches triton.language in the interpreter."""
            if _SUM_COMBINE is None:
                return tl.sum(x, axis=axis)
            return tl.reduce(x, axis, _SUM_COMBINE)
    else:

        @triton.jit
        def _sum(x, axis: tl.constexpr):  # noqa: ANN001
            return tl.sum(x, axis=axis)

    # Every tree below sums over an axis of length two only: one fp32 add, whatever order Triton's reduction
    # would pick for a longer axis. The shapes are compile-time constants, so the loops unroll.

    @_device_function
    def _group_sums(v):  # noqa: ANN001
        """[A, G, 8] -> [A, G]: each group halved, v[0:4] + v[4:8], then [0:2] + [2:4], then [0] + [1]."""
        t = _sum(tl.reshape(v, [v.shape[0], v.shape[1], 2, 4]), 2)
        t = _sum(tl.reshape(t, [v.shape[0], v.shape[1], 2, 2]), 2)
        return _sum(t, 2)

    @_device_function
    def _halve(t):  # noqa: ANN001
        """[A, N] -> [A], N a power of two: t[:, 0:N/2] + t[:, N/2:N], repeated until one column is left."""
        for _ in tl.static_range(20):
            if t.shape[1] > 1:
                t = _sum(tl.reshape(t, [t.shape[0], 2, t.shape[1] // 2]), 1)
        return tl.reshape(t, [t.shape[0]])

    @_device_function
    def _adjacent(t):  # noqa: ANN001
        """[L, G, 8] -> [G, 8], L a power of two: pairs (2i, 2i+1) first, then pairs of pairs."""
        for _ in tl.static_range(13):  # up to 4096 leaves
            if t.shape[0] > 1:
                t = _sum(tl.reshape(t, [t.shape[0] // 2, 2, t.shape[1], t.shape[2]]), 1)
        return tl.reshape(t, [t.shape[1], t.shape[2]])

    @_device_function
    def _pair_sums(v):  # noqa: ANN001
        """[A, G, 8, 2] -> [A, 2]: _halve(_group_sums(.)) of v[..., 0] and of v[..., 1] at once, so that each
        level's exchange between threads carries both sums (the same adds, in the same order)."""
        t = _sum(tl.reshape(v, [v.shape[0], v.shape[1], 2, 4, 2]), 2)
        t = _sum(tl.reshape(t, [v.shape[0], v.shape[1], 2, 2, 2]), 2)
        t = _sum(t, 2)
        for _ in tl.static_range(20):
            if t.shape[1] > 1:
                t = _sum(tl.reshape(t, [t.shape[0], 2, t.shape[1] // 2, 2]), 1)
        return tl.reshape(t, [t.shape[0], 2])

    @_device_function
    def _per_dim(v, dim, DIM: tl.constexpr):  # noqa: ANN001
        """v / dim correctly rounded (dim exact in fp32). Where the dim is a power of two (DIM > 0: a binary of its
        own), v times 1 / DIM, which is exact: the same real number as the quotient, so the same rounding, in one
        multiply where a correctly rounded division takes a dozen instructions and a slow path."""
        if DIM > 0:
            return v * (1.0 / DIM)
        else:
            return tl.div_rn(v, tl.full(v.shape, dim, tl.float32))

    @_device_function
    def _rms(sum_sq, eps, dim, DIM: tl.constexpr):  # noqa: ANN001
        """sqrt(sum_sq / dim + eps), each step correctly rounded (dim a constexpr or a runtime scalar: exact in
        fp32 either way; DIM as in _per_dim)."""
        return tl.sqrt_rn(_per_dim(sum_sq, dim, DIM) + eps)

    @_device_function
    def _inv(rms):  # noqa: ANN001
        """1 / rms correctly rounded: the canonical order's one division per row; elements multiply by it."""
        return tl.div_rn(tl.full(rms.shape, 1.0, tl.float32), rms)

    @_device_function
    def _push(c, k, s0, s1, s2, s3, s4, s5, LEVELS: tl.constexpr, BIT: tl.constexpr = 1):  # noqa: ANN001
        """Add leaf ``c``, the k-th in the order of the tree's levels, to a binary-counter stack of finished
        subtrees (slot i holds 2**i leaves). After the last leaf (k = 2**LEVELS - 1) ``c`` is the total.

        As in incrementing a binary counter: where k's bit BIT is 0, ``c`` waits in slot s0; where it is 1, it
        joins s0's subtree and the sum carries on to the next slot, which this helper adds by calling itself
        one level up, on the slots above s0 (s5 repeated to fill the sixth, which LEVELS never reaches). The
        levels are compile-time constants, so each call is its own inlined copy."""
        if LEVELS > 0:
            if (k & BIT) == 0:
                s0 = c
            else:
                c, s1, s2, s3, s4, s5, _ = _push(s0 + c, k, s1, s2, s3, s4, s5, s5, LEVELS - 1, BIT * 2)
        return c, s0, s1, s2, s3, s4, s5

    @_device_function
    def _bitrev(v, BITS: tl.constexpr):  # noqa: ANN001
        """The low BITS bits of v in reverse order."""
        r = v & 0
        for i in tl.static_range(BITS):
            r = (r << 1) | ((v >> i) & 1)
        return r

    @_device_function
    def _residual_sum(z, r_ptrs, ro_ptr, mask):  # noqa: ANN001
        """The row the fused residual add normalises: x + residual, rounded once to the residual's dtype."""
        return _round_f32(z + _load_f32(r_ptrs, mask), ro_ptr)

    @_device_function
    def _weighted(y, w_ptr, cols, col_mask, weight_mode):  # noqa: ANN001
        """y times the weight: weight_mode 0 none, 1 w, 2 (1 + w) formed in fp32. The caller applies it after the
        reduction: loaded first, the weight stays live through it, costing registers. The mode is a runtime
        argument, one branch taken by every thread: the three modes share a binary (see _rms_norm_fwd_kernel)."""
        if weight_mode == 1:
            y = y * _load_f32(w_ptr + cols, col_mask)[None, :, :]
        elif weight_mode == 2:
            y = y * (1.0 + _load_f32(w_ptr + cols, col_mask))[None, :, :]
        return y

    @_device_function
    def _fwd_whole_rows(
        x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, x_rows, r_rows, y_rows, row_mask, groups, lanes, eps, dim,  # noqa: ANN001
        weight_mode, RESIDUAL: tl.constexpr, DIM: tl.constexpr,  # noqa: ANN001
    ):
        """The forward of rows that fit one tile: each row is read once and held in registers."""
        cols = (groups * 8)[:, None] + lanes[None, :]
        col_mask = cols < dim
        mask = row_mask[:, None, None] & col_mask[None, :, :]
        z = _load_f32(x_ptr + x_rows[:, None, None] + cols[None, :, :], mask)
        if RESIDUAL:
            z = _residual_sum(z, r_ptr + r_rows[:, None, None] + cols[None, :, :], ro_ptr, mask)
            _store_f32(ro_ptr + y_rows[:, None, None] + cols[None, :, :], z, mask)
        inv = _inv(_rms(_halve(_group_sums(z * z)), eps, dim, DIM))
        y = _weighted(z * inv[:, None, None], w_ptr, cols, col_mask, weight_mode)
        _store_f32(y_ptr + y_rows[:, None, None] + cols[None, :, :], y, mask)

    @_device_function
    def _fwd_flat_rows(
        x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, x_rows, r_rows, y_rows, row_mask, groups, eps, dim,  # noqa: ANN001
        weight_mode, RESIDUAL: tl.constexpr, DIM: tl.constexpr,  # noqa: ANN001
    ):
        """_fwd_whole_rows with the tile loaded and stored as [rows, columns] and reshaped to [rows, groups, 8] for
        the row's tree only. The elementwise steps are the same operations on the same elements (z * inv, then the
        weight), so the bits are too."""
        cols = tl.arange(0, groups.shape[0] * 8)
        col_mask = cols < dim
        mask = row_mask[:, None] & col_mask[None, :]
        z = _load_f32(x_ptr + x_rows[:, None] + cols[None, :], mask)
        if RESIDUAL:
            z = _residual_sum(z, r_ptr + r_rows[:, None] + cols[None, :], ro_ptr, mask)
            _store_f32(ro_ptr + y_rows[:, None] + cols[None, :], z, mask)
        z3 = tl.reshape(z, [z.shape[0], groups.shape[0], 8])
        inv = _inv(_rms(_halve(_group_sums(z3 * z3)), eps, dim, DIM))
        y = z * inv[:, None]
        if weight_mode == 1:
            y = y * _load_f32(w_ptr + cols, col_mask)[None, :]
        elif weight_mode == 2:
            y = y * (1.0 + _load_f32(w_ptr + cols, col_mask))[None, :]
        _store_f32(y_ptr + y_rows[:, None] + cols[None, :], y, mask)

    @_device_function
    def _fwd_tiled_rows(
        x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, x_rows, r_rows, y_rows, row_mask, groups, lanes, eps, dim,  # noqa: ANN001
        weight_mode, ROWS: tl.constexpr, TILES: tl.constexpr, RESIDUAL: tl.constexpr, DIM: tl.constexpr,  # noqa: ANN001
    ):
        """The forward of rows too wide for registers: tile k holds groups k, k + TILES, k + 2*TILES, ..., so
        that its own tree is the first levels of the row's; the TILES results are then halved in turn. A
        second pass reads the row again (from L2 at these sizes)."""
        tiles = tl.arange(0, TILES)
        partial = tl.zeros([ROWS, TILES], tl.float32)
        for k in range(TILES):
            cols = ((groups * TILES + k) * 8)[:, None] + lanes[None, :]
            mask = row_mask[:, None, None] & (cols < dim)[None, :, :]
            z = _load_f32(x_ptr + x_rows[:, None, None] + cols[None, :, :], mask)
            if RESIDUAL:
                z = _residual_sum(z, r_ptr + r_rows[:, None, None] + cols[None, :, :], ro_ptr, mask)
                _store_f32(ro_ptr + y_rows[:, None, None] + cols[None, :, :], z, mask)
            partial = tl.where(tiles[None, :] == k, _halve(_group_sums(z * z))[:, None], partial)
        inv = _inv(_rms(_halve(partial), eps, dim, DIM))
        for k in range(TILES):
            cols = ((groups * TILES + k) * 8)[:, None] + lanes[None, :]
            col_mask = cols < dim
            mask = row_mask[:, None, None] & col_mask[None, :, :]
            z = _load_f32(x_ptr + x_rows[:, None, None] + cols[None, :, :], mask)
            if RESIDUAL:  # rounded again rather than read back: other threads stored it
                z = _residual_sum(z, r_ptr + r_rows[:, None, None] + cols[None, :, :], ro_ptr, mask)
            y = _weighted(z * inv[:, None, None], w_ptr, cols, col_mask, weight_mode)
            _store_f32(y_ptr + y_rows[:, None, None] + cols[None, :, :], y, mask)

    @triton.jit(do_not_specialize=["n_rows", "x_row_stride", "r_row_stride", "eps", "n_cols", "weight_mode"])
    def _rms_norm_fwd_kernel(
        x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, n_rows, x_row_stride, r_row_stride, eps, n_cols,  # noqa: ANN001
        weight_mode, DIM: tl.constexpr, GROUPS: tl.constexpr, ROWS: tl.constexpr, TILES: tl.constexpr,  # noqa: ANN001
        VEC: tl.constexpr, RESIDUAL: tl.constexpr, FLAT: tl.constexpr,
    ):
        """y for ROWS rows, y contiguous. RESIDUAL: the row is x + residual, rounded to the residual's dtype and
        stored to ro_ptr first. weight_mode: 0 none, 1 w, 2 (1 + w) formed in fp32; a runtime argument, so that
        the plain, offset and unweighted forwards share a binary (a constexpr, it made 139 of a cold conformance
        run's 428 forward binaries on an H200). DIM: the dim where it is a power of two (a
        binary of its own), else 0 and the dim is n_cols (see dim_constexpr). FLAT (whole rows only): the tile
        loaded as [ROWS, GROUPS * 8] (see _fwd_flat_rows)."""
        # n_cols is a multiple of VEC (the caller sees to it); written so, the masks stay VEC columns wide.
        dim = DIM if DIM > 0 else (n_cols // VEC) * VEC
        rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
        row_mask = rows < n_rows
        x_rows = rows * x_row_stride
        r_rows = rows * r_row_stride
        if VEC > 1:  # the caller guarantees it: it lets the loads be 16 bytes wide
            x_rows = tl.multiple_of(x_rows, VEC)
            r_rows = tl.multiple_of(r_rows, VEC)
        y_rows = rows * dim
        groups = tl.arange(0, GROUPS)
        lanes = tl.arange(0, 8)
        if FLAT:
            _fwd_flat_rows(x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, x_rows, r_rows, y_rows, row_mask, groups, eps, dim,
                           weight_mode, RESIDUAL, DIM)
        elif TILES == 1:
            _fwd_whole_rows(x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, x_rows, r_rows, y_rows, row_mask, groups, lanes, eps,
                            dim, weight_mode, RESIDUAL, DIM)
        else:
            _fwd_tiled_rows(x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, x_rows, r_rows, y_rows, row_mask, groups, lanes, eps,
                            dim, weight_mode, ROWS, TILES, RESIDUAL, DIM)

    @triton.jit(do_not_specialize=["n_rows", "x_row_stride", "g_row_stride", "eps", "n_cols"])
    def _rms_norm_stats_kernel(
        x_ptr, w_ptr, g_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride, eps, n_cols,  # noqa: ANN001
        DIM: tl.constexpr, GROUPS: tl.constexpr, TILES: tl.constexpr, VEC: tl.constexpr,
    ):
        """For rows too wide for one tile: inv = 1 / rms and c = (dot / dim) / (rms * rms) of one row, in the
        canonical order (strided tiles as in the forward), to stats_ptr[2 * row] and [2 * row + 1]. DIM and n_cols
        as in the forward."""
        dim = DIM if DIM > 0 else (n_cols // VEC) * VEC
        row = tl.program_id(0).to(tl.int64)
        x_row = row * x_row_stride
        g_row = row * g_row_stride
        if VEC > 1:
            x_row = tl.multiple_of(x_row, VEC)
            g_row = tl.multiple_of(g_row, VEC)
        groups = tl.arange(0, GROUPS)
        lanes = tl.arange(0, 8)
        tiles = tl.arange(0, TILES)
        sq = tl.zeros([1, TILES], tl.float32)
        dot = tl.zeros([1, TILES], tl.float32)
        for k in range(TILES):
            cols = ((groups * TILES + k) * 8)[:, None] + lanes[None, :]
            col_mask = cols < dim
            x = _load_f32(x_ptr + x_row + cols, col_mask)[None, :, :]
            gw = (_load_f32(g_ptr + g_row + cols, col_mask) * _load_f32(w_ptr + cols, col_mask))[None, :, :]
            sq = tl.where(tiles[None, :] == k, _halve(_group_sums(x * x))[:, None], sq)
            dot = tl.where(tiles[None, :] == k, _halve(_group_sums(gw * x))[:, None], dot)
        rms = _rms(_halve(sq), eps, dim, DIM)
        c = tl.div_rn(_per_dim(_halve(dot), dim, DIM), rms * rms)
        one = tl.arange(0, 1)
        tl.store(stats_ptr + 2 * row + one, _inv(rms))
        tl.store(stats_ptr + 2 * row + 1 + one, c)

    @_device_function
    def _leaf_offset(leaf, n_programs, MBITS: tl.constexpr):  # noqa: ANN001
        """Leaf k's row less 8 p: 8 * n_programs * bitrev(k >> 3) + bitrev(k & 7). Each bit of k moves to a bit of its
        own, so the offset of k | k' (no bit in common) is the offset of k plus that of k'."""
        return 8 * n_programs * _bitrev(leaf >> 3, MBITS) + _bitrev(leaf & 7, 3)

    @_device_function
    def _bwd_rows(p, t, n_programs, J: tl.constexpr, LEAVES: tl.constexpr, TILES: tl.constexpr,  # noqa: ANN001
                  MBITS: tl.constexpr, STRIDED: tl.constexpr, SPLIT_ROWS: tl.constexpr = False):
        """The rows of tile t of program p's subtree: leaf k is row 8 * (p + n_programs * bitrev(k >> 3)) +
        bitrev(k & 7). STRIDED: tile t holds leaves t, t + TILES, t + 2 * TILES, ...; else t * LEAVES on.
        SPLIT_ROWS (strided; the launch config's split_rows): leaf t + TILES * J is t | TILES * J (t < TILES, a power
        of two), so its row is the part of J, the same in every tile (out of the loop), plus the part of t, one
        scalar a tile: the same rows. (A t of TILES, the prefetching loop's look past its last tile, gives other
        rows, all masked off there.)"""
        if STRIDED and SPLIT_ROWS:
            return (8 * p + _leaf_offset(TILES * J, n_programs, MBITS)) + _leaf_offset(t, n_programs, MBITS)
        else:
            return 8 * p + _leaf_offset(t + TILES * J if STRIDED else t * LEAVES + J, n_programs, MBITS)

    @_device_function
    def _rows_by_cols(r, c, FLAT: tl.constexpr):  # noqa: ANN001
        """r[:, None] + c[None, :] (FLAT: c is [N]) or r[:, None, None] + c (c is [1, G, 8])."""
        return r[:, None] + c[None, :] if FLAT else r[:, None, None] + c

    @_device_function
    def _mask_by_cols(r, c, FLAT: tl.constexpr):  # noqa: ANN001
        """_rows_by_cols for masks: & in place of +."""
        return r[:, None] & c[None, :] if FLAT else r[:, None, None] & c

    @_device_function
    def _bwd_leaf(
        x, g, w, rows, row_mask, mask, cols, dx_ptr, stats_ptr, eps, dim,  # noqa: ANN001
        STORE_DX: tl.constexpr, STATS: tl.constexpr, ZERO_PAST: tl.constexpr,
        JOINT: tl.constexpr, FLAT: tl.constexpr, DIM: tl.constexpr,
    ):
        """dx of one tile's rows (stored), and their dw products g * (x * inv), [LEAVES, GROUPS, 8] in fp32: +0.0
        for a row past the batch (its x and dy loaded as +0.0), not 0 * (1 / 0) where eps is 0 in fp32. ZERO_PAST:
        each product of such a row selected as +0.0 (one select an element); else its inv taken as +0.0 (one select
        a row, and the same bits: the launch config's row_select). JOINT: the two row sums go through their trees
        together. FLAT: cols and mask are [GROUPS * 8] and [LEAVES, GROUPS * 8] (else [1, GROUPS, 8] and [LEAVES,
        GROUPS, 8])."""
        gw = g * w
        if STATS:
            inv = tl.load(stats_ptr + 2 * rows, mask=row_mask, other=1.0)
            coef = tl.load(stats_ptr + 2 * rows + 1, mask=row_mask, other=0.0)
        else:
            if JOINT:
                sum_sq, dot = tl.split(_pair_sums(tl.join(x * x, gw * x)))
            else:
                sum_sq = _halve(_group_sums(x * x))
                dot = _halve(_group_sums(gw * x))
            rms = _rms(sum_sq, eps, dim, DIM)
            inv = _inv(rms)
            coef = tl.div_rn(_per_dim(dot, dim, DIM), rms * rms)
        if not ZERO_PAST:
            inv = tl.where(row_mask, inv, 0.0)
        inv3 = inv[:, None, None]
        if STORE_DX:
            dx = (gw - x * coef[:, None, None]) * inv3
            if FLAT:
                dx = tl.reshape(dx, [dx.shape[0], dx.shape[1] * dx.shape[2]])
            _store_f32(_rows_by_cols(dx_ptr + rows * dim, cols, FLAT), dx, mask)
        prod = g * (x * inv3)
        if ZERO_PAST:
            prod = tl.where(row_mask[:, None, None], prod, 0.0)
        return prod

    @_device_function
    def _bwd_staged(
        x_ptr, g_ptr, w, dx_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride, n_programs, eps, dim, p,  # noqa: ANN001
        cols, zero, GROUPS: tl.constexpr, LEAVES: tl.constexpr, LEVELS: tl.constexpr,  # noqa: ANN001
        MBITS: tl.constexpr, VEC: tl.constexpr, STORE_DX: tl.constexpr, STATS: tl.constexpr,
        STRIDED: tl.constexpr, JOINT: tl.constexpr, STAGES: tl.constexpr, UNROLL_BITS: tl.constexpr,
        DIM: tl.constexpr, ROW_SELECT: tl.constexpr, SPLIT_ROWS: tl.constexpr,
    ):
        """The backward kernel's loop over its 2**LEVELS tiles with Triton's software pipeline: the loads of the
        next STAGES - 1 iterations are issued as asynchronous copies to shared memory (cp.async) before this one's
        tiles are reduced, so they hold no registers. Tiles loaded as [LEAVES, GROUPS * 8] (``cols``) and reshaped,
        as the prefetching loop's FLAT does; the same leaves in the same order, so the same bits.

        2**UNROLL_BITS tiles an iteration (see _bwd_tiles): their rows' reductions are independent of each other
        until their products are added, the stack's lowest levels, with the same adds in the same order; the stack
        keeps the upper LEVELS - UNROLL_BITS levels, whose bookkeeping (a runtime counter's branches, selects and
        register moves: a fifth of the loop's instructions at 128, one tile an iteration) is paid once an
        iteration. (The weight stays held: loaded again each iteration as [GROUPS * 8] and reshaped, Triton laid a
        multi-row tile out so that every thread computed every row's statistics.) Returns the subtree's total
        (STRIDED: its LEAVES rows, still to be added in pairs)."""
        col_mask = cols < dim
        s0, s1, s2, s3, s4, s5 = zero, zero, zero, zero, zero, zero
        c = zero
        for u in tl.range(0, 1 << (LEVELS - UNROLL_BITS), num_stages=STAGES):
            c = _bwd_tiles(x_ptr, g_ptr, w, dx_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride, n_programs,
                           eps, dim, p, u << UNROLL_BITS, cols, col_mask, GROUPS, LEAVES, LEVELS, MBITS, VEC,
                           STORE_DX, STATS, STRIDED, JOINT, UNROLL_BITS, DIM, ROW_SELECT, SPLIT_ROWS)
            c, s0, s1, s2, s3, s4, s5 = _push(c, u, s0, s1, s2, s3, s4, s5, LEVELS - UNROLL_BITS)
        return c

    @_device_function
    def _bwd_tiles(
        x_ptr, g_ptr, w, dx_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride, n_programs, eps, dim, p, t,  # noqa: ANN001
        cols, col_mask, GROUPS: tl.constexpr, LEAVES: tl.constexpr, LEVELS: tl.constexpr,  # noqa: ANN001
        MBITS: tl.constexpr, VEC: tl.constexpr, STORE_DX: tl.constexpr, STATS: tl.constexpr,
        STRIDED: tl.constexpr, JOINT: tl.constexpr, BITS: tl.constexpr, DIM: tl.constexpr,
        ROW_SELECT: tl.constexpr, SPLIT_ROWS: tl.constexpr,
    ):
        """The sum of tiles t .. t + 2**BITS - 1 (t a multiple of 2**BITS) as the stack would form it: the first
        half's sum plus the second's, each formed so in turn, down to single tiles (_bwd_tile)."""
        if BITS == 0:
            return _bwd_tile(x_ptr, g_ptr, w, dx_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride, n_programs,
                             eps, dim, p, t, cols, col_mask, GROUPS, LEAVES, LEVELS, MBITS, VEC, STORE_DX, STATS,
                             STRIDED, JOINT, DIM, ROW_SELECT, SPLIT_ROWS)
        else:
            first = _bwd_tiles(x_ptr, g_ptr, w, dx_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride, n_programs,
                               eps, dim, p, t, cols, col_mask, GROUPS, LEAVES, LEVELS, MBITS, VEC, STORE_DX, STATS,
                               STRIDED, JOINT, BITS - 1, DIM, ROW_SELECT, SPLIT_ROWS)
            return first + _bwd_tiles(x_ptr, g_ptr, w, dx_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride,
                                      n_programs, eps, dim, p, t + (1 << (BITS - 1)), cols, col_mask, GROUPS,
                                      LEAVES, LEVELS, MBITS, VEC, STORE_DX, STATS, STRIDED, JOINT, BITS - 1, DIM,
                                      ROW_SELECT, SPLIT_ROWS)

    @_device_function
    def _bwd_tile(
        x_ptr, g_ptr, w, dx_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride, n_programs, eps, dim, p, t,  # noqa: ANN001
        cols, col_mask, GROUPS: tl.constexpr, LEAVES: tl.constexpr, LEVELS: tl.constexpr,  # noqa: ANN001
        MBITS: tl.constexpr, VEC: tl.constexpr, STORE_DX: tl.constexpr, STATS: tl.constexpr,
        STRIDED: tl.constexpr, JOINT: tl.constexpr, DIM: tl.constexpr, ROW_SELECT: tl.constexpr,
        SPLIT_ROWS: tl.constexpr,
    ):
        """Tile t of _bwd_staged's loop, loaded flat: dx stored, its dw products returned (not STRIDED: its leaves
        already added in pairs)."""
        j = tl.arange(0, LEAVES)
        rows = _bwd_rows(p, t, n_programs, j, LEAVES, 1 << LEVELS, MBITS, STRIDED, SPLIT_ROWS)
        row_mask = rows < n_rows
        mask = _mask_by_cols(row_mask, col_mask, True)
        x = tl.load(_rows_by_cols(x_ptr + tl.multiple_of(rows * x_row_stride, VEC), cols, True), mask=mask, other=0.0)
        g = tl.load(_rows_by_cols(g_ptr + tl.multiple_of(rows * g_row_stride, VEC), cols, True), mask=mask, other=0.0)
        c = _bwd_leaf(tl.reshape(x, [LEAVES, GROUPS, 8]).to(tl.float32),
                      tl.reshape(g, [LEAVES, GROUPS, 8]).to(tl.float32), w, rows, row_mask, mask, cols, dx_ptr,
                      stats_ptr, eps, dim, STORE_DX, STATS, not ROW_SELECT, JOINT, True, DIM)
        if not STRIDED:
            c = _adjacent(c)
        return c

    @_device_function
    def _bwd_prefetched(
        x_ptr, g_ptr, w, dx_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride, n_programs, eps, dim, p,  # noqa: ANN001
        chunk, cols, col_mask, zero, GROUPS: tl.constexpr, LEAVES: tl.constexpr, LEVELS: tl.constexpr,  # noqa: ANN001
        MBITS: tl.constexpr, VEC: tl.constexpr, STORE_DX: tl.constexpr, STATS: tl.constexpr,
        STRIDED: tl.constexpr, JOINT: tl.constexpr, FLAT: tl.constexpr, DIM: tl.constexpr,
        ROW_SELECT: tl.constexpr, SPLIT_ROWS: tl.constexpr,
    ):
        """The backward kernel's loop over its 2**LEVELS tiles with tile t + 1 loaded into registers before tile t
        is reduced (FLAT: loaded as [LEAVES, GROUPS * 8] and reshaped, which lets Triton lay rows out across warps
        and a row's groups across lanes). Returns what _bwd_staged returns."""
        s0, s1, s2, s3, s4, s5 = zero, zero, zero, zero, zero, zero
        c = zero
        j = tl.arange(0, LEAVES)
        if FLAT:  # the tile as [LEAVES, GROUPS * 8], reshaped after the load (see the docstring)
            cols_l = chunk * GROUPS * 8 + tl.arange(0, GROUPS * 8)
            col_mask_l = cols_l < dim
        else:
            cols_l = cols[None, :, :]
            col_mask_l = col_mask[None, :, :]
        rows = _bwd_rows(p, 0, n_programs, j, LEAVES, 1 << LEVELS, MBITS, STRIDED, SPLIT_ROWS)
        row_mask = rows < n_rows
        mask = _mask_by_cols(row_mask, col_mask_l, FLAT)
        x_next = tl.load(_rows_by_cols(x_ptr + tl.multiple_of(rows * x_row_stride, VEC), cols_l, FLAT),
                         mask=mask, other=0.0)
        g_next = tl.load(_rows_by_cols(g_ptr + tl.multiple_of(rows * g_row_stride, VEC), cols_l, FLAT),
                         mask=mask, other=0.0)
        for t in range(1 << LEVELS):
            x = tl.reshape(x_next, [LEAVES, GROUPS, 8]).to(tl.float32)
            g = tl.reshape(g_next, [LEAVES, GROUPS, 8]).to(tl.float32)
            rows_t, row_mask_t, mask_t = rows, row_mask, mask
            rows = _bwd_rows(p, t + 1, n_programs, j, LEAVES, 1 << LEVELS, MBITS, STRIDED, SPLIT_ROWS)
            row_mask = (rows < n_rows) & (t + 1 < (1 << LEVELS))
            mask = _mask_by_cols(row_mask, col_mask_l, FLAT)
            x_next = tl.load(_rows_by_cols(x_ptr + tl.multiple_of(rows * x_row_stride, VEC), cols_l, FLAT),
                             mask=mask, other=0.0)
            g_next = tl.load(_rows_by_cols(g_ptr + tl.multiple_of(rows * g_row_stride, VEC), cols_l, FLAT),
                             mask=mask, other=0.0)
            c = _bwd_leaf(x, g, w, rows_t, row_mask_t, mask_t, cols_l, dx_ptr, stats_ptr, eps, dim,
                          STORE_DX, STATS, not ROW_SELECT, JOINT, FLAT, DIM)
            if not STRIDED:
                c = _adjacent(c)
            c, s0, s1, s2, s3, s4, s5 = _push(c, t, s0, s1, s2, s3, s4, s5, LEVELS)
        return c

    @triton.jit(do_not_specialize=["n_rows", "x_row_stride", "g_row_stride", "n_programs", "eps", "n_cols"])
    def _rms_norm_bwd_kernel(
        x_ptr, w_ptr, g_ptr, dx_ptr, part_ptr, stats_ptr,  # noqa: ANN001
        n_rows, x_row_stride, g_row_stride, n_programs, eps, n_cols,  # noqa: ANN001
        DIM: tl.constexpr, GROUPS: tl.constexpr, LEAVES: tl.constexpr, LEVELS: tl.constexpr, MBITS: tl.constexpr,
        VEC: tl.constexpr, STORE_DX: tl.constexpr, STATS: tl.constexpr, STRIDED: tl.constexpr = False,
        PREFETCH: tl.constexpr = False, JOINT: tl.constexpr = False, FLAT: tl.constexpr = False,
        STAGES: tl.constexpr = 0, UNROLL_BITS: tl.constexpr = 0, ROW_SELECT: tl.constexpr = False,
        SPLIT_ROWS: tl.constexpr = False,
    ):
        """dx of the rows of program p's subtree, and its fp32 partial of dw, for columns chunk * GROUPS * 8 on.

        Program p owns rows 8 * (p + n_programs * m) + e for e in [0, 8), m in [0, 2**MBITS): the first
        levels of dw's canonical tree over the padded batch (e's bits from the highest, then m's), visited as
        leaves k = 0, 1, ... in the order of those levels, in 2**LEVELS tiles of LEAVES rows. Not STRIDED: tile
        t holds leaves t * LEAVES on, which are added in pairs inside the tile, and the tiles' sums go through
        a stack of finished subtrees. STRIDED: tile t holds leaves t, t + T, t + 2T, ... (T tiles); the tiles
        go through the stack element by element (the tree's lowest levels, no data crossing threads) and the
        LEAVES rows of the total are added in pairs once, at the end (its highest levels). STAGES > 0: the loop
        is Triton's software pipeline, STAGES - 1 iterations' loads in flight in shared memory (see _bwd_staged;
        it takes the place of PREFETCH; 2**UNROLL_BITS tiles an iteration). PREFETCH: tile t + 1 is loaded before tile
        t is reduced (see _bwd_prefetched, and FLAT there). JOINT: a row's two sums are reduced together.
        The partial goes to row p of part_ptr, which no other program touches: no atomics, the same bits on every
        run. STATS: inv and c come from stats_ptr (rows wider than a tile); otherwise the tile holds whole rows
        and they are computed here. DIM and n_cols as in the forward.
        """
        dim = DIM if DIM > 0 else (n_cols // VEC) * VEC
        p = tl.program_id(0).to(tl.int64)
        chunk = tl.program_id(1)
        groups = tl.arange(0, GROUPS)
        lanes = tl.arange(0, 8)
        cols = ((chunk * GROUPS + groups) * 8)[:, None] + lanes[None, :]
        col_mask = cols < dim
        w = _load_f32(w_ptr + cols, col_mask)[None, :, :]
        zero = tl.zeros([LEAVES, GROUPS, 8] if STRIDED else [GROUPS, 8], tl.float32)
        s0, s1, s2, s3, s4, s5 = zero, zero, zero, zero, zero, zero
        c = zero
        j = tl.arange(0, LEAVES)
        if STAGES > 0:
            c = _bwd_staged(x_ptr, g_ptr, w, dx_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride, n_programs,
                            eps, dim, p, chunk * GROUPS * 8 + tl.arange(0, GROUPS * 8), zero, GROUPS, LEAVES, LEVELS,
                            MBITS, VEC, STORE_DX, STATS, STRIDED, JOINT, STAGES, UNROLL_BITS, DIM, ROW_SELECT,
                            SPLIT_ROWS)
        elif PREFETCH:
            c = _bwd_prefetched(x_ptr, g_ptr, w, dx_ptr, stats_ptr, n_rows, x_row_stride, g_row_stride, n_programs,
                                eps, dim, p, chunk, cols, col_mask, zero, GROUPS, LEAVES, LEVELS, MBITS, VEC, STORE_DX,
                                STATS, STRIDED, JOINT, FLAT, DIM, ROW_SELECT, SPLIT_ROWS)
        else:
            for t in range(1 << LEVELS):  # LEAVES << LEVELS == 8 << MBITS, the subtree's rows
                rows = _bwd_rows(p, t, n_programs, j, LEAVES, 1 << LEVELS, MBITS, STRIDED, SPLIT_ROWS)
                c = zero
                if tl.min(rows, 0) < n_rows:  # subtrees past the batch are zero rows: their sum is +0.0
                    row_mask = rows < n_rows
                    mask = row_mask[:, None, None] & col_mask[None, :, :]
                    x_rows = rows * x_row_stride
                    g_rows = rows * g_row_stride
                    if VEC > 1:
                        x_rows = tl.multiple_of(x_rows, VEC)
                        g_rows = tl.multiple_of(g_rows, VEC)
                    x = _load_f32(x_ptr + x_rows[:, None, None] + cols[None, :, :], mask)
                    g = _load_f32(g_ptr + g_rows[:, None, None] + cols[None, :, :], mask)
                    c = _bwd_leaf(x, g, w, rows, row_mask, mask, cols[None, :, :], dx_ptr, stats_ptr, eps, dim,
                                  STORE_DX, STATS, STRIDED and not ROW_SELECT, JOINT, False, DIM)
                    if not STRIDED:
                        c = _adjacent(c)
                c, s0, s1, s2, s3, s4, s5 = _push(c, t, s0, s1, s2, s3, s4, s5, LEVELS)
        if STRIDED:
            c = _adjacent(c)
        tl.store(part_ptr + p * dim + cols, c, mask=col_mask)

    @triton.jit(do_not_specialize=["n_out", "n_cols", "n_fan"])
    def _rms_norm_dw_kernel(
        part_ptr, out_ptr, n_out, n_cols, n_fan,  # noqa: ANN001
        DIM: tl.constexpr, BLOCK: tl.constexpr, FAN: tl.constexpr, FINAL: tl.constexpr,
    ):
        """out[j] = the halving tree over partial rows j, j + n_out, ..., j + (n_fan - 1) * n_out, padded with
        +0.0 rows to FAN (both powers of two, n_fan <= FAN): the first levels of the halving over all partial
        rows. FINAL: add +0.0 and round to out's dtype. DIM: the dim where it is a power of two, else 0 and the
        dim is n_cols."""
        dim = DIM if DIM > 0 else n_cols
        j = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        col_mask = cols < dim
        k = tl.arange(0, FAN)
        rows = j + n_out * k.to(tl.int64)
        t = tl.load(part_ptr + (rows * dim)[:, None] + cols[None, :], mask=(k < n_fan)[:, None] & col_mask[None, :],
                    other=0.0)
        for _ in tl.static_range(8):
            if t.shape[0] > 1:
                t = _sum(tl.reshape(t, [2, t.shape[0] // 2, BLOCK]), 0)
        t = tl.reshape(t, [BLOCK])
        if FINAL:
            _store_f32(out_ptr + cols, t + 0.0, col_mask)
        else:
            tl.store(out_ptr + j * dim + cols, t, mask=col_mask)


class _Launcher:
    """Launches one kernel: through Triton the first time per binary, then straight through the compiled
    kernel's own launcher.

    Triton's ``kernel[grid](...)`` binds and specialises every argument in Python on every call, which at a
    few rows costs more than the kernel itself. These kernels specialise nothing at runtime (pointers are
    always 16-byte aligned, integers are never specialised), so a binary is named by what Triton would key
    it on: the pointer dtypes, whether each integer needs 64 bits, the constexprs and the warp count. Later
    calls with the same name hand the arguments to that binary's launcher directly. Under the interpreter,
    or while a launch hook (a profiler) is installed, every call goes through Triton.
    """

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        params = list(inspect.signature(kernel.fn).parameters.values())
        constexpr = ["constexpr" in str(p.annotation) for p in params]
        self._runtime = constexpr.index(True)  # the kernels list their constexprs last
        assert all(constexpr[self._runtime :]), "constexpr parameters must come last"
        self._compiled: dict[tuple, tuple | None] = {}

    def __call__(self, grid: tuple[int, ...], args: tuple, num_warps: int, device: torch.device,
                 maxnreg: int = 0) -> None:
        if _INTERPRETED:
            # NaN and Inf inputs are part of the contract; numpy's warnings about them are noise here.
            with np.errstate(all="ignore"):
                self.kernel[grid](*args)
            return
        if device.index != torch._C._cuda_getDevice():  # what torch.cuda.current_device() returns
            with torch.cuda.device(device):
                self(grid, args, num_warps, device, maxnreg)
            return
        key = self._key(args, num_warps, device, maxnreg)
        entry = self._compiled.get(key)
        if entry is not None and not _launch_hooks_installed():
            launch, head = entry
            stream = torch._C._cuda_getCurrentRawStream(device.index)
            launch(*grid, *(1,) * (3 - len(grid)), stream, *head, *args)
            return
        # No multiply-add contraction: the canonical order rounds every product on its own.
        options = {"maxnreg": maxnreg} if maxnreg else {}  # a cap on registers a thread (0: the compiler's)
        compiled = self.kernel[grid](*args, num_warps=num_warps, enable_fp_fusion=False, **options)
        if key not in self._compiled:
            self._compiled[key] = _launch_entry(compiled)

    def _key(self, args: tuple, num_warps: int, device: torch.device, maxnreg: int = 0) -> tuple:
        return (
            device.index,
            num_warps,
            maxnreg,
            args[self._runtime :],
            # Triton types an int as i64 from 2**31 on: a different binary.
            tuple([a.dtype if isinstance(a, torch.Tensor) else type(a) is int and a >= _INT32_LIMIT
                   for a in args[: self._runtime]]),
        )

    def binary(self, args: tuple, num_warps: int, device: torch.device, maxnreg: int = 0) -> tuple | None:
        """(launch, head) of the binary these arguments launch, once it was launched (see _launch_entry)."""
        return None if _INTERPRETED else self._compiled.get(self._key(args, num_warps, device, maxnreg))


def _launch_entry(compiled: Any) -> tuple[Any, tuple] | None:
    """(launch, head) for a compiled kernel: ``launch(gridX, gridY, gridZ, stream, *head, *kernel_args)`` launches
    its binary as ``compiled.run(gridX, gridY, gridZ, stream, function, packed_metadata, None, None, None,
    *kernel_args)`` does (no launch metadata, no hooks). None for a Triton whose compiled kernels look different:
    those calls stay on Triton's own path.

    Where ``compiled.run`` is Triton 3.6's ``CudaLauncher`` and the kernel needs no scratch memory (none of these
    does), ``launch`` is the launcher's C function itself. Its Python ``__call__`` only defines a closure, finds
    that neither scratch buffer is needed (None) and passes everything on with the launcher's two flags: 1.2 to
    2.1 µs of a planned forward's 10 to 14 on an H200 machine.
    """
    try:
        run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
    except AttributeError:
        return None
    if _bare_launcher(run):
        return run.launch, (function, run.launch_cooperative_grid, run.launch_pdl, None, None, packed, None, None,
                            None)
    return run, (function, packed, None, None, None)


def _bare_launcher(run: Any) -> bool:
    """Whether ``run`` may be skipped for its C launch function: a ``CudaLauncher`` of the layout checked by
    _launcher_layout_known, launching a kernel without global or profile scratch memory."""
    launcher_type = _launcher_layout_known()
    return (launcher_type is not None and type(run) is launcher_type
            and getattr(run, "global_scratch_size", None) == 0 and getattr(run, "profile_scratch_size", None) == 0)


@functools.cache
def _launcher_layout_known() -> type | None:
    """Triton's ``CudaLauncher`` class where its ``__call__`` is the one this module bypasses (Triton 3.6): the
    signature ``(self, gridX, gridY, gridZ, stream, function, *args)``, the C launch function's leading arguments
    ``iiiKKppOOOOOO`` (grid, stream, function, cooperative grid, PDL, global scratch, profile scratch, kernel
    metadata, launch metadata, enter hook, exit hook), and the one statement that forwards them. Any other Triton
    (3.9's launcher takes other arguments, in another order) keeps calling the launcher; None then."""
    try:
        from triton.backends.nvidia import driver

        cls = driver.CudaLauncher
        names = list(inspect.signature(cls.__call__).parameters)
        source = "".join(inspect.getsource(cls.__call__).split())
    except Exception:  # no NVIDIA backend, no source, another layout: not known
        return None
    forward = ("self.launch(gridX,gridY,gridZ,stream,function,self.launch_cooperative_grid,self.launch_pdl,"
               "global_scratch,profile_scratch,*args)")
    known = (names == ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]
             and getattr(driver, "_BASE_ARGS_FORMAT", None) == "iiiKKppOOOOOO" and source.endswith(forward))
    return cls if known else None


def _launch_hooks_installed() -> bool:
    hook = triton.knobs.runtime.launch_enter_hook
    return bool(getattr(hook, "calls", hook))  # a HookChain (empty: no hooks), a callable, or None


# The launch-enter hooks as Triton 3.4+ keeps them: one HookChain on the runtime knobs, which a profiler adds to.
# A planned launch checks that the knob is still that chain and the chain is empty (two attribute reads), not
# _launch_hooks_installed's module and attribute chain and its getattr; anything else takes the full path.
_RUNTIME_KNOBS = getattr(getattr(triton, "knobs", None), "runtime", None)
_ENTER_HOOKS = getattr(_RUNTIME_KNOBS, "launch_enter_hook", None)
if not isinstance(getattr(_ENTER_HOOKS, "calls", None), list):
    _ENTER_HOOKS = None  # another Triton: no plans (_make_plan)


if triton is not None:
    _launch_fwd = _Launcher(_rms_norm_fwd_kernel)
    _launch_stats = _Launcher(_rms_norm_stats_kernel)
    _launch_bwd = _Launcher(_rms_norm_bwd_kernel)
    _launch_dw = _Launcher(_rms_norm_dw_kernel)


def _rows_2d(t: torch.Tensor, dim: int, vec: int) -> tuple[torch.Tensor, int]:
    """``t`` as [n_rows, dim] rows with unit column stride, a 16-byte-aligned start and a row stride that
    is a multiple of ``vec``: strided rows are used in place, anything else is copied once.

    The copy is what keeps the kernels' alignment assumption true; its bits are those of any contiguous copy.
    """
    rows = t if t.dim() == 2 else t.reshape(-1, dim)  # reshape copies only what no row stride describes
    stride = rows.stride(0) if rows.shape[0] > 1 else dim
    if (rows.stride(1) != 1 and dim > 1) or stride % vec or rows.data_ptr() % _ALIGN_BYTES:
        rows = rows.clone(memory_format=torch.contiguous_format)
        stride = dim
    return rows, stride


def _aligned_weight(weight: torch.Tensor) -> torch.Tensor:
    if weight.stride(0) != 1 or weight.data_ptr() % _ALIGN_BYTES:
        return weight.clone(memory_format=torch.contiguous_format)
    return weight


# Weight modes of the forward kernel.
_NO_WEIGHT, _WEIGHT, _OFFSET_WEIGHT = 0, 1, 2


def _forward(x: torch.Tensor, weight: torch.Tensor | None, eps: float, out_dtype: torch.dtype,
             residual: torch.Tensor | None = None, weight_mode: int = _WEIGHT, in_place: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch the forward kernel on validated inputs: (y, residual_out or None). Zero rows launch nothing.

    in_place (the fused add, ``fused_add_``): y into x and residual_out into residual. The kernel writes its outputs
    as dense rows, each program after it has read its own rows, so x and residual are its outputs where their rows
    are used in place and dense; any other layout, and rows too wide for one tile (whose second pass reads x and
    residual again), are computed aside and copied back."""
    residual_out = None
    if x.numel() == 0:
        if in_place:
            return x, residual
        if residual is not None:
            residual_out = torch.empty(x.shape, dtype=residual.dtype, device=x.device)
        return torch.empty(x.shape, dtype=out_dtype, device=x.device), residual_out
    dim = x.shape[-1]
    cfg = launch_config(dim, x.dtype, fused_add=residual is not None)
    vec = cfg.vec
    if residual is not None:
        vec = min(vec, launch_config(dim, residual.dtype, fused_add=True).vec)
    x2, x_stride = _rows_2d(x, dim, vec)
    n_rows = x2.shape[0]
    r2, r_stride = _rows_2d(residual, dim, vec) if residual is not None else (x2, x_stride)
    if in_place and not (cfg.tiles == 1 and _dense_view(x2, x_stride, x) and _dense_view(r2, r_stride, residual)):
        y, residual_out = _forward(x, weight, eps, out_dtype, residual, weight_mode)
        x.copy_(y.view(x.shape))
        residual.copy_(residual_out.view(x.shape))
        return x, residual
    y = x2 if in_place else torch.empty((n_rows, dim), dtype=out_dtype, device=x.device)
    ro = y  # an unwritten stand-in when there is no residual
    if residual is not None:
        ro = residual_out = r2 if in_place else torch.empty((n_rows, dim), dtype=residual.dtype, device=x.device)
    w = _aligned_weight(weight) if weight is not None else x2
    _launch_fwd(
        (-(-n_rows // cfg.rows),),
        (x2, r2, w, y, ro, n_rows, x_stride, r_stride, eps, dim, weight_mode,
         dim_constexpr(dim), cfg.groups, cfg.rows, cfg.tiles, vec, residual is not None, cfg.flat),
        cfg.num_warps,
        x.device,
    )
    if in_place:
        return x, residual
    if x.dim() != 2:
        y = y.view(x.shape)
        residual_out = residual_out.view(x.shape) if residual_out is not None else None
    return y, residual_out


def _dense_view(rows: torch.Tensor, stride: int, t: torch.Tensor | None) -> bool:
    """Whether ``rows`` (from _rows_2d) is t itself, not a copy, with rows one after another: the kernel's outputs."""
    return t is not None and stride == rows.shape[1] and rows.data_ptr() == t.data_ptr()


class _Plan(NamedTuple):
    """A validated forward launch for one (shape, strides, dtypes, device, eps): everything but the pointers."""

    launch: Any  # the binary's launch function, and the arguments it takes between the stream and the kernel's
    head: tuple  # (see _launch_entry)
    grid: int
    index: int  # the device's index
    like: bool  # the output is in x's dtype, so torch.empty_like(x) allocates it (else torch.empty)
    shape: tuple[int, int]
    out_dtype: torch.dtype
    device: torch.device
    tail: tuple  # the kernel's arguments after the pointers


# Small batches are launch-bound: at 1 to 256 rows of 4096 the kernel runs for a few microseconds, less than
# the input checks, the configuration lookup and Triton's binder take in Python. A call whose metadata was
# seen before (so it passed the checks) launches its binary straight from the plan (TritonRMSNormOp._run).
_PLANS: dict[tuple, _Plan] = {}
_MAX_PLANS = 4096  # one per (shape, strides, dtype, eps): a serving loop sees a handful


def _plan_key(x: torch.Tensor, weight: torch.Tensor, eps: float, fp32_out: bool) -> tuple:
    """The key of a call's plan in _PLANS; TritonRMSNormOp._run builds the same tuple in line.

    A contiguous tensor stands in by True instead of its strides: of one shape, contiguous tensors differ only in the
    strides of dims of size one, which no plan reads (one row's stride is the dim), and is_contiguous() costs less
    than stride() and the hash of its tuple. A strided tensor keys on its strides (True equals no tuple).
    """
    return (x.shape, x.is_contiguous() or x.stride(), x.dtype, x.device, weight.shape,
            weight.is_contiguous() or weight.stride(), weight.dtype, weight.device, type(eps), eps, fp32_out)


def _make_plan(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype) -> _Plan | None:
    """The plan of a forward that _forward just launched on 2-D rows used in place, if its binary is known."""
    if (_INTERPRETED or _ENTER_HOOKS is None or x.device.type != "cuda" or x.dim() != 2 or x.numel() == 0
            or len(_PLANS) >= _MAX_PLANS):
        return None
    n_rows, dim = x.shape
    cfg = launch_config(dim, x.dtype)
    stride = x.stride(0) if n_rows > 1 else dim
    if (x.stride(1) != 1 and dim > 1) or stride % cfg.vec or weight.stride(0) != 1:
        return None
    tail = (n_rows, stride, stride, eps, dim, _WEIGHT, dim_constexpr(dim), cfg.groups, cfg.rows, cfg.tiles, cfg.vec,
            False, cfg.flat)
    y = torch.empty(0, dtype=out_dtype, device=x.device)  # stands in for the output in the binary's key
    entry = _launch_fwd.binary((x, x, weight, y, y, *tail), cfg.num_warps, x.device)
    if entry is None:
        return None
    # x is dense row-major here or has gaps between rows; either way its empty_like is contiguous. empty_like
    # parses fewer arguments than empty (a microsecond of a few-row call).
    return _Plan(*entry, grid=-(-n_rows // cfg.rows), index=x.device.index, like=out_dtype == x.dtype,
                 shape=(n_rows, dim), out_dtype=out_dtype, device=x.device, tail=tail)


def _backward(
    x: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor, eps: float, need_dx: bool, need_dw: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """dx (in x.dtype) and dw (in weight.dtype), each only if asked for: from the call's backward plan where it has
    one, else through the launchers (and the plan is made)."""
    if x.numel() == 0:
        return (torch.empty_like(x) if need_dx else None), (torch.zeros_like(weight) if need_dw else None)
    dim = x.shape[-1]
    cfg = launch_config(dim, x.dtype, backward=True)
    key = (x.shape, x.is_contiguous() or x.stride(), x.dtype, x.device, grad.shape,
           grad.is_contiguous() or grad.stride(), grad.dtype, weight.shape, weight.stride(), weight.dtype,
           type(eps), eps, need_dx, need_dw)
    plan = _BACKWARD_PLANS.get(key)
    if plan is not None and plan.cfg is cfg:  # a plan made under another tuning (a test's) is made again
        done = _planned_backward(plan, x, weight, grad, need_dx, need_dw)
        if done is not None:
            return done
    launches: list[tuple[Any, tuple, tuple, int, int]] = []

    def launch(launcher: Any, grid: tuple, args: tuple, num_warps: int, maxnreg: int = 0) -> None:
        launches.append((launcher, grid, args, num_warps, maxnreg))
        launcher(grid, args, num_warps, x.device, maxnreg)

    x2, x_stride = _rows_2d(x, dim, cfg.vec)
    g2, g_stride = _rows_2d(grad, dim, cfg.vec)
    w = _aligned_weight(weight)
    n_rows = x2.shape[0]
    programs = dw_programs(n_rows, cfg.subtree)
    partials = torch.empty((programs, dim), dtype=torch.float32, device=x.device)
    dx = torch.empty((n_rows, dim), dtype=x.dtype, device=x.device) if need_dx else partials
    stats = partials  # an unread stand-in while rows fit one tile
    if cfg.tiles > 1:
        stats = torch.empty(2 * n_rows, dtype=torch.float32, device=x.device)
        launch(_launch_stats, (n_rows,),
               (x2, w, g2, stats, n_rows, x_stride, g_stride, eps, dim, dim_constexpr(dim), cfg.groups, cfg.tiles,
                cfg.vec),
               cfg.num_warps)
    launch(_launch_bwd, (programs, cfg.tiles),
           (x2, w, g2, dx, partials, stats, n_rows, x_stride, g_stride, programs, eps, dim,
            *backward_constexprs(dim, cfg, need_dx).values()),
           cfg.num_warps, cfg.maxnreg)
    dw = _sum_partials(partials, w, launch) if need_dw else None
    if (not _INTERPRETED and x.device.type == "cuda" and _ENTER_HOOKS is not None
            and (key not in _BACKWARD_PLANS or (plan is not None and plan.cfg is not cfg))
            and len(_BACKWARD_PLANS) < _MAX_PLANS
            and x2.data_ptr() == x.data_ptr() and g2.data_ptr() == grad.data_ptr() and w is weight):
        _BACKWARD_PLANS[key] = _make_backward_plan(launches, x.device, n_rows, dim, cfg)
    return (dx.view(x.shape) if need_dx else None), dw


class _BackwardPlan(NamedTuple):
    """A validated backward for one (shapes, strides, dtypes, device, eps, gradients asked for): each launch's binary
    and every argument but the pointers. ``stats``, ``bwd``: (launch, head, grid, tail); ``passes``: dw's passes
    over the partial rows, each (launch, head, grid, rows out, tail)."""

    cfg: LaunchConfig  # the configuration it was made under (launch_config's cached object)
    device_index: int
    device: torch.device
    rows: int
    dim: int
    programs: int
    stats: tuple | None
    bwd: tuple
    passes: tuple


# A training step's backward at a few thousand rows is bound by the host: the launchers' keys, the constexprs and
# configuration built again, and Triton's launcher reading each tensor argument's pointer from the driver, took
# longer than the kernels. A call whose metadata was seen before launches from its plan (_planned_backward). The
# value None marks metadata whose launches could not be planned (a copy of an input, an unknown launcher).
_BACKWARD_PLANS: dict[tuple, _BackwardPlan | None] = {}


def _make_backward_plan(launches: list, device: torch.device, n_rows: int, dim: int, cfg: LaunchConfig
                        ) -> _BackwardPlan | None:
    """The plan of the launches _backward just made on a GPU, its inputs used in place, if every binary is known."""
    planned = []
    for launcher, grid, args, num_warps, maxnreg in launches:
        entry = launcher.binary(args, num_warps, device, maxnreg)
        if entry is None:
            return None
        pointers = sum(isinstance(a, torch.Tensor) for a in args)
        planned.append((*entry, (*grid, *(1,) * (3 - len(grid))), args[pointers:]))
    stats = planned.pop(0) if cfg.tiles > 1 else None
    bwd = planned.pop(0)
    passes = tuple((launch, head, grid, grid[0], tail) for launch, head, grid, tail in planned)
    return _BackwardPlan(cfg, device.index, device, n_rows, dim, bwd[2][0], stats, bwd, passes)


def _planned_backward(plan: _BackwardPlan, x: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor,
                      need_dx: bool, need_dw: bool) -> tuple[torch.Tensor | None, torch.Tensor | None] | None:
    """_backward's launches from ``plan``, with the pointers as integers; None where the plan does not hold (a
    misaligned pointer, another current device, a launch hook installed): the full path then."""
    xp, wp, gp = x.data_ptr(), weight.data_ptr(), grad.data_ptr()
    index = plan.device_index
    if ((xp | wp | gp) & (_ALIGN_BYTES - 1) or torch._C._cuda_getDevice() != index
            or getattr(_RUNTIME_KNOBS, "launch_enter_hook", None) is not _ENTER_HOOKS or _ENTER_HOOKS.calls):
        return None
    device, dim = plan.device, plan.dim
    stream = torch._C._cuda_getCurrentRawStream(index)
    partials = torch.empty((plan.programs, dim), dtype=torch.float32, device=device)
    pp = partials.data_ptr()
    dx = torch.empty((plan.rows, dim), dtype=x.dtype, device=device) if need_dx else None
    dxp = dx.data_ptr() if dx is not None else pp
    sp = pp
    if plan.stats is not None:
        stats = torch.empty(2 * plan.rows, dtype=torch.float32, device=device)
        sp = stats.data_ptr()
        launch, head, grid, tail = plan.stats
        launch(*grid, stream, *head, xp, wp, gp, sp, *tail)
    launch, head, grid, tail = plan.bwd
    launch(*grid, stream, *head, xp, wp, gp, dxp, pp, sp, *tail)
    dw = None
    if need_dw:
        source, last = partials, len(plan.passes) - 1
        for i, (launch, head, grid, n_out, tail) in enumerate(plan.passes):
            # ``source`` is held until this pass is launched; freed after, the allocator reuses it in stream order
            out = torch.empty_like(weight) if i == last else torch.empty((n_out, dim), dtype=torch.float32,
                                                                          device=device)
            launch(*grid, stream, *head, source.data_ptr(), out.data_ptr(), *tail)
            source = out
        dw = source
    return (dx.view(x.shape) if dx is not None else None), dw


def backward_constexprs(dim: int, cfg: LaunchConfig, store_dx: bool = True) -> dict[str, Any]:
    """The backward kernel's constexprs for rows of ``dim`` under ``cfg``, by name, in the kernel's order: what a
    launch passes, and what a compile without a GPU (benchmarks/triton_sass.py) must pass to get the same binary."""
    return dict(DIM=dim_constexpr(dim), GROUPS=cfg.groups, LEAVES=cfg.rows,
                LEVELS=(cfg.subtree // cfg.rows).bit_length() - 1, MBITS=cfg.subtree.bit_length() - 1 - 3,
                VEC=cfg.vec, STORE_DX=store_dx, STATS=cfg.tiles > 1, STRIDED=cfg.strided, PREFETCH=cfg.prefetch,
                JOINT=cfg.joint, FLAT=cfg.flat, STAGES=cfg.stages, UNROLL_BITS=cfg.unroll.bit_length() - 1,
                ROW_SELECT=cfg.row_select, SPLIT_ROWS=cfg.split_rows)


def _sum_partials(partials: torch.Tensor, weight: torch.Tensor, launch: Any = None) -> torch.Tensor:
    """dw: the partial rows halved in passes of at most _DW_PASS rows, + 0.0, rounded to weight's dtype (each
    pass's tile _DW_PASS rows where _DW_FULL_PASS); ``launch(launcher, grid, args, num_warps)`` launches a pass."""
    if launch is None:
        def launch(launcher: Any, grid: tuple, args: tuple, num_warps: int) -> None:
            launcher(grid, args, num_warps, weight.device)
    n, dim = partials.shape
    block = min(padded_width(dim), 1 << 16) if _INTERPRETED else min(padded_width(dim), 128)
    while True:
        fan = min(n, _DW_PASS)
        n_out = n // fan
        final = n_out == 1
        out = torch.empty_like(weight) if final else partials.new_empty((n_out, dim))
        tile = _DW_PASS if _DW_FULL_PASS else fan
        launch(_launch_dw, (n_out, -(-dim // block)),
               (partials, out, n_out, dim, fan, dim_constexpr(dim), block, tile, final), 8)
        if final:
            return out
        partials, n = out, n_out


class _RMSNormFunction(torch.autograd.Function):
    """Differentiable wrapper for eager calls: saves x and weight, recomputes the row statistics backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype
                ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return _forward(x, weight, eps, out_dtype)[0]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        dx, dw = _backward(x, weight, grad, ctx.eps, ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        return dx, dw, None, None


# ------------------------------------------------------------------------------------------------------
# torch custom ops: what torch.compile, torch.library.opcheck and graph capture see. Eager calls of the
# backend go straight to the launchers (the dispatcher's Python costs more than a small batch's kernel);
# under torch.compile the backend calls these ops, so the graph holds one opaque node per kernel.

_NAMESPACE = "rmsnorm_conformance"


@torch.library.custom_op(f"{_NAMESPACE}::triton_rms_norm", mutates_args=(),
                         schema="(Tensor x, Tensor? weight, float eps, bool fp32_out, bool offset) -> Tensor")
def _rms_norm_op(x, weight, eps, fp32_out, offset):  # noqa: ANN001
    mode = _NO_WEIGHT if weight is None else _OFFSET_WEIGHT if offset else _WEIGHT
    return _forward(x, weight, eps, torch.float32 if fp32_out else x.dtype, weight_mode=mode)[0]


@_rms_norm_op.register_fake
def _(x, weight, eps, fp32_out, offset):  # noqa: ANN001
    return x.new_empty(x.shape, dtype=torch.float32 if fp32_out else x.dtype)


@torch.library.custom_op(f"{_NAMESPACE}::triton_rms_norm_backward", mutates_args=(),
                         schema="(Tensor x, Tensor weight, Tensor grad, float eps, bool need_dx, bool need_dw)"
                                " -> (Tensor, Tensor)")
def _rms_norm_backward_op(x, weight, grad, eps, need_dx, need_dw):  # noqa: ANN001
    dx, dw = _backward(x, weight, grad, eps, need_dx, need_dw)
    # An op returns tensors: an empty one stands for a gradient nobody asked for.
    return (dx if dx is not None else x.new_empty(0)), (dw if dw is not None else weight.new_empty(0))


@_rms_norm_backward_op.register_fake
def _(x, weight, grad, eps, need_dx, need_dw):  # noqa: ANN001
    return (x.new_empty(x.shape) if need_dx else x.new_empty(0)), \
        (weight.new_empty(weight.shape) if need_dw else weight.new_empty(0))


def _setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    x, weight, eps, _, offset = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps
    ctx.plain = weight is not None and not offset


def _rms_norm_op_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    if not ctx.plain:
        raise RuntimeError("the Triton backend differentiates the plain-weight RMSNorm only, not its variants")
    x, weight = ctx.saved_tensors
    need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    dx, dw = torch.ops.rmsnorm_conformance.triton_rms_norm_backward(x, weight, grad, ctx.eps, need_dx, need_dw)
    return (dx if need_dx else None), (dw if need_dw else None), None, None, None


_rms_norm_op.register_autograd(_rms_norm_op_backward, setup_context=_setup_context)


@torch.library.custom_op(f"{_NAMESPACE}::triton_fused_add_rms_norm", mutates_args=(),
                         schema="(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)")
def _fused_add_op(x, residual, weight, eps):  # noqa: ANN001
    return _forward(x, weight, eps, x.dtype, residual=residual)


@_fused_add_op.register_fake
def _(x, residual, weight, eps):  # noqa: ANN001
    return x.new_empty(x.shape), residual.new_empty(x.shape)


@torch.library.custom_op(f"{_NAMESPACE}::triton_fused_add_rms_norm_", mutates_args=("x", "residual"),
                         schema="(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()")
def _fused_add_in_place_op(x, residual, weight, eps):  # noqa: ANN001
    check_in_place(x, residual)
    _forward(x, weight, eps, x.dtype, residual=residual, in_place=True)


@_fused_add_in_place_op.register_fake
def _(x, residual, weight, eps):  # noqa: ANN001
    return None


# What the backend's prepare gets ready, each at every dim and dtype pair: the calls the suites make. Each call
# compiles, on its first launch, the binaries a worker's call at that (dim, dtypes) would build. The offset and
# unweighted forwards launch the forward's binary (the weight mode is a runtime argument): as jobs of their own they
# would only build it again in another of prepare's processes. The suites differentiate x and the weight together
# (test_gradients, test_bounds, test_semantics' isolation), so the backward is prepared with dx and dw; dx alone
# launches what that does, less dw's kernel, and dw alone (the kernel without dx's stores: a binary of its own) is
# a call no suite makes: preparing it too compiled, in 120 jobs, binaries that no test launched, each about as
# costly as the backward's own (measured on an H200).
PREPARED_CALLS: tuple[str, ...] = ("forward", "forward_fp32", "fused_add", "fused_add_fp32_residual", "backward")
# The calls of a first-call process (its entry points: the forward, forward_fp32, the fused add with a residual in
# x's dtype, the offset and unweighted forwards on the forward's binary) at the first LEAD_DIMS dims the warm-up is
# given (the first-call plan's dims: the harness lists them first), which prepare_jobs puts ahead of every other job.
# A run's first tests are its first-call checks (the longest, started first), and each one's fresh process makes
# those calls at once: where the warm-up had not built them yet, both built them at the same time (on an H200: the
# first-call tests 9.4-11.4 s each, cold; a forward binary 0.3-0.5 CPU-s to build).
FIRST_CALLS: tuple[str, ...] = ("forward", "forward_fp32", "fused_add")
LEAD_DIMS = 7


def dims_of_every_width(dims: list[int]) -> list[int]:
    """``dims``, then one dim more for each padded width up to the widest of them that none of ``dims`` stands
    for: a binary depends on a dim only through its padded width, whether its rows are 16-byte accesses (a
    multiple of 8 elements) and whether it is that width itself (dim_constexpr). Three quarters of a width of at
    least 32 is a multiple of 8 and not a power of two."""
    widest = max((padded_width(d) for d in dims), default=0)
    seen = {binary_dim_class(d, torch.bfloat16) for d in dims}
    more = []
    width = 32
    while width <= widest:
        if (width, _ALIGN_BYTES // 2, 0) not in seen:  # no dim of this width with bf16 rows of 16-byte accesses
            more.append(3 * width // 4)
        width *= 2
    return [*dims, *more]


def binary_dim_class(dim: int, dtype: torch.dtype) -> tuple[int, int, int]:
    """What of a dim a binary depends on, for x of ``dtype``: its padded width, its launch's vector width (16-byte
    accesses or one element, launch_config) and its dim_constexpr. Two dims of one class launch the same binaries."""
    return padded_width(dim), launch_config(dim, dtype).vec, dim_constexpr(dim)


def prepare_jobs(dims: list[int]) -> list[tuple[int, torch.dtype, torch.dtype, str]]:
    """(dim, x dtype, weight dtype, call) for every call of PREPARED_CALLS at every dim of ``dims_of_every_width(dims)``
    and dtype pair of the contract, in the order of the dims (the most drawn first), each dim class
    (binary_dim_class) once, FIRST_CALLS at the first LEAD_DIMS dims ahead of all. An fp32 residual is another
    binary only for 16-bit x."""
    jobs = _jobs_in_dim_order(dims)
    lead = set(dims[:LEAD_DIMS])
    first = [job for job in jobs if job[0] in lead and job[3] in FIRST_CALLS]
    return [*first, *(job for job in jobs if not (job[0] in lead and job[3] in FIRST_CALLS))]


def _jobs_in_dim_order(dims: list[int]) -> list[tuple[int, torch.dtype, torch.dtype, str]]:
    """prepare_jobs' jobs dim after dim, each dim's pairs and calls together."""
    jobs = []
    seen = set()
    for dim in dims_of_every_width(dims):
        for x_dtype, w_dtype in CONTRACT_DTYPE_PAIRS:
            if (binary_dim_class(dim, x_dtype), x_dtype, w_dtype) in seen:
                continue
            seen.add((binary_dim_class(dim, x_dtype), x_dtype, w_dtype))
            for call in PREPARED_CALLS:
                if call == "fused_add_fp32_residual" and x_dtype == torch.float32:
                    continue
                jobs.append((dim, x_dtype, w_dtype, call))
    return jobs


class TritonRMSNormOp:
    """RMSNorm as Triton kernels in the canonical order: bitwise equal to the native reference.

    ``forward`` returns ``x.dtype`` and ``forward_fp32`` float32, both differentiable for x and weight;
    ``fused_add``, ``forward_offset`` and ``forward_unweighted`` are the variants of the backend protocol, and
    ``fused_add_`` is the fused add in place, as engines call it.
    Every dtype pair of the contract is taken (an fp32 weight multiplies the fp32 normalized row), and the fused
    add takes a residual in x's dtype or fp32. On the CPU the kernels run in Triton's interpreter
    (``interpreted`` is then True).
    """

    name = "triton"
    devices = ("cpu", "cuda")
    dtypes = SUPPORTED_DTYPES
    supports_backward = True
    interpreted: bool = _INTERPRETED
    dtype_pairs = CONTRACT_DTYPE_PAIRS
    fused_add_in_place = False
    fused_add_fp32_residual = True
    offset_dtype = "float32"
    rounding_class = "product_fp32"

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward(x, weight, eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self._run(x, weight, eps, False)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self._run(x, weight, eps, True)

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        """y = (x32 * inv) * (1 + w32), the offset formed in fp32; not differentiable."""
        check_inputs(x, weight, eps)
        self._check_device(x.device)
        return torch.ops.rmsnorm_conformance.triton_rms_norm(x, weight, float(eps), False, True)

    def forward_unweighted(self, x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        """y = x32 * inv rounded once; not differentiable."""
        check_unweighted_inputs(x, eps)
        self._check_device(x.device)
        return torch.ops.rmsnorm_conformance.triton_rms_norm(x, None, float(eps), False, False)

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """(y, residual_out): residual_out = x + residual rounded to residual's dtype, y its RMSNorm."""
        check_inputs(x, weight, eps)
        check_residual(x, residual, fp32_residual=True)
        self._check_device(x.device)
        if torch.compiler.is_compiling():
            return torch.ops.rmsnorm_conformance.triton_fused_add_rms_norm(x, residual, weight, float(eps))
        return _forward(x, weight, float(eps), x.dtype, residual=residual)

    def fused_add_(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """``fused_add`` in place, as inference engines call it: y into x, residual_out into residual; returns
        (x, residual). The same bits as ``fused_add``."""
        check_inputs(x, weight, eps)
        check_residual(x, residual, fp32_residual=True)
        self._check_device(x.device)
        if torch.compiler.is_compiling():  # the operator checks the memory when it runs
            torch.ops.rmsnorm_conformance.triton_fused_add_rms_norm_(x, residual, weight, float(eps))
            return x, residual
        check_in_place(x, residual)
        check_no_gradient_in_place(x, residual)
        _forward(x, weight, float(eps), x.dtype, residual=residual, in_place=True)
        # The kernel wrote through pointers: tell autograd, so that a graph that saved x or residual refuses to use it.
        torch.autograd.graph.increment_version((x, residual))
        return x, residual

    def _run(self, x: torch.Tensor, weight: torch.Tensor, eps: float, fp32_out: bool) -> torch.Tensor:
        if torch.compiler.is_compiling():
            check_inputs(x, weight, eps)
            return torch.ops.rmsnorm_conformance.triton_rms_norm(x, weight, float(eps), fp32_out, False)
        # The planned launch, written out in this one frame: at a few rows the host's work is the call's cost
        # (0.6-0.7 µs a call less than the earlier path's frames, key and hook test, which benchmarks/triton_latency.py
        # keeps; 1.8-2.8 µs less with the direct launch, at 1 to 256 rows of 4096 on an H200; 0.83-0.89x F.rms_norm).
        # The plan's key is _plan_key's tuple; the grad test reads the tensors' flags before the grad mode, which only
        # matters where one of them requires grad; the plan is unpacked into locals; the launch goes straight to the
        # binary's C launch function where Triton allows it (_launch_entry), with the pointers as integers (given
        # tensors, Triton's launcher calls data_ptr() on each and asks the driver about it).
        try:
            key = (x.shape, x.is_contiguous() or x.stride(), x.dtype, x.device, weight.shape,
                   weight.is_contiguous() or weight.stride(), weight.dtype, weight.device, type(eps), eps, fp32_out)
            plan = _PLANS.get(key)
            grad = (x.requires_grad or weight.requires_grad) and torch.is_grad_enabled()
        except (AttributeError, TypeError):  # not tensors, or an unhashable eps: the checks below say so
            key = plan = None
            grad = False
        if plan is not None and not grad:
            launch, head, grid, index, like, shape, out_dtype, device, tail = plan  # locals: no attribute reads
            xp, wp = x.data_ptr(), weight.data_ptr()
            # The plan holds where the pointers are aligned, the plan's device is the current one (its stream is
            # the one launched on) and no launch hook (a profiler) is installed; else the full path below.
            if (not (xp | wp) & (_ALIGN_BYTES - 1) and torch._C._cuda_getDevice() == index
                    and _RUNTIME_KNOBS.launch_enter_hook is _ENTER_HOOKS and not _ENTER_HOOKS.calls):
                y = torch.empty_like(x) if like else torch.empty(shape, dtype=out_dtype, device=device)
                yp = y.data_ptr()
                launch(grid, 1, 1, torch._C._cuda_getCurrentRawStream(index), *head, xp, xp, wp, yp, yp, *tail)
                return y
        check_inputs(x, weight, eps)
        self._check_device(x.device)
        out_dtype = torch.float32 if fp32_out else x.dtype
        if grad:
            return _RMSNormFunction.apply(x, weight, float(eps), out_dtype)
        y = _forward(x, weight, float(eps), out_dtype)[0]
        if key is not None and plan is None:
            plan = _make_plan(x, weight, float(eps), out_dtype)
            if plan is not None:
                _PLANS[key] = plan
        return y

    def prepare(self, device: torch.device, dims: list[int], part: int = 0, parts: int = 1) -> None:
        """Compile ahead, into Triton's cache, what calls at ``dims`` will launch (``prepare_jobs``): every
        ``parts``-th job from the ``part``-th. A worker's first launch of such a binary then loads it from the
        cache (milliseconds) instead of building it (0.2 to 0.9 s on an H200's host).
        The calls are two rows each, through the same launches as any call: the binaries are the ones the
        workers' calls look up. Nothing on the CPU (the interpreter compiles nothing)."""
        device = torch.device(device)
        if _INTERPRETED or device.type != "cuda" or self.unavailable_reason(device) is not None:
            return
        for job in prepare_jobs(dims)[part::parts]:
            self.prepared_call(*job, device=device)
        torch.cuda.synchronize(device)

    def prepared_call(self, dim: int, x_dtype: torch.dtype, w_dtype: torch.dtype, call: str,
                      device: torch.device) -> None:
        """One job of ``prepare``: ``call`` (of PREPARED_CALLS) on two rows of ``dim``."""
        x = torch.randn(2, dim, device=device, dtype=x_dtype)
        w = torch.randn(dim, device=device, dtype=w_dtype)
        if call == "forward":
            self.forward(x, w)
        elif call == "forward_fp32":
            self.forward_fp32(x, w)
        elif call == "fused_add":
            self.fused_add(x, torch.randn_like(x), w)
        elif call == "fused_add_fp32_residual":
            self.fused_add(x, torch.randn(x.shape, device=device), w)
        elif call == "backward":
            x.requires_grad_()
            w.requires_grad_()
            self.forward(x, w).backward(torch.randn_like(x))
        else:
            raise ValueError(f"{call!r} is not one of the prepared calls {PREPARED_CALLS}")

    @staticmethod
    def _check_device(device: torch.device) -> None:
        if device.type != "cuda" or _IMPORT_ERROR is not None:
            reason = TritonRMSNormOp.unavailable_reason(device)
            if reason is not None:
                raise RuntimeError(reason)

    @staticmethod
    def unavailable_reason(device: torch.device | str) -> str | None:
        """None when the kernels can run on ``device``, else a sentence saying why not."""
        device = torch.device(device)
        if _IMPORT_ERROR is not None:
            return f"triton is not importable ({_IMPORT_ERROR})"
        if device.type == "cpu" and not _INTERPRETED:
            return (
                "Triton runs on the CPU only in its interpreter, and TRITON_INTERPRET was not '1' when "
                "rmsnorm_conformance.backends.triton_rmsnorm was imported"
            )
        if device.type == "cuda" and not torch.cuda.is_available():
            return "no CUDA GPU is visible to torch"
        if device.type not in ("cpu", "cuda"):
            return f"the Triton backend runs on cpu (interpreted) and cuda, not {device.type}"
        return None

    def __repr__(self) -> str:
        return f"TritonRMSNormOp(interpreted={self.interpreted})"
