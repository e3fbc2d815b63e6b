"""Sweep of the CUDA backend's launch configurations on a GPU, in one process: forward, fused add (out of place
and in place) and backward (dx + dw), each against a device copy of the same x timed in the same process, with a
bitwise spot check of every configuration against the native reference.

    python benchmarks/kernel_sweep.py --out cuda-sweep.json [--quick]

Configurations are set through the library's ``set_tuning`` (forward / fused add: groups a thread, threads a
block, rows staged, sets of rows a block at most; backward: groups a thread, threads a block, rows staged, dw's
rows per block); 0 keeps a default. No configuration changes a bit (the
canonical order does not depend on the launch), so the pick is speed alone: the configuration whose worst ratio
to the copy over the measured shapes is highest. Bytes as in bench.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

EPS = 1e-6
FORWARD_SHAPES = ((65536, 4096), (2097152, 128), (16384, 8192), (4096, 4096))
FUSED_SHAPES = ((65536, 4096), (2097152, 128), (16384, 8192), (4096, 4096))
BACKWARD_SHAPES = ((65536, 4096), (2097152, 128))
# (groups a thread, threads a block, rows staged, sets a block at most); backward: (groups a thread, threads a
# block, rows staged, dw's rows per block). 0 keeps the default.
# Every forward and fused add runs the row kernel (one set of rows a block, rows in registers: rows staged and sets
# do not apply). A sweep on an H200 compared it with the staged kernel, since removed: the staged kernel's best
# forward was 0.943 / 0.937 / 0.905 / 0.911 at the four shapes, at most 4 sets a block.
FORWARD_TRIES = [(0, 0, 0, 0), (0, 256, 0, 0), (0, 64, 0, 0), (2, 128, 0, 0), (1, 128, 0, 0)]
FUSED_TRIES = [(0, 0, 0, 0), (0, 128, 0, 0), (0, 512, 0, 0), (1, 256, 0, 0), (2, 256, 0, 0), (4, 256, 0, 0)]
BACKWARD_TRIES = [(0, 0, 0, 0), (0, 0, 0, 32), (0, 0, 0, 128), (0, 0, 2, 0), (0, 512, 0, 0), (1, 256, 0, 0),
                  (1, 512, 0, 0), (2, 128, 0, 0)]


def _median_us(fn: Any, quick: bool) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=5 if quick else 10, rep=25 if quick else 50, return_mode="median")) * 1e3


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


class Inputs:
    """x, residual, dy and weight of one shape, with the copy's time measured on them."""

    def __init__(self, rows: int, dim: int, dtype: torch.dtype, quick: bool) -> None:
        gen = torch.Generator(device="cuda").manual_seed(rows + dim)
        self.x = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
        self.r = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
        self.g = torch.randn(rows, dim, device="cuda", generator=gen).to(dtype)
        self.w = (1 + 0.1 * torch.randn(dim, device="cuda", generator=gen)).to(dtype)
        y = torch.empty_like(self.x)
        self.copy_us = min(_median_us(lambda: y.copy_(self.x), quick) for _ in range(2))
        self.copy_gbps = 2 * self.x.nbytes / self.copy_us / 1e3


SPOT_CASES = ((1000, 4096, torch.bfloat16), (3000, 128, torch.bfloat16), (77, 1001, torch.float16),
              (300, 8192, torch.float32), (5, 8192, torch.bfloat16))
_SPOT: dict[tuple, tuple] = {}


def _spot_inputs(native: Any, kind: str) -> list[tuple]:
    """Inputs of the spot check and native's outputs on them, computed once per kind."""
    if kind in _SPOT:
        return _SPOT[kind]
    cases = []
    for rows, dim, dtype in SPOT_CASES:
        gen = torch.Generator().manual_seed(rows)
        x = (torch.randn(rows, dim, generator=gen) * torch.logspace(-3, 3, rows).unsqueeze(1)).to(dtype).cuda()
        r = torch.randn(rows, dim, generator=gen).to(dtype).cuda()
        g = torch.randn(rows, dim, generator=gen).to(dtype).cuda()
        w = torch.randn(dim, generator=gen).to(dtype).cuda()
        if kind == "forward":
            expected = (native.forward(x, w, EPS), native.forward_fp32(x, w, EPS))
        elif kind == "fused_add":
            expected = native.fused_add(x, r, w, EPS)
        else:
            expected = _grads(native.forward, x, w, g)
        cases.append((f"{rows}x{dim} {dtype}", x, r, g, w, expected))
    _SPOT[kind] = cases
    return cases


