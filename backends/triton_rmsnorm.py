"""RMSNorm in Triton: forward, backward (dx and a deterministic dw without atomics) and a lean launch path.

Batch invariance comes from the launch configuration: every compile-time choice (columns per tile, rows per
program, warps, the alignment the loads may assume) is a function of (dim, dtype) alone, and no runtime
argument is specialised, so one binary serves every batch and every row is reduced by the same code.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, NamedTuple

import torch

from rmsnorm_conformance.contract.inputs import SUPPORTED_DTYPES, check_inputs

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


class LaunchConfig(NamedTuple):
    """The compile-time shape of one kernel launch; a function of (dim, dtype, interpreted) only."""

    block: int  # columns per tile: next power of two of dim, or the chunk width when a row is looped
    rows: int  # rows per program (forward) or per tile (backward)
    chunks: int  # column chunks per row; 1 keeps the whole row in registers
    vec: int  # elements per 16-byte access; every row start is a multiple of it (else the input is copied)
    num_warps: int


class _Tuning(NamedTuple):
    tile: int  # elements per program that the rows-per-program choice aims at
    max_rows: int  # cap on rows per program for tiny dims
    max_block: int  # widest row kept whole in one tile; wider rows loop over chunks of loop_block
    loop_block: int
    warp_elems: int  # elements per warp that the warp count aims at
    max_warps: int


# GPU: 4096 elements per program reaches copy speed at both target dims: one row of 4096 and 32 rows of 128
# per program ran at 0.97-0.98 of a device copy on an H200 (bf16, fp16, fp32), and 8 warps at 4096 beat 16.
_GPU_FWD = _Tuning(tile=4096, max_rows=128, max_block=16384, loop_block=4096, warp_elems=512, max_warps=16)
# The backward holds x, dy, weight and a dw accumulator per element, so it loops sooner.
_GPU_BWD = _Tuning(tile=4096, max_rows=128, max_block=8192, loop_block=4096, warp_elems=512, max_warps=16)
# The interpreter pays a fixed Python cost per operation and per program: big tiles, few programs.
_INTERP = _Tuning(tile=1 << 16, max_rows=1024, max_block=1 << 20, loop_block=1 << 16, warp_elems=512,
                  max_warps=4)

# dw: rows are split into at most this many chunks, each summed by one program into an fp32 partial row,
# then the partials are added in a fixed order. 512 is about four programs per SM on a 132-SM H200; on it
# 256 to 512 measured alike and 1024 or more slower (more partial rows to write and add).
_GPU_MAX_DW_CHUNKS = 512
_INTERP_MAX_DW_CHUNKS = 8
_MIN_DW_CHUNK_ROWS = 16  # below this a chunk's partial row costs more traffic than its rows


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@functools.cache
def launch_config(dim: int, dtype: torch.dtype, *, backward: bool = False,
                  interpreted: bool = _INTERPRETED) -> LaunchConfig:
    """The configuration for rows of ``dim`` elements of ``dtype``: never a function of the row count."""
    tuning = _INTERP if interpreted else (_GPU_BWD if backward else _GPU_FWD)
    full = _next_pow2(dim)
    if full <= tuning.max_block:
        block, chunks = full, 1
        rows = min(max(tuning.tile // block, 1), tuning.max_rows)
    else:
        block, chunks, rows = tuning.loop_block, -(-dim // tuning.loop_block), 1
    per_access = _ALIGN_BYTES // torch.empty((), dtype=dtype).element_size()
    vec = min(per_access, dim & -dim)  # largest power of two dividing dim, so contiguous rows qualify
    num_warps = min(max(rows * block // tuning.warp_elems, 4), tuning.max_warps)
    return LaunchConfig(block=block, rows=rows, chunks=chunks, vec=vec, num_warps=num_warps)


def dw_partition(n_rows: int, rows_per_tile: int, *, interpreted: bool = _INTERPRETED) -> tuple[int, int]:
    """(chunk_rows, n_chunks): the fixed split of the batch into row chunks for dw's partial sums.

    A function of the row count (dw sums the whole batch, so it cannot be batch-invariant), but the same
    for the same inputs, which is what makes dw bitwise reproducible run to run.
    """
    max_chunks = _INTERP_MAX_DW_CHUNKS if interpreted else _GPU_MAX_DW_CHUNKS
    n_chunks = min(max(-(-n_rows // _MIN_DW_CHUNK_ROWS), 1), max_chunks)
    chunk_rows = -(-n_rows // n_chunks)
    chunk_rows = -(-chunk_rows // rows_per_tile) * rows_per_tile
    return chunk_rows, max(-(-n_rows // chunk_rows), 1)


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
        """Load and widen to fp32; masked lanes read as 0."""
        if _EMULATE_BF16 and ptrs.dtype.element_ty == tl.bfloat16:
            bits = tl.load(ptrs.to(tl.pointer_type(tl.uint16)), mask=mask, other=0)
            return (bits.to(tl.uint32) << 16).to(tl.float32, bitcast=True)
        else:
            return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)

    @_device_function
    def _store_f32(ptrs, value, mask):  # noqa: ANN001
        """Round fp32 ``value`` to the pointee dtype (to nearest even) and store it."""
        if _EMULATE_BF16 and ptrs.dtype.element_ty == tl.bfloat16:
            bits = value.to(tl.uint32, bitcast=True)
            # Wrap-around only happens for NaN bit patterns, which the where replaces; the interpreter would
            # otherwise check every add for overflow at a cost of several passes over the tile.
            rounding = tl.add((bits >> 16) & 1, 0x7FFF, sanitize_overflow=False)
            rounded = tl.add(bits, rounding, sanitize_overflow=False) >> 16
            rounded = tl.where(value != value, 0x7FC0, rounded)  # torch's quiet NaN
            tl.store(ptrs.to(tl.pointer_type(tl.uint16)), rounded.to(tl.uint16), mask=mask)
        else:
            tl.store(ptrs, value.to(ptrs.dtype.element_ty), mask=mask)

    if _INTERPRETED:
        _SUM_COMBINE = getattr(tl.standard, "_sum_combine", None)

        def _sum(x, axis):  # noqa: ANN001
            """tl.sum without its jit wrapper, whose every call re-patches triton.language in the interpreter:
            straight to the reduction that the interpreter runs as one numpy sum."""
            if _SUM_COMBINE is None:
                return tl.sum(x, axis=axis)
            return tl.reduce(x, axis, _SUM_COMBINE)
    else:

        @triton.jit
        def _sum(x, axis: tl.constexpr):  # noqa: ANN001
            return tl.sum(x, axis=axis)

    @_device_function
    def _inv_rms(sum_sq, eps, DIM: tl.constexpr):  # noqa: ANN001
        """1 / sqrt(sum_sq / DIM + eps), every step rounded correctly (no approximate rsqrt or division)."""
        mean_sq = tl.div_rn(sum_sq, tl.full(sum_sq.shape, DIM, tl.float32))
        return tl.div_rn(tl.full(sum_sq.shape, 1.0, tl.float32), tl.sqrt_rn(mean_sq + eps))

    @triton.jit(do_not_specialize=["n_rows", "x_row_stride", "eps"])
    def _rms_norm_fwd_kernel(
        x_ptr, w_ptr, y_ptr, n_rows, x_row_stride, eps,  # noqa: ANN001
        DIM: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, CHUNKS: tl.constexpr,
        VEC: tl.constexpr,
    ):
        """y = (x * inv_rms) * w for ROWS rows, y contiguous. Each row is reduced on its own, by code that
        depends on nothing but the constexprs, so its bits cannot depend on the other rows."""
        rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
        row_mask = rows < n_rows
        x_rows = rows * x_row_stride
        if VEC > 1:  # the caller guarantees it: it lets the loads be 16 bytes wide
            x_rows = tl.multiple_of(x_rows, VEC)
        y_rows = rows * DIM
        cols = tl.arange(0, BLOCK)
        if CHUNKS == 1:
            col_mask = cols < DIM
            mask = row_mask[:, None] & col_mask[None, :]
            x = _load_f32(x_ptr + x_rows[:, None] + cols[None, :], mask)
            inv = _inv_rms(_sum(x * x, 1), eps, DIM)
            # weight after the reduction: loaded first it stays live through it, costing registers and
            # so programs per SM, which the bandwidth of large batches depends on.
            w = _load_f32(w_ptr + cols, col_mask)
            _store_f32(y_ptr + y_rows[:, None] + cols[None, :], (x * inv[:, None]) * w[None, :], mask)
        else:
            # Rows too wide for registers: per-column running sums over the chunks, then one tree; the
            # second pass reads the row again (from L2 at these sizes).
            acc = tl.full([ROWS, BLOCK], 0.0, tl.float32)
            for c in range(CHUNKS):
                ccols = c * BLOCK + cols
                mask = row_mask[:, None] & (ccols < DIM)[None, :]
                x = _load_f32(x_ptr + x_rows[:, None] + ccols[None, :], mask)
                acc += x * x
            inv = _inv_rms(_sum(acc, 1), eps, DIM)
            for c in range(CHUNKS):
                ccols = c * BLOCK + cols
                col_mask = ccols < DIM
                mask = row_mask[:, None] & col_mask[None, :]
                x = _load_f32(x_ptr + x_rows[:, None] + ccols[None, :], mask)
                w = _load_f32(w_ptr + ccols, col_mask)
                _store_f32(y_ptr + y_rows[:, None] + ccols[None, :], (x * inv[:, None]) * w[None, :], mask)

    @triton.jit(do_not_specialize=["n_rows", "x_row_stride", "g_row_stride", "chunk_rows", "eps"])
    def _rms_norm_bwd_kernel(
        x_ptr, w_ptr, g_ptr, dx_ptr, part_ptr,  # noqa: ANN001
        n_rows, x_row_stride, g_row_stride, chunk_rows, eps,  # noqa: ANN001
        DIM: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, CHUNKS: tl.constexpr,
        VEC: tl.constexpr, STORE_DX: tl.constexpr,
    ):
        """dx for the rows of one chunk, and the chunk's fp32 partial of dw = sum over its rows of g * xhat.

        With xhat = x * inv_rms, dx = (g*w - xhat * mean(g*w*xhat)) * inv_rms: a function of its own row,
        computed in ROWS-row tiles exactly like the forward. The partial goes to row ``program_id`` of
        part_ptr, which no other program touches: no atomics, and the same bits on every run.
        """
        chunk = tl.program_id(0).to(tl.int64)
        start = chunk * chunk_rows
        end = tl.minimum(start + chunk_rows, n_rows)
        cols = tl.arange(0, BLOCK)
        if CHUNKS == 1:
            col_mask = cols < DIM
            w = _load_f32(w_ptr + cols, col_mask)
            acc = tl.full([ROWS, BLOCK], 0.0, tl.float32)
            first = start
            while first < end:
                rows = first + tl.arange(0, ROWS)
                mask = (rows < end)[:, None] & col_mask[None, :]
                x_rows = rows * x_row_stride
                g_rows = rows * g_row_stride
                if VEC > 1:
                    x_rows = tl.multiple_of(x_rows, VEC)
                    g_rows = tl.multiple_of(g_rows, VEC)
                x = _load_f32(x_ptr + x_rows[:, None] + cols[None, :], mask)
                g = _load_f32(g_ptr + g_rows[:, None] + cols[None, :], mask)
                inv = _inv_rms(_sum(x * x, 1), eps, DIM)
                xhat = x * inv[:, None]
                gw = g * w[None, :]
                if STORE_DX:
                    dot = tl.div_rn(_sum(gw * xhat, 1), tl.full([ROWS], DIM, tl.float32))
                    _store_f32(dx_ptr + (rows * DIM)[:, None] + cols[None, :],
                               (gw - xhat * dot[:, None]) * inv[:, None], mask)
                acc += g * xhat
                first += ROWS
            tl.store(part_ptr + chunk * DIM + cols, _sum(acc, 0), mask=col_mask)
        else:
            # Wide rows, one at a time: a first pass for the two row sums, a second for dx; the partial row
            # (zeroed by the caller) is read, added to and written back by this program alone.
            row = start
            while row < end:
                x_row = row * x_row_stride
                g_row = row * g_row_stride
                if VEC > 1:
                    x_row = tl.multiple_of(x_row, VEC)
                    g_row = tl.multiple_of(g_row, VEC)
                acc_sq = tl.full([BLOCK], 0.0, tl.float32)
                acc_dot = tl.full([BLOCK], 0.0, tl.float32)
                for c in range(CHUNKS):
                    ccols = c * BLOCK + cols
                    col_mask = ccols < DIM
                    x = _load_f32(x_ptr + x_row + ccols, col_mask)
                    g = _load_f32(g_ptr + g_row + ccols, col_mask)
                    w = _load_f32(w_ptr + ccols, col_mask)
                    acc_sq += x * x
                    acc_dot += (g * w) * x
                inv = _inv_rms(_sum(acc_sq, 0), eps, DIM)
                dot = tl.div_rn(_sum(acc_dot, 0) * inv, DIM * 1.0)
                for c in range(CHUNKS):
                    ccols = c * BLOCK + cols
                    col_mask = ccols < DIM
                    x = _load_f32(x_ptr + x_row + ccols, col_mask)
                    g = _load_f32(g_ptr + g_row + ccols, col_mask)
                    xhat = x * inv
                    if STORE_DX:
                        w = _load_f32(w_ptr + ccols, col_mask)
                        _store_f32(dx_ptr + row * DIM + ccols, ((g * w) - xhat * dot) * inv, col_mask)
                    part = tl.load(part_ptr + chunk * DIM + ccols, mask=col_mask, other=0.0)
                    tl.store(part_ptr + chunk * DIM + ccols, part + g * xhat, mask=col_mask)
                row += 1

    @triton.jit(do_not_specialize=["n_chunks"])
    def _rms_norm_dw_kernel(
        part_ptr, dw_ptr, n_chunks,  # noqa: ANN001
        DIM: tl.constexpr, BLOCK: tl.constexpr, CHUNK_TILE: tl.constexpr,
    ):
        """dw[cols] = the fp32 partial rows added in a fixed order: CHUNK_TILE running sums, then a tree."""
        cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        col_mask = cols < DIM
        acc = tl.full([CHUNK_TILE, BLOCK], 0.0, tl.float32)
        first = 0
        while first < n_chunks:
            chunks = first + tl.arange(0, CHUNK_TILE)
            mask = (chunks < n_chunks)[:, None] & col_mask[None, :]
            offsets = (chunks.to(tl.int64) * DIM)[:, None] + cols[None, :]
            acc += tl.load(part_ptr + offsets, mask=mask, other=0.0)
            first += CHUNK_TILE
        _store_f32(dw_ptr + cols, _sum(acc, 0), col_mask)


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

    def __call__(self, grid: int, args: tuple, num_warps: int, device: torch.device) -> None:
        if _INTERPRETED:
            # NaN and Inf inputs are part of the contract; numpy's warnings about them are noise here.
            with np.errstate(all="ignore"):
                self.kernel[(grid,)](*args)
            return
        if device.index != torch._C._cuda_getDevice():  # what torch.cuda.current_device() returns
            with torch.cuda.device(device):
                self(grid, args, num_warps, device)
            return
        key = (
            device.index,
            num_warps,
            args[self._runtime :],
            # Triton types an int as i64 from 2**31 on: a different binary.
            tuple([a.dtype if isinstance(a, torch.Tensor) else type(a) is int and a >= _INT32_LIMIT
                   for a in args[: self._runtime]]),
        )
        entry = self._compiled.get(key)
        if entry is not None and not _launch_hooks_installed():
            run, function, packed = entry
            stream = torch._C._cuda_getCurrentRawStream(device.index)
            run(grid, 1, 1, stream, function, packed, None, None, None, *args)
            return
        compiled = self.kernel[(grid,)](*args, num_warps=num_warps, enable_fp_fusion=False)
        if key not in self._compiled:
            try:
                entry = (compiled.run, compiled.function, compiled.packed_metadata)
            except AttributeError:  # a Triton whose compiled kernels look different: stay on its own path
                entry = None
            self._compiled[key] = entry


def _launch_hooks_installed() -> bool:
    hook = triton.knobs.runtime.launch_enter_hook
    return bool(getattr(hook, "calls", hook))  # a HookChain (empty: no hooks), a callable, or None


if triton is not None:
    _launch_fwd = _Launcher(_rms_norm_fwd_kernel)
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


def _forward(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype) -> torch.Tensor:
    """Launch the forward kernel on validated inputs; zero rows return an empty tensor without a launch."""
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=out_dtype, device=x.device)
    dim = x.shape[-1]
    cfg = launch_config(dim, x.dtype)
    x2, stride = _rows_2d(x, dim, cfg.vec)
    n_rows = x2.shape[0]
    y = torch.empty((n_rows, dim), dtype=out_dtype, device=x.device)
    _launch_fwd(
        -(-n_rows // cfg.rows),
        (x2, _aligned_weight(weight), y, n_rows, stride, eps, dim, cfg.block, cfg.rows, cfg.chunks, cfg.vec),
        cfg.num_warps,
        x.device,
    )
    return y if x.dim() == 2 else y.view(x.shape)


def _backward(
    x: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor, eps: float, need_dx: bool, need_dw: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """dx (in x.dtype) and dw (in weight.dtype), each only if asked for."""
    if x.numel() == 0:
        return (torch.empty_like(x) if need_dx else None), (torch.zeros_like(weight) if need_dw else None)
    dim = x.shape[-1]
    cfg = launch_config(dim, x.dtype, backward=True)
    x2, x_stride = _rows_2d(x, dim, cfg.vec)
    g2, g_stride = _rows_2d(grad, dim, cfg.vec)
    w = _aligned_weight(weight)
    n_rows = x2.shape[0]
    chunk_rows, n_chunks = dw_partition(n_rows, cfg.rows)
    make = torch.zeros if cfg.chunks > 1 else torch.empty  # the looped kernel adds into its partial row
    partials = make((n_chunks, dim), dtype=torch.float32, device=x.device)
    dx = torch.empty((n_rows, dim), dtype=x.dtype, device=x.device) if need_dx else partials
    _launch_bwd(
        n_chunks,
        (x2, w, g2, dx, partials, n_rows, x_stride, g_stride, chunk_rows, eps,
         dim, cfg.block, cfg.rows, cfg.chunks, cfg.vec, need_dx),
        cfg.num_warps,
        x.device,
    )
    dw = None
    if need_dw:
        dw = torch.empty_like(w)
        block, chunk_tile = _dw_reduce_shape(dim)
        _launch_dw(
            -(-dim // block),
            (partials, dw, n_chunks, dim, block, chunk_tile),
            4,
            x.device,
        )
    return (dx.view(x.shape) if need_dx else None), dw


def _dw_reduce_shape(dim: int) -> tuple[int, int]:
    """(columns per program, partial rows added per step) for the dw reduction."""
    if _INTERPRETED:  # a handful of partial rows: one program, one step
        return min(_next_pow2(dim), 1 << 16), _next_pow2(_INTERP_MAX_DW_CHUNKS)
    return min(_next_pow2(dim), 256), 16


class _RMSNormFunction(torch.autograd.Function):
    """Differentiable wrapper: saves x and weight, recomputes the row statistics in the backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype
                ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return _forward(x, weight, eps, out_dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx, dw = _backward(x, weight, grad, ctx.eps, need_dx, need_dw)
        return dx, dw, None, None


class TritonRMSNormOp:
    """RMSNorm as Triton kernels: fp32 accumulation, bitwise batch-invariant, differentiable.

    ``forward`` returns ``x.dtype`` and ``forward_fp32`` float32; both are differentiable for x and
    weight. On the CPU the kernels run in Triton's interpreter (``interpreted`` is then True).
    """

    name = "triton"
    devices = ("cpu", "cuda")
    dtypes = SUPPORTED_DTYPES
    supports_backward = True
    interpreted: bool = _INTERPRETED

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self.forward(x, weight, eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self._run(x, weight, eps, None)

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return self._run(x, weight, eps, torch.float32)

    @staticmethod
    def _run(
        x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype | None
    ) -> torch.Tensor:
        check_inputs(x, weight, eps)
        if x.device.type != "cuda" or _IMPORT_ERROR is not None:
            reason = TritonRMSNormOp.unavailable_reason(x.device)
            if reason is not None:
                raise RuntimeError(reason)
        out_dtype = out_dtype or x.dtype
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
            return _RMSNormFunction.apply(x, weight, float(eps), out_dtype)
        return _forward(x, weight, float(eps), out_dtype)

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
