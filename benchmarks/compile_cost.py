"""What one static-shape ``torch.compile`` of a backend's entry point costs, as the execution-mode checks make it.

Not a test. The default gate's execution-mode sample and its thresholds trace every (entry point, dtype, shape)
on its own (static shapes: ``harness/running/modes.py`` says why), so the time to verdict pays this cost once per
shape. It compiles ``forward`` through ``ModeBackend`` at one shape (the process's first compile, with its one-time
costs), then at ``--shapes`` more row counts, and prints the seconds of each, the process's child processes
(Inductor's compile pool, where it starts one) and, with ``--profile``, who called Python's ``compile`` and the
functions with the most time of their own:

    python benchmarks/compile_cost.py --backend=cuda --device=cuda --profile
    TORCHINDUCTOR_COMPILE_THREADS=1 python benchmarks/compile_cost.py --backend=cuda --device=cuda
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time
from pathlib import Path


def _children() -> int:
    """This process's live child processes (Linux: /proc), for the compile pool's size."""
    me = str(os.getpid())
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[1] == me:
                count += 1
        except (OSError, IndexError):
            continue
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="native")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--shapes", type=int, default=8, help="row counts compiled after the first")
    parser.add_argument("--compiler", default="inductor")
    parser.add_argument("--profile", action="store_true", help="cProfile the compiles after the first")
    args = parser.parse_args()

    import torch

    from rmsnorm_conformance.harness.running.modes import ModeBackend
    from rmsnorm_conformance.harness.running.registry import load_backend

    device = torch.device(args.device)
    backend = load_backend(args.backend)
    reason = backend.unavailable_reason(device)
    if reason:
        print(f"{args.backend} cannot run on {device}: {reason}")
        return 1
    moded = ModeBackend(backend, "compile", compiler=args.compiler, dynamic=False)
    weight = torch.randn(args.dim, device=device)

    def one(rows: int) -> float:
        x = torch.randn(rows, args.dim, device=device)
        start = time.perf_counter()
        moded.forward(x, weight, 1e-6)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    first = one(1)
    print(f"{args.backend} on {device}, torch {torch.__version__}, compile threads "
          f"{os.environ.get('TORCHINDUCTOR_COMPILE_THREADS', 'default')}")
    print(f"first compile (one-time costs included): {first:.2f} s; child processes after it: {_children()}")
    profiler = cProfile.Profile()
    seconds = []
    if args.profile:
        profiler.enable()
    for rows in range(2, 2 + args.shapes):
        seconds.append(one(rows))
    if args.profile:
        profiler.disable()
    print(f"{args.shapes} more shapes: {sum(seconds):.2f} s, {sum(seconds) / len(seconds):.3f} s each "
          f"(min {min(seconds):.3f}, max {max(seconds):.3f}); child processes: {_children()}")
    if args.profile:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(25)
        stats.print_callers("builtins.compile")
        print(text.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
