"""Run 33: the Triton forward's bandwidth, as a fraction of a device copy of the same x timed in the same process,
at the issue's forward shapes in bf16 and fp16, for the plain, offset and unweighted forwards and the fused add.
One process per tree (A: the weight mode a constexpr, B: a runtime argument); the call alternates them.

    python forward_ab.py LABEL OUT.jsonl
"""

from __future__ import annotations

import json
import sys

import torch
from triton.testing import do_bench

from rmsnorm_conformance.backends.triton_rmsnorm import TritonRMSNormOp

SHAPES = ((65536, 4096), (2097152, 128), (16384, 8192), (4096, 4096))


def median_us(fn) -> float:  # noqa: ANN001
    return float(do_bench(fn, warmup=10, rep=60, return_mode="median")) * 1e3


def measure(op: TritonRMSNormOp, dtype: torch.dtype, rows: int, dim: int) -> list[tuple[str, float, float]]:
    """(call, µs, fraction of the copy) for each call at one shape."""
    gen = torch.Generator(device="cuda").manual_seed(dim)
    x = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
    r = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
    w = (1 + 0.1 * torch.randn(dim, device="cuda", generator=gen)).to(dtype)
    y = torch.empty_like(x)
    calls = {"forward": (lambda: op.forward(x, w), 2), "offset": (lambda: op.forward_offset(x, w), 2),
             "unweighted": (lambda: op.forward_unweighted(x), 2), "fused_add": (lambda: op.fused_add(x, r, w), 4)}
    copy_us = median_us(lambda: y.copy_(x))
    timed = [(name, median_us(fn), passes) for name, (fn, passes) in calls.items()]
    copy_us = min(copy_us, median_us(lambda: y.copy_(x)))
    return [(name, us, passes / 2 * copy_us / us) for name, us, passes in timed]


def main(label: str, out: str) -> None:
    op = TritonRMSNormOp()
    with open(out, "a") as f:
        for dtype in (torch.bfloat16, torch.float16):
            for rows, dim in SHAPES:
                for name, us, of_copy in measure(op, dtype, rows, dim):
                    f.write(json.dumps({"tree": label, "call": name, "dtype": str(dtype)[6:], "rows": rows,
                                        "dim": dim, "us": round(us, 2), "of_copy": round(of_copy, 3)}) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