def _grads(forward: Any, x: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> tuple:
    xs, ws = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    forward(xs, ws, EPS).backward(g)
    return xs.grad, ws.grad


def spot_check(op: Any, native: Any, kind: str) -> str | None:
    """None if the backend's bits equal native's on small batches that take the kernels' paths, else what differs."""
    for name, x, r, g, w, expected in _spot_inputs(native, kind):
        if kind == "forward":
            pairs = [("y", op.forward(x, w, EPS), expected[0]), ("y fp32", op.forward_fp32(x, w, EPS), expected[1])]
        elif kind == "fused_add":
            y, ro = op.fused_add(x, r, w, EPS)
            xi, ri = x.clone(), r.clone()
            op.fused_add_(xi, ri, w, EPS)
            pairs = [("y", y, expected[0]), ("residual_out", ro, expected[1]), ("y in place", xi, expected[0]),
                     ("residual in place", ri, expected[1])]
        else:
            dx, dw = _grads(op.forward, x, w, g)
            pairs = [("dx", dx, expected[0]), ("dw", dw, expected[1])]
        for what, a, b in pairs:
            if not torch.equal(_bits(a), _bits(b)):
                share = float((_bits(a) == _bits(b)).double().mean())
                return f"{what} {name}: {share:.6f} of elements equal"
    return None


def _time_config(op: Any, native: Any, tuning: Any, kind: str, config: tuple, shapes: list, measure: Any
                 ) -> list[dict[str, Any]]:
    """Records of one configuration of ``kind``: one error record where it is not bitwise equal to native (or
    cannot launch), else one a shape, timed by ``measure`` (an error record where a shape fails)."""
    tuning(kind, *config)
    try:
        bad = spot_check(op, native, kind)
    except Exception as exc:  # a configuration that cannot launch is a record, not the end of the sweep
        bad = f"{type(exc).__name__}: {str(exc)[:200]}"
    if bad is not None:
        print(f"{kind} {config}: NOT BITWISE / FAILED: {bad}", flush=True)
        return [{"kind": kind, "config": list(config), "error": bad}]
    records: list[dict[str, Any]] = []
    line = []
    for (rows, dim), inp in shapes:
        try:
            us, nbytes = measure(inp)
        except Exception as exc:
            records.append({"kind": kind, "config": list(config), "rows": rows, "dim": dim,
                            "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            line.append(f"{rows}x{dim} failed")
            continue
        ratio = nbytes / us / 1e3 / inp.copy_gbps
        records.append({"kind": kind, "config": list(config), "rows": rows, "dim": dim, "us": round(us, 2),
                        "copy_gbps": round(inp.copy_gbps, 1), "of_copy": round(ratio, 4)})
        line.append(f"{rows}x{dim} {ratio:.3f}")
    print(f"{kind:<16} {config!s:<18} " + "  ".join(line), flush=True)
    return records


def parse_tries(text: str) -> list[tuple[int, ...]]:
    """``--tries``: configurations as "a,b,c,d;a,b,c,d;..." (four integers each, 0 keeps a default)."""
    tries = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        values = tuple(int(v) for v in part.split(","))
        if len(values) != 4:
            raise ValueError(f"--tries: {part!r} is not four comma-separated integers")
        tries.append(values)
    return tries


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """``--shapes``: "ROWSxDIM,ROWSxDIM,..."."""
    shapes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        rows, sep, dim = part.partition("x")
        if not sep or not rows.isdigit() or not dim.isdigit():
            raise ValueError(f"--shapes: {part!r} is not ROWSxDIM")
        shapes.append((int(rows), int(dim)))
    return shapes


def sweep(quick: bool, kinds: tuple[str, ...] = ("forward", "fused_add", "backward"),
          dtype: torch.dtype = torch.bfloat16, tries: list[tuple[int, ...]] | None = None,
          only: list[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    """Every configuration of each kind in ``kinds`` (``tries`` in place of each kind's own list where given), at
    each kind's own shapes, or at the shapes ``only`` for every kind where given."""
    from rmsnorm_conformance.backends.cuda_rmsnorm import CudaRMSNormOp, _ops
    from rmsnorm_conformance.backends.native import NativeRMSNormOp

    op, native = CudaRMSNormOp(), NativeRMSNormOp()
    _ops.require(torch.device("cuda"))
    records: list[dict[str, Any]] = []
    forward_tries = tries or (FORWARD_TRIES[:8] if quick else FORWARD_TRIES)
    fused_tries = tries or (FUSED_TRIES[:8] if quick else FUSED_TRIES)
    backward_tries = tries or (BACKWARD_TRIES[:8] if quick else BACKWARD_TRIES)

    def run(kind: str, config: tuple, shapes, measure) -> None:
        records.extend(_time_config(op, native, _ops.set_tuning, kind, config, shapes, measure))

    shapes = [((rows, dim), Inputs(rows, dim, dtype, quick)) for rows, dim in only or FORWARD_SHAPES]
    for config in forward_tries if "forward" in kinds else ():
        run("forward", config, shapes, lambda i: (_median_us(lambda: op.forward(i.x, i.w, EPS), quick),
                                                  2 * i.x.nbytes))
    fused_shapes = [(s, i) for s, i in shapes if s in (only or FUSED_SHAPES)]
    for config in fused_tries if "fused_add" in kinds else ():
        run("fused_add", config, fused_shapes,
            lambda i: (_median_us(lambda: op.fused_add(i.x, i.r, i.w, EPS), quick), 4 * i.x.nbytes))

        # In place under the same configuration: x and residual evolve call to call, as in a model's layers;
        # the bytes are the same. (Checked bitwise by the spot check above, in place included.)
        def in_place(i: Inputs) -> tuple[float, int]:
            xi, ri = i.x.clone(), i.r.clone()
            return _median_us(lambda: op.fused_add_(xi, ri, i.w, EPS), quick), 4 * i.x.nbytes

        line = []
        for (rows, dim), i in fused_shapes:
            us, nbytes = in_place(i)
            ratio = nbytes / us / 1e3 / i.copy_gbps
            records.append({"kind": "fused_add_", "config": list(config), "rows": rows, "dim": dim,
                            "us": round(us, 2), "copy_gbps": round(i.copy_gbps, 1), "of_copy": round(ratio, 4)})
            line.append(f"{rows}x{dim} {ratio:.3f}")
        print(f"{'fused_add_':<16} {config!s:<18} " + "  ".join(line), flush=True)
    _ops.set_tuning("fused_add")
    _ops.set_tuning("forward")
    del fused_shapes
    shapes = [(s, i) for s, i in shapes if s in (only or BACKWARD_SHAPES)]
    torch.cuda.empty_cache()
    backward = _ops.op("rms_norm_backward")
    for config in backward_tries if "backward" in kinds else ():
        run("backward", config, shapes,
            lambda i: (_median_us(lambda: backward(i.g, i.x, i.w, EPS, True), quick),
                       3 * i.x.nbytes + 2 * i.w.nbytes))
    for kind in ("forward", "fused_add", "backward"):
        _ops.set_tuning(kind)
    return records


def best(records: list[dict[str, Any]], kind: str) -> tuple[list[int] | None, float]:
    """The configuration of ``kind`` whose worst ratio to the copy over the shapes is highest."""
    worst: dict[tuple, float] = {}
    failed = {tuple(r["config"]) for r in records if r["kind"] == kind and "error" in r}
    for r in records:
        if r["kind"] == kind and "of_copy" in r and tuple(r["config"]) not in failed:
            key = tuple(r["config"])
            worst[key] = min(worst.get(key, float("inf")), r["of_copy"])
    if not worst:
        return None, 0.0
    key = max(worst, key=worst.get)
    return list(key), worst[key]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="JSON output: the records and the picks")
    parser.add_argument("--quick", action="store_true", help="fewer configurations and repetitions")
    parser.add_argument("--kinds", default="forward,fused_add,backward",
                        help="which to sweep, comma-separated (default: all three)")
    parser.add_argument("--dtype", default="bfloat16", help="the element type timed (default: bfloat16)")
    parser.add_argument("--tries", metavar="A,B,C,D;...",
                        help="the configurations to time, in place of each swept kind's own list")
    parser.add_argument("--shapes", metavar="ROWSxDIM,...",
                        help="time every kind at these shapes, in place of each kind's own (4096x4096,16384x4096, say)")
    parser.add_argument("--picks", metavar="JSON", help="print a sweep's picks as shell exports of "
                        "RMSNORM_CUDA_{FORWARD,FUSED_ADD,BACKWARD}_CONFIG, and exit")
    args = parser.parse_args(argv)
    if args.picks:
        best_ = json.loads(Path(args.picks).read_text())["best"]
        for kind, var in (("forward", "FORWARD"), ("fused_add", "FUSED_ADD"), ("backward", "BACKWARD")):
            # (the in-place fused add runs under the fused add's configuration: its own best is a report)
            config = (best_.get(kind) or {}).get("config")
            if config:
                print(f"export RMSNORM_CUDA_{var}_CONFIG={','.join(str(v) for v in config)}")
        return 0
    if args.out is None:
        parser.error("--out is needed")
    if not torch.cuda.is_available():
        print("kernel_sweep.py: no CUDA GPU is visible")
        return 0
    start = time.perf_counter()
    records = sweep(args.quick, tuple(args.kinds.split(",")), getattr(torch, args.dtype),
                    parse_tries(args.tries) if args.tries else None, parse_shapes(args.shapes) if args.shapes else None)
    picks = {kind: best(records, kind) for kind in ("forward", "fused_add", "fused_add_", "backward")}
    for kind, (config, worst) in picks.items():
        print(f"best {kind}: {config} (worst ratio to copy {worst:.3f})")
    Path(args.out).write_text(json.dumps({
        "records": records, "best": {k: {"config": c, "worst_of_copy": w} for k, (c, w) in picks.items()},
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "dtype": args.dtype,
        "seconds": round(time.perf_counter() - start, 1)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
