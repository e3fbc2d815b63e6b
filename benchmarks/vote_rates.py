"""Why the bit votes of the variant rules are decisive: how often a correct kernel with another reduction order
sides with the other convention, and how often two conventions give different bits at all. Not a test: it
measures and prints markdown.

    python benchmarks/vote_rates.py [--out reports/cpu/vote-rates.md]

The kernel with another reduction order is the zoo's lane order (64 lanes, as a GPU block sums); the
conventions are those of CONTRACT.md, "Rounding classes": the rounding class (fp32 product vs the Hugging Face
order), where 1 + weight is formed (fp32 vs the weight's dtype), and what a fused add normalizes (the stored
residual vs the fp32 sum). Rows are normal, weights normal, at the target dims.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tabulate import tabulate

from rmsnorm_conformance.harness.checking import rounding
from rmsnorm_conformance.harness.drawing.cases import Batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rmsnorm_conformance.zoo.defects import _normalise, sum_of_squares_by_lanes

SHAPES = ((512, 4096), (8192, 128))  # 2M elements each: both target dims
SEEDS = 2
EPS = 1e-6


def lane_order(x32: torch.Tensor, scale32: torch.Tensor) -> torch.Tensor:
    return _normalise(x32, scale32, EPS, sum_of_squares_by_lanes(x32))


def measure(dtype: str) -> list[list[object]]:
    dt = getattr(torch, dtype)
    totals = {name: [0, 0, 0] for name in ("rounding class", "offset dtype", "stored residual")}
    elements = 0
    for seed in range(SEEDS):
        for rows, dim in SHAPES:
            b = Batch(dim=dim, rows=rows, dtype=dtype, weight="normal", seed=seed)
            x, w, r = b.x(), b.w(), b.residual()
            elements += x.numel()
            classes = rounding.forward_classes(x, w, EPS)
            votes = {"rounding class": rounding.vote(lane_order(x.float(), w.float()).to(dt),
                                                     [classes["product_fp32"]], [classes["normalized_rounded"]])}
            fp32_offset = rounding.offset_classes(x, w, EPS, "float32")
            weight_offset = rounding.offset_classes(x, w, EPS, "weight")
            votes["offset dtype"] = rounding.vote(lane_order(x.float(), 1.0 + w.float()).to(dt),
                                                  list(fp32_offset.values()), list(weight_offset.values()))
            stored = (x.float() + r.float()).to(dt)
            fused = rounding.fused_add_classes(x, r, stored, w, EPS)
            votes["stored residual"] = rounding.vote(lane_order(stored.float(), w.float()).to(dt),
                                                     rounding.side(fused, "stored_residual"),
                                                     rounding.side(fused, "fp32_sum"))
            for name, v in votes.items():
                for i, n in enumerate((v.discriminating, v.declared, v.other)):
                    totals[name][i] += n
    return [[dtype, name, f"{d} of {elements} ({d / elements:.1%})", m, o, f"{o / max(d, 1):.1e}"]
            for name, (d, m, o) in totals.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = measure("bfloat16") + measure("float16")
    text = "\n".join([
        "# The variant rules' bit votes: a correct kernel with another reduction order", "",
        f"`python benchmarks/vote_rates.py`; torch {torch.__version__}, CPU; shapes {list(SHAPES)} x {SEEDS} "
        "seeds, normal rows and weights.", "",
        tabulate(rows, ["dtype", "convention", "elements where the two give different bits", "own convention's bits",
                        "other's bits", "share other"], tablefmt="github"), "",
        "A breach needs the other convention's bits on at least two of those elements and on more of them than "
        "the declared one's; a kernel that follows the other convention has the other's bits on nearly all.", ""])
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
