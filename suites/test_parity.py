"""Cross-backend parity, for the report: do backends agree bitwise on the same inputs, and if not, by how
many ULPs. Informational, except for one consequence of Axis-B that must hold: two backends that both meet
the output bound cannot be further apart than twice it.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from ..contract import Tolerance
from ..harness import (
    Batch,
    compare_within,
    ulp_distance,
)

# Both target dims, an odd dim and a wide one; batch sizes from one row to many.
SHAPES = ((1, 4096), (257, 4096), (8192, 128), (3, 1000), (64, 8192))


def test_cross_backend_parity(parity):
    """Each shape's outputs of every backend whose declared limits take it, compared pair by pair."""
    bound = parity.profile.output_bound(parity.dtype)
    doubled = Tolerance(2 * bound.atol, 2 * bound.rtol, "twice the output bound") if isinstance(
        bound, Tolerance) else None
    compared = 0
    for seed, (rows, dim) in enumerate(SHAPES):
        batch = Batch(dim=dim, rows=rows, dtype=parity.dtype, values="normal", seed=seed)
        x, w = batch.x().to(parity.device), batch.w().to(parity.device)
        backends = parity.taking(x, w)
        if len(backends) < 2:
            continue
        # A backend that refuses the shape (recorded as refused) sits it out.
        outputs = {b.name: out.cpu() for b in backends if (out := parity.forward(b, x, w, batch.eps)) is not None}
        if len(outputs) < 2:
            continue
        compared += 1
        for (a, out_a), (b, out_b) in itertools.combinations(outputs.items(), 2):
            ulps = ulp_distance(out_a, out_b)
            parity.collector.parity.append({
                "device": str(parity.device), "dtype": parity.dtype, "dim": dim, "pair": f"{a} / {b}",
                "equal": int((ulps == 0).sum()), "total": ulps.numel(), "max_ulp": int(ulps.max()),
                "equal_rows": int((ulps.reshape(-1, dim) == 0).all(dim=-1).sum()), "rows": rows})
            if doubled is not None:
                result = compare_within(out_a, out_b.float(), doubled)
                assert result.passed, f"{a} and {b} on {parity.device}, {parity.dtype}, {rows}x{dim}: " \
                                      f"{result.describe()}"
            assert torch.isfinite(out_a).all() and torch.isfinite(out_b).all()
    if not compared:
        pytest.skip(f"cross-backend parity: no shape of {SHAPES} is taken by two of "
                    f"{', '.join(b.name for b in parity.backends)} (their declared limits, or refusals)")
