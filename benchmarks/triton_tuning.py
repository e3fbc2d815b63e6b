"""Sweep of the Triton backend's launch tuning on a GPU: forward and backward GB/s at the target shapes for each
(tile, warp_elems) pair, each against a device copy of the same x in the same run, and the best pair.

    python benchmarks/triton_tuning.py --out tuning.json
    python benchmarks/triton_tuning.py --backward-variants --out variants.json

The second form times the backward's kernel variants (BWD_VARIANTS: strided tiles, prefetch, warps, rows per
tile and per subtree) at each target shape, checks each one's dx and dw bit for bit against the code's default
and reports the registers and spills of each binary.

The tuning is a function of (dim, dtype) only whichever pair wins, so every pair is batch-invariant; the sweep
only picks the fastest. Bytes as in bench.py: forward x read + y written; backward x, dy read + dx written.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

SHAPES = ((65536, 4096), (2097152, 128))
FWD_TRIES = [(tile, warp_elems) for tile in (2048, 4096, 8192) for warp_elems in (256, 512, 1024)]
BWD_TRIES = [(tile, warp_elems) for tile in (1024, 2048, 4096) for warp_elems in (128, 256, 512)]


def _median_us(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=40, return_mode="median")) * 1e3


def _retune(tr, name: str, **fields: int) -> None:
    setattr(tr, name, getattr(tr, name)._replace(**fields))
    tr.launch_config.cache_clear()
    tr._PLANS.clear()


def sweep(dtype: torch.dtype = torch.bfloat16) -> dict:
    import rmsnorm_conformance.backends.triton_rmsnorm as tr

    op = tr.TritonRMSNormOp()
    results: dict = {"forward": [], "backward": []}
    fwd0, bwd0 = tr._GPU_FWD, tr._GPU_BWD
    for rows, dim in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(dim)
        x = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
        w = torch.randn(dim, device="cuda", generator=gen).to(dtype)
        g = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
        y = torch.empty_like(x)
        copy_gbps = 2 * x.nbytes / _median_us(lambda x=x, y=y: y.copy_(x)) / 1e3
        for kind, tries, name, base in (("forward", FWD_TRIES, "_GPU_FWD", fwd0),
                                        ("backward", BWD_TRIES, "_GPU_BWD", bwd0)):
            for tile, warp_elems in tries:
                _retune(tr, name, tile=tile, warp_elems=warp_elems)
                cfg = tr.launch_config(dim, dtype, backward=kind == "backward")
                try:
                    if kind == "forward":
                        us = _median_us(lambda x=x, w=w: op.forward(x, w))
                        nbytes = 2 * x.nbytes
                    else:
                        xr, wr = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
                        out = op.forward(xr, wr)
                        us = _median_us(lambda out=out, xr=xr, wr=wr, g=g: torch.autograd.grad(
                            out, (xr, wr), g, retain_graph=True))
                        nbytes = 3 * x.nbytes
                except Exception as exc:  # a pair that does not compile or fit is a result too
                    print(f"{kind} {rows}x{dim} tile={tile} warp_elems={warp_elems}: {type(exc).__name__}: {exc}")
                    continue
                ratio = nbytes / us / 1e3 / copy_gbps
                results[kind].append({"rows": rows, "dim": dim, "tile": tile, "warp_elems": warp_elems,
                                      "config": cfg._asdict(), "us": round(us, 2), "ratio_to_copy": round(ratio, 3)})
                print(f"{kind:>8} {rows}x{dim} tile={tile:>5} warp_elems={warp_elems:>4} {cfg}: {us:9.1f} us "
                      f"{ratio:.3f} of copy", flush=True)
            setattr(tr, name, base)
            tr.launch_config.cache_clear()
            tr._PLANS.clear()
        del x, w, g, y
        torch.cuda.empty_cache()
    best = {}
    for kind in results:
        pairs = {(r["tile"], r["warp_elems"]) for r in results[kind]}
        def worst(pair, kind=kind):
            ratios = [r["ratio_to_copy"] for r in results[kind] if (r["tile"], r["warp_elems"]) == pair]
            return min(ratios) if len(ratios) == len(SHAPES) else 0.0
        if pairs:
            tile, warp_elems = max(pairs, key=worst)
            best[kind] = {"tile": tile, "warp_elems": warp_elems, "worst_ratio_to_copy": worst((tile, warp_elems))}
    results["best"] = best
    print("best (the highest worst-shape ratio):", best)
    return results


# Backward tunings, each timed at both shapes: a label and the _GPU_BWD fields that differ from the code's
# default. Earlier sweeps on an H200 tried, in turn: the default of the time, not flat, not joint, rows a tile,
# warps, rows a program and a register cap; then the loop pipelined 2-4 stages deep with 8-32 warps at
# 4096; then the pipelined loop with 2, 4 or 8 tiles an iteration (unroll), which made four tiles an iteration the
# default; then variants around it (rows a tile, warps, rows a program at 128; four stages), which kept none. So did
# 16 warps a row at 4096 (0.38-0.49 at 4096 against 0.678). An earlier sweep had measured those spilling (128
# registers, one tile an iteration: 0.43 of a copy); with the stack's bookkeeping once an iteration, compiled for
# sm_90 off the GPU (benchmarks/triton_sass.py --fields), they fit: 128 registers and 8 bytes of stack with 2 or 4
# tiles an iteration (40 with 8), 16 warps resident a multiprocessor instead of 8. 128 keeps 4 warps under each.
# (row_unroll=0: `unroll` at one-row tiles too, as when they were measured, before the default took two tiles
# there.)
# A cap on registers a thread: at 4096 a cap of 128 (two blocks a multiprocessor) had spilled 132 bytes a thread,
# 0.18 of a copy; at 128 the kernel holds 96 registers (five blocks of four warps a multiprocessor, issue-bound at
# 74 % of issue slots in a profile), and a cap there fits six (80), seven (72) or eight (64). Kept none: every cap
# spilled (8-26 bytes a thread at 128), 0.742 / 0.693 / 0.603 of a copy at 128 against 0.815, 0.13-0.15 at 4096
# against 0.681. (That sweep was ("at most 80 registers", dict(maxnreg=80)), 72 and 64.)
# More stages of Triton's pipeline (4, 5 and 6 stages at both shapes: 0.698 / 0.707 / 0.718 of a copy at
# 65536 x 4096 against 0.690, 0.734 / 0.634 / 0.517 at 2097152 x 128 against 0.850), 16 warps with 16 rows a
# program at 4096 (0.507), a padding row's products zeroed one by one (0.697 / 0.838) and a strided tile's rows split
# (0.693 / 0.818): six stages where a tile is 4096 columns of one row became the default (row_stages), the rest kept
# none. These are the variants around it: the one-row tile's stages without and with one tile an iteration
# (row_unroll=1 halves the tiles in flight each stage holds: eight stages fit beside it).
BWD_VARIANTS: list[tuple[str, dict]] = [
    ("default", {}),
    ("3 stages at 4096 (the earlier default)", dict(row_stages=0)),
    ("5 stages at 4096", dict(row_stages=5)),
    ("6 stages at 4096, one tile an iteration", dict(row_stages=6, row_unroll=1)),
    ("8 stages at 4096, one tile an iteration", dict(row_stages=8, row_unroll=1)),
]


def _binaries(kernel: Any) -> dict:
    """Triton's compiled binaries of a kernel: key -> (registers, spilled bytes, warps); {} if not readable."""
    try:
        return {key: (k.n_regs, k.n_spills, k.metadata.num_warps)
                for caches in kernel.device_caches.values() for key, k in caches[0].items()}
    except Exception:  # another Triton's layout of its caches
        return {}


