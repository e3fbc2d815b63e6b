"""Sweep of the forward and fused-add launch configurations of the CUDA or the Triton backend on a GPU, bf16 at
the target shapes, each against a device copy of the same x timed in the same process, and the best pick.

    python benchmarks/forward_tuning.py --backend cuda --out cuda-tuning.json
    python benchmarks/forward_tuning.py --backend triton --out triton-tuning.json

CUDA: each configuration "k,threads" (groups a thread, threads a block; 0 keeps the default) runs in its own process
under RMSNORM_CUDA_FORWARD_CONFIG and RMSNORM_CUDA_FUSED_ADD_CONFIG (the library reads them once per process); the
pick is made for the forward and the fused add apart. Triton: each (tile, warp_elems, min_warps) of the forward
tuning, which the forward and the fused add share, in this process; the JSON's "best" is what ``benchmarks/bench.py
--triton-tuning`` takes.
No configuration changes a bit (the canonical order does not depend on the launch), so the pick is speed alone:
the pair whose worst ratio to the copy over the measured shapes is highest.

Bytes as in bench.py: forward x read + y written; fused add x and residual read, y and residual_out written.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

SHAPES = ((65536, 4096), (2097152, 128))
CUDA_TRIES = ("0,0", "2,128", "1,128", "4,256", "4,512", "2,256")
# (tile, warp_elems, min_warps): the forward tuning's fields; fewer than 4 warps only for small tiles.
TRITON_TRIES = ((2048, 1024, 4), (2048, 512, 4), (1024, 512, 4), (4096, 1024, 4), (8192, 1024, 4),
                (2048, 1024, 2), (2048, 2048, 1), (1024, 1024, 2), (1024, 1024, 1), (512, 512, 1))


def _median_us(fn: Any) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=60, return_mode="median")) * 1e3


def measure(op: Any, dtype: torch.dtype = torch.bfloat16, shapes: tuple[tuple[int, int], ...] = SHAPES
            ) -> list[dict[str, Any]]:
    """Forward and fused add of ``op`` at each shape, with the copy of the same x timed before and after."""
    out = []
    for rows, dim in shapes:
        gen = torch.Generator(device="cuda").manual_seed(dim)
        x = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
        r = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
        w = (1 + 0.1 * torch.randn(dim, device="cuda", generator=gen)).to(dtype)
        y = torch.empty_like(x)
        copy_us = _median_us(lambda x=x, y=y: y.copy_(x))
        fwd_us = _median_us(lambda x=x, w=w: op.forward(x, w))
        add_us = _median_us(lambda x=x, r=r, w=w: op.fused_add(x, r, w))
        copy_us = min(copy_us, _median_us(lambda x=x, y=y: y.copy_(x)))
        copy_gbps = 2 * x.nbytes / copy_us / 1e3
        for variant, us, nbytes in (("forward", fwd_us, 2 * x.nbytes), ("fused_add", add_us, 4 * x.nbytes)):
            gbps = nbytes / us / 1e3
            out.append({"variant": variant, "dtype": str(dtype).removeprefix("torch."), "rows": rows, "dim": dim,
                        "us": round(us, 2), "gbps": round(gbps, 1),
                        "copy_gbps": round(copy_gbps, 1), "of_copy": round(gbps / copy_gbps, 4)})
        del x, r, y
        torch.cuda.empty_cache()
    return out


def _child_cuda(shapes: tuple[tuple[int, int], ...], dtypes: tuple[torch.dtype, ...]) -> int:
    from rmsnorm_conformance.backends.cuda_rmsnorm import CudaRMSNormOp

    op = CudaRMSNormOp()
    print(json.dumps([r for dtype in dtypes for r in measure(op, dtype, shapes)]), flush=True)
    return 0


def sweep_cuda(tries: tuple[str, ...] = CUDA_TRIES, shapes: tuple[tuple[int, int], ...] = SHAPES,
               dtypes: tuple[torch.dtype, ...] = (torch.bfloat16,)) -> list[dict[str, Any]]:
    """Each "k,threads" of ``tries`` for the forward and the fused add, in a process of its own, at ``shapes`` in
    each of ``dtypes``."""
    records = []
    where = ["--shapes", ",".join(f"{r}x{d}" for r, d in shapes),
             "--dtypes", ",".join(str(d).removeprefix("torch.") for d in dtypes)]
    for config in tries:
        env = {**os.environ, "RMSNORM_CUDA_FORWARD_CONFIG": config, "RMSNORM_CUDA_FUSED_ADD_CONFIG": config}
        proc = subprocess.run([sys.executable, __file__, "--child-cuda", *where], env=env, capture_output=True,
                              text=True, check=False)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
        if proc.returncode != 0 or not lines:
            print(f"config {config}: failed ({proc.returncode}): {proc.stderr[-800:]}", flush=True)
            continue
        for rec in json.loads(lines[-1]):
            records.append({"config": config, **rec})
            print(f"cuda {config:>7} {rec['variant']:<9} {rec['dtype']:<8} {rec['rows']}x{rec['dim']}: "
                  f"{rec['of_copy']:.3f} of copy ({rec['gbps']:.0f} / {rec['copy_gbps']:.0f} GB/s)", flush=True)
    return records


def sweep_triton(tries: tuple[tuple[int, ...], ...] = TRITON_TRIES, shapes: tuple[tuple[int, int], ...] = SHAPES,
                 dtypes: tuple[torch.dtype, ...] = (torch.bfloat16,)) -> list[dict[str, Any]]:
    """Each (tile, warp_elems, min_warps[, max_warps[, flat]]) of ``tries`` as the forward's tuning (the fused add
    keeps its own, but for flat), at ``shapes`` in each of ``dtypes``."""
    import rmsnorm_conformance.backends.triton_rmsnorm as tr

    op = tr.TritonRMSNormOp()
    base = tr._GPU_FWD
    records = []
    fused = tr._GPU_FUSED
    for tile, warp_elems, min_warps, *rest in tries:
        max_warps = rest[0] if rest else base.max_warps
        flat = bool(rest[1]) if len(rest) > 1 else base.flat
        tr._GPU_FWD = base._replace(tile=tile, warp_elems=warp_elems, min_warps=min_warps, max_warps=max_warps,
                                    flat=flat)
        tr._GPU_FUSED = fused._replace(flat=flat)
        tr.launch_config.cache_clear()
        tr._PLANS.clear()
        config = ",".join(str(v) for v in (tile, warp_elems, min_warps, *rest))
        for rec in (r for dtype in dtypes for r in measure(op, dtype, shapes)):
            cfg = tr.launch_config(rec["dim"], getattr(torch, rec["dtype"]))
            records.append({"config": config, "rows_per_program": cfg.rows, "num_warps": cfg.num_warps, **rec})
            print(f"triton {config:>12} {rec['variant']:<9} {rec['dtype']:<8} {rec['rows']}x{rec['dim']} (rows "
                  f"{cfg.rows}, warps {cfg.num_warps}): {rec['of_copy']:.3f} of copy", flush=True)
    tr._GPU_FWD, tr._GPU_FUSED = base, fused
    tr.launch_config.cache_clear()
    tr._PLANS.clear()
    return records


def best(records: list[dict[str, Any]], variants: tuple[str, ...]) -> str | None:
    """The config whose worst ratio to the copy over ``variants`` and the shapes is highest."""
    worst: dict[str, float] = {}
    for rec in records:
        if rec["variant"] in variants:
            worst[rec["config"]] = min(worst.get(rec["config"], float("inf")), rec["of_copy"])
    return max(worst, key=worst.get) if worst else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("cuda", "triton"))
    parser.add_argument("--out", help="JSON output: the records and the pick")
    parser.add_argument("--child-cuda", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shapes", help="ROWSxDIM,... to measure (default: " +
                        ",".join(f"{r}x{d}" for r, d in SHAPES) + ")")
    parser.add_argument("--tries", help="Triton: tile/warp_elems/min_warps[/max_warps[/flat]],... CUDA: k,threads;... "
                        "to try (default: the built-in list)")
    parser.add_argument("--dtypes", default="bfloat16", help="dtypes to measure (default: bfloat16)")
    args = parser.parse_args(argv)
    shapes = tuple(tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")) if args.shapes else SHAPES
    dtypes = tuple(getattr(torch, d) for d in args.dtypes.split(","))
    if args.child_cuda:
        return _child_cuda(shapes, dtypes)  # type: ignore[arg-type]
    if args.backend is None or args.out is None:
        parser.error("--backend and --out are needed")
    if not torch.cuda.is_available():
        print("forward_tuning.py: no CUDA GPU is visible")
        return 0
    if args.backend == "cuda":
        records = sweep_cuda(tuple(args.tries.split(";")) if args.tries else CUDA_TRIES, shapes,  # type: ignore[arg-type]
                             dtypes)
        picks: dict[str, Any] = {"forward": best(records, ("forward",)), "fused_add": best(records, ("fused_add",))}
    else:
        tries = (tuple(tuple(int(v) for v in t.split("/")) for t in args.tries.split(",")) if args.tries
                 else TRITON_TRIES)
        records = sweep_triton(tries, shapes, dtypes)  # type: ignore[arg-type]
        pick = best(records, ("forward", "fused_add"))
        picks = {}
        if pick is not None:
            fields = ("tile", "warp_elems", "min_warps", "max_warps", "flat")
            forward: dict[str, Any] = dict(zip(fields, (int(v) for v in pick.split(",")), strict=False))
            if "flat" in forward:
                forward["flat"] = bool(forward["flat"])
            picks = {"forward": forward}
    print(f"best: {picks}")
    Path(args.out).write_text(json.dumps({"records": records, "best": picks,
                                          "device": torch.cuda.get_device_name(),
                                          "torch": torch.__version__}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
