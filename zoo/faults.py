"""Backends with planted faults of the device and of memory: a context-poisoning kernel, a write one row past the
output view, an int32 row offset that wraps, a request for a terabyte. Each is the native ground truth plus one
fault, and each names the rule that must catch it in ``breaks``; none may cost another backend a check.

The GPU faults have CPU twins so that CI runs their paths: a device fault is an error that reads like CUDA's
(``torch.AcceleratorError: CUDA error: device-side assert triggered``), taken for a lost context when the run's
environment sets ``RMSNORM_CONFORMANCE_SIMULATE_DEVICE_LOSS`` (on a GPU, ``torch.cuda.synchronize()`` decides);
the int32 wrap happens at ``RMSNORM_DEFECT_OFFSET_WRAP`` elements (2^31 unless set lower, so that CPU-sized
batches reach it). ``TritonDeviceAssert`` is the real thing, for a GPU.
"""

from __future__ import annotations

import os

import torch

from ..backends.native import NativeRMSNormOp
from ..contract.families import axis_a, axis_b, semantics
from ..contract.inputs import check_inputs, check_residual

# Rows past which the context-poisoning kernels index out of bounds (the batch size in the report that asked).
FAULT_ROWS = 300
# Rows past which the greedy kernel asks for a terabyte.
GREEDY_ROWS = 4096
OFFSET_WRAP_ENV = "RMSNORM_DEFECT_OFFSET_WRAP"


def _rows(x: torch.Tensor) -> int:
    return x.numel() // max(x.shape[-1], 1)


class DeviceAssertAboveRows(NativeRMSNormOp):
    """Breaks semantics.device_fault: above 300 rows its gather indexes a 300-entry table out of bounds, and the
    bounds check in the kernel fires a device-side assert.

    Kernels that map rows through a fixed-size table (a CUDA-graph bucket's row map, a paged cache's block table)
    and assert on the index poison the process's CUDA context this way: every later CUDA call of any backend in the
    process fails with the same error. The CPU twin raises the error torch would raise; the harness takes it for a
    lost context where the run's environment says so, as it would a GPU's failing synchronize.
    """

    name = "device_assert_above_300"
    breaks = semantics.DEVICE_FAULT.id

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if _rows(x) > FAULT_ROWS:
            raise _poison(_device_assert())
        return super().forward(x, weight, eps)


# The twins' sticky error, once one fired where the run simulates device loss: the harness asks ``poisoned`` (named
# by RMSNORM_CONFORMANCE_SIMULATE_DEVICE_LOSS=rmsnorm_conformance.zoo.faults:poisoned), and every later device touch
# of the process raises it again, as every CUDA call does after a device-side assert.
_POISONED: list[BaseException] = []
SIMULATE_ENV = "RMSNORM_CONFORMANCE_SIMULATE_DEVICE_LOSS"


def poisoned() -> BaseException | None:
    """The simulated context's sticky error, or None while it works."""
    return _POISONED[0] if _POISONED else None


def _poison(error: BaseException) -> BaseException:
    """Poison the simulated context with ``error`` (where the run simulates device loss); returns it, to raise."""
    if os.environ.get(SIMULATE_ENV) and not _POISONED:
        _POISONED.append(error)
    return error


def _device_assert() -> torch.AcceleratorError:
    return torch.AcceleratorError(
        "CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other "
        "API call, so the stacktrace below might be incorrect.")


class AsyncDeviceAssertAboveRows(NativeRMSNormOp):
    """Breaks semantics.device_fault: the same kernel, whose assert surfaces later, as a GPU's does: its own call
    returns, and the next call that waits on the device raises (the harness's synchronize after the call, or, where
    the harness does not wait first, whatever reads the device next: the RNG state the state put-back reads).

    The CPU twin poisons the simulated context (``poisoned``) and returns: every later device
    touch of the process raises, as every CUDA call does once a device-side assert has fired.
    """

    name = "async_device_assert_above_300"
    breaks = semantics.DEVICE_FAULT.id

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        y = super().forward(x, weight, eps)
        if _rows(x) > FAULT_ROWS:
            _poison(_device_assert())
        return y


class DeviceAssertInItsProbe(NativeRMSNormOp):
    """Breaks semantics.device_fault: its availability probe launches a test kernel that fires a device-side assert,
    so the fault surfaces in a fixture, before any check of it runs (a probe that runs a kernel, as a build-and-load
    backend's does). The process must end there, and no other backend's test may fail on the poisoned context."""

    name = "device_assert_in_its_probe"
    breaks = semantics.DEVICE_FAULT.id

    def unavailable_reason(self, device: torch.device) -> str | None:
        raise _poison(_device_assert())