def sweep_backward_variants(dtype: torch.dtype = torch.bfloat16) -> dict:
    """Each variant of BWD_VARIANTS: dx + dw time against a copy, bitwise check against the default, binary."""
    import rmsnorm_conformance.backends.triton_rmsnorm as tr

    base = tr._GPU_BWD
    results: list[dict] = []
    for rows, dim in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(dim)
        x = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
        w = (1 + 0.1 * torch.randn(dim, device="cuda", generator=gen)).to(dtype)
        g = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
        y = torch.empty_like(x)
        copy_us = min(_median_us(lambda x=x, y=y: y.copy_(x)) for _ in range(2))
        copy_gbps = 2 * x.nbytes / copy_us / 1e3
        ref = None
        for label, fields in BWD_VARIANTS:
            tr._GPU_BWD = base._replace(**fields)
            tr.launch_config.cache_clear()
            cfg = tr.launch_config(dim, dtype, backward=True)
            before = _binaries(tr._rms_norm_bwd_kernel)
            try:
                dx, dw = tr._backward(x, w, g, 1e-6, True, True)
                torch.cuda.synchronize()

                def call(x=x, w=w, g=g) -> None:
                    tr._backward(x, w, g, 1e-6, True, True)
                us = min(_median_us(call) for _ in range(2))
            except Exception as exc:
                print(f"{rows}x{dim} {label}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            if ref is None:
                ref = (dx, dw)
            same = torch.equal(dx.view(torch.int16), ref[0].view(torch.int16)) and \
                torch.equal(dw.view(torch.int16), ref[1].view(torch.int16))
            new = [v for k, v in _binaries(tr._rms_norm_bwd_kernel).items() if k not in before]
            ratio = 3 * x.nbytes / us / 1e3 / copy_gbps
            rec = {"rows": rows, "dim": dim, "variant": label, "fields": fields, "config": cfg._asdict(),
                   "us": round(us, 1), "copy_us": round(copy_us, 1), "ratio_to_copy": round(ratio, 3),
                   "bitwise_equal_to_default": bool(same), "binary (regs, spill bytes, warps)": new}
            results.append(rec)
            print(f"{rows}x{dim} {label:<28} {us:9.1f} us  {ratio:.3f} of copy  equal={same}  {new}  {cfg}",
                  flush=True)
        tr._GPU_BWD = base
        tr.launch_config.cache_clear()
        del x, w, g, y, ref
        torch.cuda.empty_cache()

    def worst(label: str) -> float:
        ratios = [r["ratio_to_copy"] for r in results if r["variant"] == label and r["bitwise_equal_to_default"]]
        return min(ratios) if len(ratios) == len(SHAPES) else 0.0

    label = max((v for v, _ in BWD_VARIANTS), key=worst)
    best = {"backward": {**base._asdict(), **dict(BWD_VARIANTS)[label]}, "label": label,
            "worst_ratio_to_copy": worst(label)}
    print("best (the highest worst-shape ratio):", best, flush=True)
    return {"backward_variants": results, "best": best}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON output")
    parser.add_argument("--backward-variants", action="store_true", help="sweep BWD_VARIANTS instead")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("triton_tuning.py: needs a CUDA GPU")
        return 0
    with open(args.out, "w") as f:
        json.dump(sweep_backward_variants() if args.backward_variants else sweep(), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
