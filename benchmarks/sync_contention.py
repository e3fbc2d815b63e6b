"""What a host-device round trip costs when several processes share one GPU, as pytest-xdist's workers do.

Every check of the harness waits on the GPU several times (each ``torch.equal``, ``.item()`` or copy to the host
is one wait). A worker alone on the GPU waits microseconds; with other processes' contexts time-sliced on the same
GPU, each wait may also wait for them. This starts N processes at once, each timing ``loops`` rounds of a small
kernel and a comparison read back on the host, and prints the time a round for N = 1 and N = workers:

    python benchmarks/sync_contention.py --workers 8 --loops 3000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time


def _rounds(loops: int, elements: int, start: mp.Event, out: mp.Queue) -> None:
    import torch

    a = torch.randn(elements, device="cuda")
    b = a.clone()
    for _ in range(50):  # warm: the context, the kernels, the allocator
        torch.equal(a, b)
    torch.cuda.synchronize()
    start.wait()
    t0 = time.perf_counter()
    for _ in range(loops):
        c = a * 2.0
        torch.equal(c, c)  # one kernel, one read back: a check's wait
    out.put((time.perf_counter() - t0) / loops)


def measure(workers: int, loops: int, elements: int) -> list[float]:
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_rounds, args=(loops, elements, start, out)) for _ in range(workers)]
    for p in procs:
        p.start()
    time.sleep(15)  # every process has its context and is waiting at the start line
    start.set()
    times = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--loops", type=int, default=3000)
    parser.add_argument("--elements", type=int, default=4096)
    args = parser.parse_args()
    for n in sorted({1, args.workers}):
        times = measure(n, args.loops, args.elements)
        print(f"{n} process(es): {statistics.median(times) * 1e6:.1f} us a round (median of processes; "
              f"min {min(times) * 1e6:.1f}, max {max(times) * 1e6:.1f}), {args.elements} elements, "
              f"{args.loops} rounds each")


if __name__ == "__main__":
    main()
