"""Where a training microbatch's backward spends its time on the host: each backend's ``torch.autograd.grad`` at a
few batch sizes of 4096, timed as ``bench.py`` times it (as called) beside the host's own time to enqueue it, the
device's time for back-to-back calls, and a profile of the Triton call's Python frames.

The question it answers: bench.py's backward at 4096x4096 on an H100 read 237 µs as called for Triton against 54 µs
replayed in a CUDA graph (CUDA: 62 against 51), while 16384x4096 read 172 against 168. A host that takes longer to
enqueue the call than the device takes to run it leaves the device idle; this says how long the host takes, and in
which frames.

Not a test. On a GPU, with the package installed (not from this tree's source folder):

    python benchmarks/backward_host.py [--backends triton,triton-unplanned,cuda] [--rows 256,4096,16384] [--out FILE]

``triton-unplanned`` is the Triton backend with its backward plans off: every call through the launchers, as
before the plans.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import sys
import time
from pathlib import Path

import torch


class _NeverKept(dict):
    """A plan table that keeps nothing: every backward takes the launchers' path."""

    def __setitem__(self, key: object, value: object) -> None:
        pass


def one(name: str, rows: int, dim: int, calls: int, profile: bool) -> list[str]:
    from rmsnorm_conformance.backends import triton_rmsnorm

    kept = triton_rmsnorm._BACKWARD_PLANS
    if name.endswith("-unplanned"):
        triton_rmsnorm._BACKWARD_PLANS = _NeverKept()
    try:
        return _timed(name, rows, dim, calls, profile)
    finally:
        triton_rmsnorm._BACKWARD_PLANS = kept


def _timed(name: str, rows: int, dim: int, calls: int, profile: bool) -> list[str]:
    from rmsnorm_conformance.harness.running.registry import load_backend

    backend = load_backend(name.removesuffix("-unplanned"))
    device = torch.device("cuda")
    x = torch.randn(rows, dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    y = backend.forward(x, w)
    g = torch.randn_like(y)

    def grads() -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad(y, (x, w), g, retain_graph=True)

    for _ in range(20):
        grads()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        grads()
    enqueued = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / calls * 1e6
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(calls):
        grads()
    end.record()
    torch.cuda.synchronize()
    lines = [f"| {name} | {rows}x{dim} | {enqueued:.1f} | {wall:.1f} | {begin.elapsed_time(end) / calls * 1e3:.1f} |"]
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            grads()
        profiler.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
        lines += ["", f"Python frames of {calls} calls, {name} {rows}x{dim} (tottime first):", "", "```",
                  text.getvalue().strip(), "```", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="triton,triton-unplanned,cuda")
    parser.add_argument("--rows", default="256,4096,16384", type=lambda v: [int(r) for r in v.split(",")])
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    table = ["| backend | shape | host enqueue µs a call | wall µs a call | device µs a call (back to back) |",
             "|---|---|---|---|---|"]
    profiles: list[str] = []
    for name in args.backends.split(","):
        for rows in args.rows:
            lines = one(name, rows, args.dim, args.calls, profile=name.startswith("triton") and rows == 4096)
            table.append(lines[0])
            profiles += lines[1:]
    import triton

    command = " ".join(["python benchmarks/backward_host.py", *sys.argv[1:]])
    text = "\n".join(["# The backward's host time", "", f"- command: `{command}`",
                      f"- device: {torch.cuda.get_device_name(0)}", f"- torch: {torch.__version__}",
                      f"- triton: {triton.__version__}", f"- python: {platform.python_version()}",
                      f"- host: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs", "",
                      "Host enqueue: the calls' time on the host before the device is waited on; wall: the same calls"
                      " and the wait; device: the span of the calls in CUDA events.", "", *table, "", *profiles])
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
