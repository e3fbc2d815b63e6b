"""What a process keeps reserved on a GPU from case to case: PyTorch's caching allocator keeps the blocks it freed,
so growing batches, captured in CUDA graphs or not, may add up in one worker while its budget bounds only a case's
peak. One process, three sequences of calls, ``torch.cuda.memory_reserved()`` after each call,
with and without ``device_faults.give_back_surplus`` between them (its share as under 16 workers):

    python benchmarks/reserved_growth.py --out reserved.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

GIB = 1 << 30


def _forward(rows: int, dim: int) -> None:
    x = torch.randn(rows, dim, device="cuda", dtype=torch.bfloat16)
    F.rms_norm(x, (dim,), torch.ones(dim, device="cuda", dtype=torch.bfloat16), 1e-6).sum().item()


def _captured(rows: int, dim: int) -> None:
    x = torch.randn(rows, dim, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(dim, device="cuda", dtype=torch.bfloat16)
    F.rms_norm(x, (dim,), w, 1e-6)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = F.rms_norm(x, (dim,), w, 1e-6)
    graph.replay()
    out.clone().sum().item()


def _sequence(call: Callable[[int, int], None], sizes: list[tuple[int, int]], give_back: bool) -> dict:
    """GiB reserved after each call, and the milliseconds each give-back took (none: not asked)."""
    from rmsnorm_conformance.harness.running import device_faults

    torch.cuda.empty_cache()
    reserved, ms = [], []
    for rows, dim in sizes:
        call(rows, dim)
        if give_back:
            start = time.perf_counter()
            device_faults.give_back_surplus(torch.device("cuda", 0))
            ms.append(round((time.perf_counter() - start) * 1e3, 3))
        reserved.append(round(torch.cuda.memory_reserved() / GIB, 2))
    return {"reserved_gib": reserved, "give_back_ms": ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.environ["PYTEST_XDIST_WORKER_COUNT"] = "16"  # the share give_back_surplus keeps: 1/16 of the GPU
    growing = [(rows, 4096) for rows in range(32768, 32768 * 13, 32768)]  # 0.25 GiB a tensor, then 0.5, ... 3 GiB
    same = [(65536, 4096)] * 12  # 0.5 GiB a tensor, the same batch each time
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "total_gib": round(torch.cuda.get_device_properties(0).total_memory / GIB, 2)}
    for name, call, sizes in (("eager, growing batches", _forward, growing),
                              ("cuda graph, growing batches", _captured, growing),
                              ("cuda graph, the same batch", _captured, same)):
        for give_back in (False, True):
            key = f"{name}{', surplus given back' if give_back else ''}"
            result[key] = _sequence(call, sizes, give_back)
            print(key, result[key], flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
