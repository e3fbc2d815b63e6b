"""The CUDA backend's own benchmark on one GPU: bandwidth of the forward, the backward (dx + dw) and the fused
add against a device-to-device copy measured in the same run, and the per-call latency of small batches
against torch.nn.functional.rms_norm and a copy, eager, through the backend's public methods.

``python -m rmsnorm_conformance.backends.cuda_rmsnorm --bench [--json PATH]`` prints a table and can write
the records as JSON (one record per variant, shape and dtype with ``gbps`` and ``copy_gbps``; latency records
with ``rows``, ``us`` and the ``F.rms_norm`` and copy figures of the same run).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

# (rows, dim): Qwen3-8B's hidden norm over 64k tokens and its QK-norm over 16k tokens x 128 heads.
BANDWIDTH_SHAPES: tuple[tuple[int, int], ...] = ((65536, 4096), (2097152, 128))
LATENCY_ROWS: tuple[int, ...] = (1, 8, 64, 256)
LATENCY_DIM = 4096


def _median_ms(fn: Callable[[], object], reps: int = 30, warmup: int = 5) -> float:
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


def _per_call_us(fn: Callable[[], object], calls: int = 2000) -> float:
    """Back-to-back eager calls, host overhead included: what a small batch costs a caller."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def _record(variant: str, rows: int, dim: int, dtype: torch.dtype, nbytes: int, ms: float,
            copy_gbps: float) -> dict[str, Any]:
    gbps = nbytes / ms / 1e6
    return {"backend": "cuda", "variant": variant, "rows": rows, "dim": dim,
            "dtype": str(dtype).removeprefix("torch."), "bytes": nbytes, "ms": round(ms, 5),
            "gbps": round(gbps, 1), "copy_gbps": round(copy_gbps, 1), "of_copy": round(gbps / copy_gbps, 4)}


def bandwidth(op: Any, rows: int, dim: int, dtype: torch.dtype = torch.bfloat16,
              device: str = "cuda") -> list[dict[str, Any]]:
    """Forward, forward_fp32, backward (dx + dw) and fused add at one shape, each against a copy of its size."""
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, dim, device=device, dtype=dtype, generator=gen)
    w = 1 + 0.1 * torch.randn(dim, device=device, dtype=dtype, generator=gen)
    esize = x.element_size()
    elems = x.numel()
    y = torch.empty_like(x)
    # The copy twice, before and after the kernels; the faster counts, so that no clock ramp flatters them.
    copy_ms = _median_ms(lambda: y.copy_(x))
    copy_gbps = 2 * elems * esize / copy_ms / 1e6
    out = [{"backend": "copy", "variant": "copy", "rows": rows, "dim": dim,
            "dtype": str(dtype).removeprefix("torch."), "bytes": 2 * elems * esize, "ms": round(copy_ms, 5),
            "gbps": round(copy_gbps, 1),
            "copy_gbps": round(copy_gbps, 1), "of_copy": 1.0}]
    # Forward: x read, y written (the weight is noise at these sizes and left out, as for the copy).
    out.append(_record("forward", rows, dim, dtype, 2 * elems * esize,
                       _median_ms(lambda: op.forward(x, w)), copy_gbps))
    out.append(_record("forward_fp32", rows, dim, dtype, elems * (esize + 4),
                       _median_ms(lambda: op.forward_fp32(x, w)), copy_gbps))
    out.append(_record("forward_offset", rows, dim, dtype, 2 * elems * esize,
                       _median_ms(lambda: op.forward_offset(x, w)), copy_gbps))
    # Fused add: x and residual read, y and residual_out written; against the copy's bandwidth.
    r = torch.randn_like(x)
    out.append(_record("fused_add", rows, dim, dtype, 4 * elems * esize,
                       _median_ms(lambda: op.fused_add(x, r, w)), copy_gbps))
    xi, ri = x.clone(), r.clone()
    out.append(_record("fused_add_in_place", rows, dim, dtype, 4 * elems * esize,
                       _median_ms(lambda: op.fused_add_(xi, ri, w)), copy_gbps))
    # Backward: x and dy read, dx written (dw and its workspace are counted as overhead, as the issue says).
    from . import _ops

    dy = torch.randn_like(x)
    backward = _ops.op("rms_norm_backward")
    out.append(_record("backward", rows, dim, dtype, 3 * elems * esize,
                       _median_ms(lambda: backward(dy, x, w, 1e-6, True)), copy_gbps))
    out.append(_record("backward_dx_only", rows, dim, dtype, 3 * elems * esize,
                       _median_ms(lambda: backward(dy, x, w, 1e-6, False)), copy_gbps))
    torch_ms = _median_ms(lambda: F.rms_norm(x, (dim,), w, 1e-6))
    out.append({**_record("forward", rows, dim, dtype, 2 * elems * esize, torch_ms, copy_gbps),
                "backend": "torch_rms_norm"})
    copy_again = 2 * elems * esize / _median_ms(lambda: y.copy_(x)) / 1e6
    if copy_again > copy_gbps:
        out[0]["gbps"] = round(copy_again, 1)
        for r in out:
            r["copy_gbps"] = round(copy_again, 1)
            r["of_copy"] = round(r["gbps"] / copy_again, 4)
    return out