class WritesRowPastOutput(NativeRMSNormOp):
    """Breaks semantics.bounds: its in-place fused add launches one program too many and writes a row of y one row
    past the end of x, the output view it was given.

    An off-by-one grid (``cdiv(rows + 1, ...)``, or ``rows`` taken from a padded buffer's capacity) writes the row
    after the view: in a padded static buffer that is the next request's row, in a tight allocation whatever lies
    there. The rows it was given are right, so only a guard zone after the view can see it.
    """

    name = "writes_row_past_output"
    breaks = semantics.BOUNDS.id
    fused_add_in_place = True

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
        check_inputs(x, weight, eps)
        check_residual(x, residual)
        y, residual_out = super().fused_add(x, residual, weight, eps)
        residual.copy_(residual_out)
        x.copy_(y)
        rows, dim = _rows(x), x.shape[-1]
        row_stride = x.stride(-2) if x.dim() >= 2 else dim
        start = x.storage_offset() + rows * row_stride  # where row `rows` would begin
        room = x.untyped_storage().nbytes() // x.element_size() - start
        if rows and room > 0:  # the extra program's store: only within this allocation (no real damage here)
            past = x.new_empty(0).set_(x.untyped_storage(), start, (min(dim, room),), (1,))
            past.copy_(y.reshape(-1, dim)[-1, : past.numel()])


class Int32OffsetWrap(NativeRMSNormOp):
    """Breaks axis_b.output: it forms each row's offset as row * row_stride in 32 bits, so rows whose offset
    passes 2^31 elements read the row the wrapped offset points at.

    Kernels that index with int32 program ids times int32 strides are right until a batch passes 2^31 elements
    (524,288 rows of 4096): the rows near the end of a large prefill then read and write the wrong memory. The same
    rows alone are right, so Axis-A sees it too (the 32-bit offset cases check both). The twin wraps at
    RMSNORM_DEFECT_OFFSET_WRAP elements, 2^31 unless set lower for CPU-sized batches.
    """

    name = "int32_offset_wrap"
    breaks = axis_b.OUTPUT.id

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        check_inputs(x, weight, eps)
        wrap = int(os.environ.get(OFFSET_WRAP_ENV, str(2**31)))
        if x.dim() != 2 or x.numel() == 0:
            return super().forward(x, weight, eps)
        row_stride = x.stride(0)
        offsets = torch.arange(x.shape[0], device=x.device, dtype=torch.int64) * row_stride
        if int(offsets[-1]) < wrap:
            return super().forward(x, weight, eps)
        read = torch.remainder(offsets, wrap) // row_stride  # the row the wrapped offset lands on
        return super().forward(x[read], weight, eps)


class AsksForATerabyte(NativeRMSNormOp):
    """Breaks axis_a.batch_size: above 4096 rows it allocates a terabyte of workspace and runs out of memory.

    A split reduction that sizes its workspace from an overflowed row count asks for an impossible allocation;
    torch raises OutOfMemoryError. That is a failure of this backend's check alone: the harness frees the cache
    and the next check, and every other backend's, starts with the memory it had.
    """

    name = "asks_for_a_terabyte"
    breaks = axis_a.BATCH_SIZE.id

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if _rows(x) > GREEDY_ROWS:
            if x.is_cuda:
                torch.empty(1 << 40, dtype=torch.uint8, device=x.device)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1024.00 GiB (the CPU twin)")
        return super().forward(x, weight, eps)


class TritonDeviceAssert(NativeRMSNormOp):
    """Breaks semantics.device_fault: the Triton kernel that stores its rows takes each row's destination from a
    300-entry table, asserts on the index, and past the table stores a terabyte away: a device-side assert.

    The GPU original of DeviceAssertAboveRows. ``triton.jit(debug=True)`` compiles the assert in without
    TRITON_DEBUG; were it compiled out, the store's address (the row's offset plus 2^40 bytes, a masked store whose
    row mask is missing) is an illegal memory access, which poisons the context as surely. Rows within the table
    are the native ground truth's, so it fails only by its fault.
    """

    name = "triton_device_assert"
    breaks = semantics.DEVICE_FAULT.id
    devices = ("cuda",)
    dtypes = (torch.bfloat16,)  # each of its faulting tests costs a worker: one dtype shows the fault
    supports_backward = False

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        y = super().forward(x, weight, eps)
        rows, dim = _rows(y), y.shape[-1]
        if rows == 0 or dim == 0:
            return y
        src = y.reshape(rows, dim).contiguous()
        out = torch.empty_like(src)
        _store_rows()[(rows,)](src, out, dim, FAULT_ROWS, BLOCK=max(16, 1 << (dim - 1).bit_length()))
        return out.reshape(y.shape)


_KERNEL: list = []


def _store_rows():
    """The faulting store kernel, compiled on first use (Triton is imported only where this backend runs)."""
    if not _KERNEL:
        import triton
        import triton.language as tl

        @triton.jit(debug=True)
        def store_rows(src, dst, n_cols, table_rows, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            tl.device_assert(row < table_rows, "row index past the launch table")
            cols = tl.arange(0, BLOCK)
            mask = cols < n_cols
            values = tl.load(src + row.to(tl.int64) * n_cols + cols, mask=mask)
            far = (row >= table_rows).to(tl.int64) * (1 << 40)
            tl.store(dst + row.to(tl.int64) * n_cols + far + cols, values, mask=mask)

        _KERNEL.append(store_rows)
    return _KERNEL[0]


FAULT_DEFECTS: tuple[type[NativeRMSNormOp], ...] = (
    DeviceAssertAboveRows, AsyncDeviceAssertAboveRows, DeviceAssertInItsProbe, WritesRowPastOutput, Int32OffsetWrap,
    AsksForATerabyte, TritonDeviceAssert,
)
