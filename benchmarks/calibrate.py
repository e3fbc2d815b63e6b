"""Calibrate the contract's fp32 numbers: how far the reference is from the correctly rounded value, and
how far independent fp32 implementations are from the reference. Not a test: it measures and prints.

    python benchmarks/calibrate.py [--device cpu] [--out reports/cpu/calibration.md]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tabulate import tabulate

from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.contract import profile
from rmsnorm_conformance.contract.reference import oracle_fp64, seed_formula_fp32
from rmsnorm_conformance.harness.checking.comparison import compare_within
from rmsnorm_conformance.harness.drawing.cases import VALUE_FAMILIES, make_values, make_weight

REF = NativeRMSNormOp()


def independent(name: str, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    if name == "torch formula (rsqrt, mean)":
        return seed_formula_fp32(x, w, eps)
    if name == "F.rms_norm fp32":
        return F.rms_norm(x.float(), (x.shape[-1],), w.float(), eps)
    raise ValueError(name)


def measure(dev: torch.device, rows: int, dtype: str, dim: int, family: str, eps: float,
            bound: Any) -> tuple[int, list[list[Any]]]:
    """The reference's max ULP against the fp64 oracle for one configuration, and (in fp32) a row per
    independent implementation against the reference."""
    gen = torch.Generator().manual_seed(dim * 7 + len(family))
    x = make_values(family, rows, dim, dtype, eps, gen).to(dev)
    w = make_weight("normal", dim, dtype, gen).to(dev)
    oracle = oracle_fp64(x.float(), w.float(), eps)
    r = compare_within(REF.forward(x, w, eps), oracle, bound, correctly_rounded=oracle)
    out = []
    if dtype == "float32":
        for name in ("torch formula (rsqrt, mean)", "F.rms_norm fp32"):
            t = compare_within(independent(name, x, w, eps), REF.forward_fp32(x, w, eps), bound)
            out.append([name, dim, family, eps, t.max_abs, t.max_rel, t.max_ulp, t.margin])
    return r.max_ulp, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None)
    parser.add_argument("--rows", type=int, default=512)
    args = parser.parse_args()
    dev = torch.device(args.device)
    seed_fp32 = profile("seed").output_bound("float32")
    ulp_rows, tol_rows = [], []
    for dtype in ("float32", "bfloat16", "float16"):
        for dim in (128, 4096, 1000, 8192):
            worst_ulp, worst_name = 0, ""
            for family in VALUE_FAMILIES:
                for eps in (1e-6, 1e-5, 1e-2):
                    max_ulp, rows = measure(dev, args.rows, dtype, dim, family, eps, seed_fp32)
                    if max_ulp >= worst_ulp:
                        worst_ulp, worst_name = max_ulp, f"{family}, eps {eps:g}"
                    tol_rows += rows
            ulp_rows.append([dtype, dim, worst_ulp, worst_name])
    worst = {}
    for name, dim, family, eps, mabs, mrel, mulp, margin in tol_rows:
        key = (name, dim)
        if key not in worst or margin > worst[key][-1]:
            worst[key] = [name, dim, family, eps, f"{mabs:.3g}", f"{mrel:.3g}", mulp, margin]
    text = "\n".join([
        f"# Calibration of the fp32 bounds ({dev}, torch {torch.__version__})", "",
        "Command: `python benchmarks/calibrate.py --device " + args.device + "`", "",
        f"Value families: {', '.join(VALUE_FAMILIES)}; eps 1e-6, 1e-5, 1e-2; {args.rows} rows each.", "",
        "## The reference's own error: forward output against the fp64 oracle rounded to the output dtype", "",
        tabulate(ulp_rows, ["dtype", "dim", "max ULP", "where"], tablefmt="github"), "",
        f"## Independent fp32 implementations against the reference (seed bound {seed_fp32.describe()})", "",
        tabulate(list(worst.values()), ["implementation", "dim", "worst family", "eps", "max abs", "max rel",
                                        "max ULP", "margin"], tablefmt="github", floatfmt=".3g"), "",
    ])
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
