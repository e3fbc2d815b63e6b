"""Sweep of the Triton backend's launch tuning on a GPU: forward and backward GB/s at the target shapes for each
(tile, warp_elems) pair, each against a device copy of the same x in the same run, and the best pair.

    python benchmarks/triton_tuning.py --out tuning.json

The tuning is a function of (dim, dtype) only whichever pair wins, so every pair is batch-invariant; the sweep
only picks the fastest. Bytes as in bench.py: forward x read + y written; backward x, dy read + dx written.
"""

from __future__ import annotations

import argparse
import json

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON output")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("triton_tuning.py: needs a CUDA GPU")
        return 0
    with open(args.out, "w") as f:
        json.dump(sweep(), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
