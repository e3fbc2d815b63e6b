"""The forward's fraction of a copy two ways, in rounds: as bench.py times it (triton.testing.do_bench, the L2 cache
flushed before each call by writing a 256 MB buffer, whose dirty lines the next kernel's traffic then evicts) and
back to back (one span of 20 calls with nothing between them, as layers follow each other in a model). Where a
kernel trails another in the first and not in the second, the gap is how it meets the flush's dirty cache, not its
own traffic.

    python benchmarks/flush_effect.py --backends cuda,triton,liger --out flush.json

On a GPU only; prints one line a subject and shape, and writes the records.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from bench import EPS, _inputs, median_us, per_call_us, subjects

SHAPES = ((65536, 4096), (16384, 8192), (4096, 4096))


def back_to_back_us(fn: Callable[[], Any], calls: int = 20, repeats: int = 10) -> float:
    """Median over ``repeats`` of bench.py's per-call time of one span of ``calls`` calls with nothing between them."""
    device = torch.device("cuda")
    return statistics.median(per_call_us(fn, device, calls) for _ in range(repeats))


def measure(names: tuple[str, ...], dtype: torch.dtype, rounds: int) -> list[dict[str, Any]]:
    device = torch.device("cuda")
    found = [s for s in subjects(device, backends=names, compile_peer=False) if s.name != "F.rms_norm"]
    records = []
    for rows, dim in SHAPES:
        x, w, _ = _inputs(rows, dim, dtype, device)
        y = torch.empty_like(x)
        timed: dict[str, Callable[[], Any]] = {"copy": lambda x=x, y=y: y.copy_(x)}
        timed |= {s.name: (lambda s=s, x=x, w=w: s.forward(x, w)) for s in found}
        ratios: dict[tuple[str, str], list[float]] = {}
        clocks = (("flushed", lambda fn: median_us(fn, device, False)), ("back_to_back", back_to_back_us))
        for _ in range(rounds):
            for mode, clock in clocks:
                us = {name: clock(fn) for name, fn in timed.items()}
                for name in timed:
                    ratios.setdefault((name, mode), []).append(us["copy"] / us[name])
        for (name, mode), r in ratios.items():
            if name == "copy":
                continue
            rec = {"backend": name, "mode": mode, "rows": rows, "dim": dim, "dtype": str(dtype).removeprefix("torch."),
                   "ratio_median": round(statistics.median(r), 4), "ratios": [round(v, 4) for v in r]}
            records.append(rec)
            print(f"{name:>8} {mode:>12} {rows}x{dim} {rec['dtype']}: {rec['ratio_median']:.3f} of copy "
                  f"({min(r):.3f}-{max(r):.3f})", flush=True)
        del x, w, y
        torch.cuda.empty_cache()
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="cuda,triton,liger")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("flush_effect.py: no CUDA GPU is visible")
        return 0
    records = measure(tuple(args.backends.split(",")), getattr(torch, args.dtype), args.rounds)
    Path(args.out).write_text(json.dumps({"records": records, "eps": EPS, "device": torch.cuda.get_device_name(),
                                          "torch": torch.__version__}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
