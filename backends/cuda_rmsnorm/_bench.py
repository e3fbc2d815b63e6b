"""A quick self-benchmark on one GPU: bandwidth against a device-to-device copy, and small-batch latency
against torch.nn.functional.rms_norm. The shared benchmark suite is the reference; this is a smoke check.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from types import ModuleType

import torch
import torch.nn.functional as F

# (rows, dim): Qwen3-8B's hidden norm over 64k tokens and its QK-norm over 16k tokens x 128 heads.
BANDWIDTH_SHAPES: tuple[tuple[int, int], ...] = ((65536, 4096), (2097152, 128))
LATENCY_ROWS: tuple[int, ...] = (1, 8, 64, 256)


def _median_ms(fn: Callable[[], object], reps: int = 25, warmup: int = 5) -> float:
    """Median of per-call CUDA-event times."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _per_call_us(fn: Callable[[], object], calls: int = 1000) -> float:
    """Back-to-back calls, host overhead included: what a small batch costs a caller."""
    for _ in range(20):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def _bandwidth(ext: ModuleType, rows: int, dim: int, device: str) -> list[str]:
    dtype = torch.bfloat16
    x = torch.randn(rows, dim, device=device, dtype=dtype)
    w = torch.randn(dim, device=device, dtype=dtype)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
    copy_ms = _median_ms(lambda: y.copy_(x))
    ours_ms = _median_ms(lambda: ext.forward(x, w, 1e-6, False))
    torch_ms = _median_ms(lambda: F.rms_norm(x, (dim,), w, 1e-6))
    copy_gbs = nbytes / copy_ms / 1e6
    lines = [f"forward {rows}x{dim} bf16: copy {copy_gbs:.0f} GB/s; ours {nbytes / ours_ms / 1e6:.0f} GB/s "
             f"({copy_ms / ours_ms:.3f} of copy); F.rms_norm {nbytes / torch_ms / 1e6:.0f} GB/s"]
    dy = torch.randn_like(x)
    _, rstd = ext.forward_train(x, w, 1e-6, False)
    bwd_bytes = 3 * x.numel() * x.element_size() + 2 * w.numel() * w.element_size() + rstd.numel() * 4
    bwd_ms = _median_ms(lambda: ext.backward(dy, x, w, rstd, True))
    lines.append(f"backward {rows}x{dim} bf16 (dx + dw): {bwd_bytes / bwd_ms / 1e6:.0f} GB/s "
                 f"({bwd_bytes / bwd_ms / 1e6 / copy_gbs:.3f} of copy)")
    return lines


def _latency(op: object, rows: int, dim: int, device: str, rounds: int = 7) -> str:
    x = torch.randn(rows, dim, device=device, dtype=torch.bfloat16)
    w = torch.randn(dim, device=device, dtype=torch.bfloat16)
    ours, theirs = [], []
    for _ in range(rounds):  # interleaved, so that a noisy moment of the host hits both
        ours.append(_per_call_us(lambda: op.forward(x, w, 1e-6)))
        theirs.append(_per_call_us(lambda: F.rms_norm(x, (dim,), w, 1e-6)))
    ours_us, theirs_us = statistics.median(ours), statistics.median(theirs)
    return (f"latency {rows}x{dim} bf16: ours {ours_us:.2f} us/call, F.rms_norm {theirs_us:.2f} us/call "
            f"(F.rms_norm / ours = {theirs_us / ours_us:.2f})")


def run(device: str = "cuda") -> list[str]:
    """Measure and return printable lines."""
    from . import CudaRMSNormOp, _require

    op = CudaRMSNormOp()
    ext = _require(torch.device(device))
    lines = [f"device: {torch.cuda.get_device_name(device)}, torch {torch.__version__}"]
    for rows, dim in BANDWIDTH_SHAPES:
        lines += _bandwidth(ext, rows, dim, device)
        torch.cuda.empty_cache()
    lines += [_latency(op, rows, dim, device) for dim in (4096, 128) for rows in LATENCY_ROWS]
    return lines
