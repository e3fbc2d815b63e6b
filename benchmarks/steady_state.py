"""The forward's kernels that compute the same bits, timed two ways in one process, with the GPU's clocks and power
sampled during each: ``do_bench``'s median with L2 flushed between calls (as bench.py and kernel_sweep.py time),
and a loop of back-to-back calls timed by two events (the steady state a model's layers see). Nsight Compute times
one launch with the clocks it finds; where a kernel's single-launch duration equals a peer's but its benchmarked
time does not, the difference is in what repeated launches do (clocks under sustained power, the L2's state after
the flush), which this shows. (On an H200 the clocks stayed at 1980 MHz throughout; the CUDA row
kernel's evict-first loads cost it 0.07 of a copy after a flush and nothing in a loop.)

    python benchmarks/steady_state.py --out steady.json

Each figure is a fraction of ``y.copy_(x)`` on the same x, measured the same way in the same process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import per_call_us

SHAPES = ((65536, 4096), (2097152, 128), (16384, 8192), (4096, 4096))
LOOP_CALLS = 200


class Sampler:
    """nvidia-smi's SM clock (MHz) and power draw (W) every 50 ms while a measurement runs."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.samples: list[tuple[float, float]] = []

    def __enter__(self) -> Sampler:
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "50"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        for line in out.splitlines():
            try:
                clock, power = (float(v) for v in line.split(","))
            except ValueError:
                continue
            self.samples.append((clock, power))

    def summary(self) -> dict[str, float]:
        if not self.samples:
            return {}
        clocks = sorted(c for c, _ in self.samples)
        powers = sorted(p for _, p in self.samples)
        return {"sm_mhz_median": clocks[len(clocks) // 2], "sm_mhz_min": clocks[0],
                "power_w_median": powers[len(powers) // 2], "power_w_max": powers[-1]}


def loop_us(fn: Any) -> float:
    """Microseconds a call over LOOP_CALLS back-to-back calls (bench.py's latency timer)."""
    return per_call_us(fn, torch.device("cuda"), LOOP_CALLS)


def bench_us(fn: Any) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=200, return_mode="median")) * 1e3


def peers(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> dict[str, tuple[Any, int]]:
    """name: (call, bytes it moves in units of x's), the copy first."""
    import rmsnorm_conformance.backends.triton_rmsnorm as tr
    from rmsnorm_conformance.backends.cuda_rmsnorm import CudaRMSNormOp

    cuda, triton_op = CudaRMSNormOp(), tr.TritonRMSNormOp()
    y = torch.empty_like(x)

    calls: dict[str, tuple[Any, int]] = {
        "copy": (lambda: y.copy_(x), 2),
        "cuda": (lambda: cuda.forward(x, w, 1e-6), 2),
        "triton": (lambda: triton_op(x, w, 1e-6), 2),
        "cuda fused add": (lambda: cuda.fused_add(x, r, w, 1e-6), 4),
        "triton fused add": (lambda: triton_op.fused_add(x, r, w, 1e-6), 4),
    }
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        calls["liger"] = (lambda: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False), 2)
    except Exception:  # an optional peer: absent, or failing to import
        pass
    return calls


def measure(rows: int, dim: int, dtype: torch.dtype, kernels: set[str] | None = None) -> list[dict[str, Any]]:
    gen = torch.Generator(device="cuda").manual_seed(rows + dim)
    x = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
    r = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
    w = (1 + 0.1 * torch.randn(dim, device="cuda", generator=gen)).to(dtype)
    out: list[dict[str, Any]] = []
    copy: dict[str, float] = {}
    for name, (fn, units) in peers(x, r, w).items():
        if kernels is not None and name != "copy" and name not in kernels:
            continue
        record: dict[str, Any] = {"rows": rows, "dim": dim, "dtype": str(dtype).removeprefix("torch."),
                                  "kernel": name}
        for how, timer in (("bench", bench_us), ("loop", loop_us)):
            with Sampler() as s:
                us = timer(fn)
            copy.setdefault(how, us)
            record[how] = {"us": round(us, 2), "of_copy": round(copy[how] * units / 2 / us, 4), **s.summary()}
        out.append(record)
        print(f"{rows}x{dim} {name:<26} bench {record['bench']['of_copy']:.3f} "
              f"({record['bench'].get('sm_mhz_median', '?')} MHz, {record['bench'].get('power_w_median', '?')} W)  "
              f"loop {record['loop']['of_copy']:.3f} ({record['loop'].get('sm_mhz_median', '?')} MHz, "
              f"{record['loop'].get('power_w_median', '?')} W)", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON output")
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--kernels", help="only these peers besides the copy, comma-separated (e.g. cuda,liger)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("steady_state.py: no CUDA GPU is visible")
        return 1
    from rmsnorm_conformance.backends.cuda_rmsnorm import _ops

    _ops.require(torch.device("cuda"))
    records = []
    for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
        for rows, dim in SHAPES:
            records += measure(rows, dim, dtype, set(args.kernels.split(",")) if args.kernels else None)
            torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
