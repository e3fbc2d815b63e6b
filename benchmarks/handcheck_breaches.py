"""Check the matrix's breaches outside the harness: plain torch code, no comparison helpers, so that a bug in
the harness cannot be what makes a third-party kernel look broken. Prints one line per breach.

    python benchmarks/handcheck_breaches.py [--device cpu]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from rmsnorm_conformance.backends.torch_compile import CompiledSeedFormula


def differing(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements whose bit patterns differ (integer views: -0.0 and NaN payloads count)."""
    view = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[a.dtype]
    return int((a.contiguous().view(view) != b.contiguous().view(view)).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4096, generator=gen).to(args.device)
    w = torch.randn(4096, generator=gen).to(args.device)

    compiled = CompiledSeedFormula()
    both, first = compiled.forward(x, w, 1e-6), compiled.forward(x[:1].clone(), w, 1e-6)
    print(f"torch.compile(seed formula), fp32 4096: row 0 alone vs in a batch of 2: "
          f"{differing(first, both[:1])} of 4096 elements differ")

    eager = lambda t: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # noqa: E731
    print(f"the same formula in eager mode, same comparison: {differing(eager(x[:1].clone()), eager(x)[:1])} differ")

    col_major = x.t().contiguous().t()
    print(f"F.rms_norm, fp32 4096: column-major vs row-major copy of the same 2 rows: "
          f"{differing(F.rms_norm(col_major, (4096,), w, 1e-6), F.rms_norm(x, (4096,), w, 1e-6))} of 8192 differ")

    try:
        F.rms_norm(x, (4096,), torch.ones(4097, device=args.device), 1e-6)
    except Exception as exc:  # the contract asks for ValueError naming both shapes
        print(f"F.rms_norm with a weight of 4097 for x of 4096 raises {type(exc).__name__}")


if __name__ == "__main__":
    main()
