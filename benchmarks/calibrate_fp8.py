"""Calibrate the fp8 bounds: how far a kernel that quantizes through x's dtype (vLLM's order: ``x * rms`` rounded to
x's dtype, times the weight rounded again) lies from the contract's fp8 reference, in fp8 ULPs from the single
rounding's target and in the relative error of its dynamic scale; the native backend for comparison (0 and 0).
Not a test: it measures and prints.

    python benchmarks/calibrate_fp8.py [--rows 64] [--seeds 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import math

import torch
from tabulate import tabulate

from rmsnorm_conformance.contract.fp8 import E4M3_MAX, MIN_SCALE, dynamic_scale, quantize
from rmsnorm_conformance.contract.reference import reference_fp32, rounding_class_outputs
from rmsnorm_conformance.harness.checking.comparison import ulp_distance
from rmsnorm_conformance.harness.drawing.cases import VALUE_FAMILIES, make_values, make_weight

DIMS = (4096, 128)
SHIFTS = (-3, 0, 5, 9)  # static scales: 2^shift times the one that maps the largest |y| to 448


def _dynamic(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (y.abs().amax(dim=-1, keepdim=True) / E4M3_MAX).clamp_min(MIN_SCALE)
    return quantize(y, scale), scale


def measure(dtype: str, order: str | None, rows: int, seeds: int, device: str) -> dict[str, float]:
    """Worst fp8 ULP distance (static and dynamic) and worst relative scale error over families, dims and seeds;
    ``order`` None is the native reference itself, else the forward rounding class it rounds through."""
    worst = {"static ulp": 0.0, "dynamic ulp": 0.0, "scale rel": 0.0}
    for family in VALUE_FAMILIES:
        for dim in DIMS:
            for seed in range(seeds):
                gen = torch.Generator().manual_seed(seed)
                x = make_values(family, rows, dim, dtype, 1e-6, gen).to(device)
                w = make_weight("normal", dim, dtype, gen).to(device)
                y32 = reference_fp32(x, w, 1e-6).detach()
                y = y32 if order is None else rounding_class_outputs(x, w.float(), 1e-6, x.dtype)[order].float()
                amax = float(y32.abs().max()) or 1.0
                for shift in SHIFTS:
                    s = torch.tensor(amax / E4M3_MAX * 2.0**shift, device=device)
                    d = ulp_distance(quantize(y, s), quantize(y32, s))
                    worst["static ulp"] = max(worst["static ulp"], float(d.max()))
                q, scale = _dynamic(y)
                d = ulp_distance(q, quantize(y32, scale))
                worst["dynamic ulp"] = max(worst["dynamic ulp"], float(d.max()))
                ref = dynamic_scale(y32)
                worst["scale rel"] = max(worst["scale rel"], float(((scale - ref).abs() / ref).max()))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    table = []
    for dtype in ("bfloat16", "float16"):
        for label, order in (("native (fp32_once)", None), ("through x dtype, HF order", "normalized_rounded"),
                             ("through x dtype, product rounded once", "product_fp32")):
            worst = measure(dtype, order, args.rows, args.seeds, args.device)
            rel = worst["scale rel"]
            table.append([label, dtype, int(worst["static ulp"]), int(worst["dynamic ulp"]),
                          f"{rel:.3g}" + (f" (2^{math.log2(rel):.1f})" if rel else "")])
    print(tabulate(table, ["implementation", "x dtype", "max fp8 ULP, static", "max fp8 ULP, dynamic",
                           "max relative scale error"], tablefmt="github"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