def latency(op: Any, rows: int, dim: int = LATENCY_DIM, dtype: torch.dtype = torch.bfloat16,
            device: str = "cuda", rounds: int = 7) -> dict[str, Any]:
    """Per-call µs of op.forward, F.rms_norm and a copy, interleaved so a noisy moment hits all three."""
    gen = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(rows, dim, device=device, dtype=dtype, generator=gen)
    w = torch.randn(dim, device=device, dtype=dtype, generator=gen)
    y = torch.empty_like(x)
    ours, theirs, copies = [], [], []
    for _ in range(rounds):
        ours.append(_per_call_us(lambda: op.forward(x, w, 1e-6)))
        theirs.append(_per_call_us(lambda: F.rms_norm(x, (dim,), w, 1e-6)))
        copies.append(_per_call_us(lambda: y.copy_(x)))
    us, torch_us, copy_us = statistics.median(ours), statistics.median(theirs), statistics.median(copies)
    return {"backend": "cuda", "variant": "latency", "rows": rows, "dim": dim,
            "dtype": str(dtype).removeprefix("torch."), "us": round(us, 2),
            "torch_rms_norm_us": round(torch_us, 2), "copy_us": round(copy_us, 2),
            "of_torch": round(us / torch_us, 3)}


def latency_paths(op: Any, rows: int = 1, dim: int = LATENCY_DIM, dtype: torch.dtype = torch.bfloat16,
                  device: str = "cuda") -> list[dict[str, Any]]:
    """Per-call µs of each way into the forward, and of an allocation alone: where the host time goes."""
    from . import _ops

    gen = torch.Generator(device=device).manual_seed(2)
    x = torch.randn(rows, dim, device=device, dtype=dtype, generator=gen)
    w = torch.randn(dim, device=device, dtype=dtype, generator=gen)
    overload = _ops.op("rms_norm")
    paths: dict[str, Callable[[], object]] = {
        "backend.forward": lambda: op.forward(x, w, 1e-6),
        "entry used by the backend": lambda: _ops.rms_norm(x, w, 1e-6, False),
        "OpOverload._op (boxed)": lambda: overload._op(x, w, 1e-6, False),
        "torch.ops OpOverload": lambda: overload(x, w, 1e-6, False),
        "F.rms_norm": lambda: F.rms_norm(x, (dim,), w, 1e-6),
        "torch.empty_like": lambda: torch.empty_like(x),
    }
    out = []
    for name, fn in paths.items():
        us = statistics.median(_per_call_us(fn) for _ in range(5))
        out.append({"backend": "cuda", "variant": "latency_path", "path": name, "rows": rows, "dim": dim,
                    "dtype": str(dtype).removeprefix("torch."), "us": round(us, 2)})
    return out


def _warm_up(device: str) -> None:
    """Half a second of copies, so that the clocks have ramped before the first measurement."""
    a = torch.empty(1 << 28, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    while True:
        for _ in range(50):
            b.copy_(a)
        end.record()
        end.synchronize()
        if start.elapsed_time(end) > 500:
            return


def run(device: str = "cuda") -> list[dict[str, Any]]:
    """Every record, bandwidth then latency."""
    from . import CudaRMSNormOp
    from ._ops import require

    require(torch.device(device))
    op = CudaRMSNormOp()
    _warm_up(device)
    records: list[dict[str, Any]] = []
    for rows, dim in BANDWIDTH_SHAPES:
        records += bandwidth(op, rows, dim, device=device)
        torch.cuda.empty_cache()
    records += [latency(op, rows, device=device) for rows in LATENCY_ROWS]
    records += latency_paths(op, device=device)
    return records


def render(records: list[dict[str, Any]]) -> list[str]:
    """A markdown table of the records."""
    lines = ["| backend | variant | shape | dtype | GB/s | copy GB/s | of copy |", "|---|---|---|---|---|---|---|"]
    for r in records:
        if "gbps" not in r:
            continue
        lines.append(f"| {r['backend']} | {r['variant']} | {r['rows']}x{r['dim']} | {r['dtype']} | {r['gbps']:.0f} "
                     f"| {r['copy_gbps']:.0f} | {r['of_copy']:.3f} |")
    lines += ["", "| rows x dim | cuda µs/call | F.rms_norm µs/call | copy µs/call | cuda / F.rms_norm |",
              "|---|---|---|---|---|"]
    for r in records:
        if r["variant"] == "latency":
            lines.append(f"| {r['rows']}x{r['dim']} | {r['us']:.2f} | {r['torch_rms_norm_us']:.2f} | "
                         f"{r['copy_us']:.2f} | {r['of_torch']:.3f} |")
    paths = [r for r in records if r["variant"] == "latency_path"]
    if paths:
        lines += ["", f"| path ({paths[0]['rows']}x{paths[0]['dim']}) | µs/call |", "|---|---|"]
        lines += [f"| {r['path']} | {r['us']:.2f} |" for r in paths]
    return lines
