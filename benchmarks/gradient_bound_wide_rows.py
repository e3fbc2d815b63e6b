"""Beyond the calibration's dims: a backward whose every sum runs left to right in fp32
(benchmarks/calibrate_gradients.py's worst order) at dims 16384 to 262144, held to contract 2.5.0's gradient bound
(dx) and to the fp32 output bound (its forward, the same left-to-right sum of squares), 16 rows of each gradient
value family, seeds 0 and 1.

    PYTHONPATH=. python benchmarks/gradient_bound_wide_rows.py

A left-to-right sum of squares over n elements is off by up to about n roundings; dx carries that error of inv
into its terms. Where the forward's own error already breaks the output bound, the kernel fails there first."""

from __future__ import annotations

import torch

from benchmarks.calibrate_gradients import GRADIENT_FAMILIES, U32, _autograd, _sequential, _sequential_sum
from rmsnorm_conformance.contract import profile
from rmsnorm_conformance.contract.reference import gradient_terms, reference_fp32
from rmsnorm_conformance.harness.checking.comparison import compare_within
from rmsnorm_conformance.harness.drawing.cases import Batch


def main() -> None:
    dx_bound = profile("seed").gradient_bound("float32")
    out_bound = profile("seed").output_bound("float32")
    print(f"dx bound: {dx_bound.describe()}; output bound: {out_bound.describe()}")
    print("dim, family, seed: dx roundings of the terms, dx margin, forward margin")
    for dim in (16384, 65536, 262144):
        for family in GRADIENT_FAMILIES:
            for seed in (0, 1):
                b = Batch(dim=dim, rows=16, dtype="float32", values=family, weight="normal", eps=1e-6, seed=seed)
                x, w = b.x(), b.w()
                g = torch.randn(b.rows, b.dim, generator=b.generator(salt=5))
                ref_dx = _autograd(reference_fp32)(x, w, g, b.eps)[0]
                dx = _sequential(x, w, g, b.eps)[0]
                terms = gradient_terms(x, w, g, b.eps)[0]
                roundings = float(((dx.double() - ref_dx.double()).abs() / (U32 * terms)).max())
                dx_margin = compare_within(dx, ref_dx, dx_bound, terms=terms).margin
                inv = torch.rsqrt(_sequential_sum(x * x, -1).unsqueeze(-1) / dim + b.eps)
                y = x * inv * w
                y_margin = compare_within(y, reference_fp32(x, w, b.eps), out_bound).margin
                print(f"{dim}, {family}, {seed}: {roundings:.0f}, {dx_margin:.3g}, {y_margin:.3g}")


if __name__ == "__main__":
    main()
