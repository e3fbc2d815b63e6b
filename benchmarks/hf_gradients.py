"""The gradient bounds against the eager modules people train with: Hugging Face's LlamaRMSNorm (Qwen3RMSNorm is the
same code) and GemmaRMSNorm, in bf16 and fp16 under autograd, measured against the contract's fp32 reference as the
gradient suite measures them (``compare_within`` with the seed profile's gradient bound and ``gradient_terms``).
Not a test: it measures and writes a report.

    python benchmarks/hf_gradients.py [--device cpu] [--out reports/cpu/hf-gradients.md]

Each module's forward is written as transformers writes it (modeling_llama.py, modeling_qwen3.py,
modeling_gemma.py) in benchmarks/common_kernels.py, so transformers is not needed; its weight is a parameter in the
model's dtype, as ``model.to(torch.bfloat16)`` leaves it. Gemma scales by ``1 + weight``: its weight is set to
``w - 1`` and held to the reference with the weight it then applies, ``1 + (w - 1)`` in fp32.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Callable
from pathlib import Path

import torch
from common_kernels import gemma_rms_norm, llama_rms_norm
from tabulate import tabulate

from rmsnorm_conformance.contract import profile
from rmsnorm_conformance.contract.reference import gradient_terms, reference_fp32
from rmsnorm_conformance.harness.checking.comparison import compare_within
from rmsnorm_conformance.harness.drawing.cases import Batch
from rmsnorm_conformance.zoo import LowPrecisionGradientSum

GRADIENT_FAMILIES = ("normal", "mixed_rows")  # what the gradient suite draws (strategies.gradient_cases)
DIMS = (128, 1000, 4096, 8192)
# Elements a batch: the gradient suite's CPU budget (a quarter of the sweep's 2^22) and a sixteenth of it.
ELEMENTS = (1 << 16, 1 << 20)
Grads = tuple[torch.Tensor, torch.Tensor]


def llama(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return llama_rms_norm(x, weight, eps)


def gemma(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return gemma_rms_norm(x, weight, eps)


def planted(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The zoo's LowPrecisionGradientSum, a planted defect the gradient bound must catch: dx's two terms rounded to
    x's dtype before they are added. A bound loose enough for the Llama module would let it through too."""
    return LowPrecisionGradientSum().forward(x, weight, eps)


MODULES: dict[str, tuple[Callable[..., torch.Tensor], bool]] = {  # name: (forward, scales by 1 + weight)
    "LlamaRMSNorm / Qwen3RMSNorm": (llama, False),
    "GemmaRMSNorm": (gemma, True),
    "zoo LowPrecisionGradientSum (a defect)": (planted, False),
}


def grads(forward: Callable[..., torch.Tensor], x: torch.Tensor, w: torch.Tensor, g: torch.Tensor,
          eps: float) -> Grads:
    x = x.detach().clone().requires_grad_(True)
    w = w.detach().clone().requires_grad_(True)
    forward(x, w, eps).backward(g)
    assert x.grad is not None and w.grad is not None
    return x.grad, w.grad


def measure(dev: torch.device, b: Batch) -> list[list]:
    """One row per module: the margins of its dx and dw under the seed profile's gradient bounds, and how many
    roundings in x's dtype of the terms each gradient sums would cover its error (the bound allows 256 fp32 ones)."""
    x, w = b.x().to(dev), b.w().to(dev)
    g = torch.randn(b.rows, b.dim, generator=b.generator(salt=5)).to(x.dtype).to(dev)
    bound = profile("seed").gradient_bound(b.dtype)
    unit = torch.finfo(x.dtype).eps / 2  # one rounding in x's dtype, relative
    rows = []
    for name, (forward, offset) in MODULES.items():
        param = (w.float() - 1).to(w.dtype) if offset else w
        applied = 1 + param.float() if offset else param
        x32 = x.detach().float().requires_grad_(True)
        w32 = applied.detach().float().requires_grad_(True)
        reference_fp32(x32, w32, b.eps).backward(g.float())
        got = grads(forward, x, param, g, b.eps)
        terms = gradient_terms(x, applied, g, b.eps)
        out = []
        for k, against in enumerate((x32.grad, w32.grad)):
            assert against is not None
            result = compare_within(got[k], against, bound, terms=terms[k])
            err = (got[k].double() - against.double()).abs()
            out += [result.margin, float((err / (unit * terms[k]).clamp(min=1e-300)).max())]
        rows.append([name, b.dtype, b.dim, b.rows, b.values, *out])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None)
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    dev = torch.device(args.device)
    rows = [row for dtype in ("bfloat16", "float16") for dim in DIMS for family in GRADIENT_FAMILIES
            for elements in ELEMENTS for seed in range(args.seeds)
            for row in measure(dev, Batch(dim=dim, rows=max(2, elements // dim), dtype=dtype, values=family,
                                          weight="normal", eps=1e-6, seed=seed))]
    worst: dict[tuple[str, str], list] = {}
    for r in rows:
        best = worst.setdefault((r[0], r[1]), [r[0], r[1]] + [(0.0, "")] * 4)
        for i, v in enumerate(r[5:]):
            if v >= best[2 + i][0]:
                best[2 + i] = (v, f"dim {r[2]}, {r[3]} rows, {r[4]}")
    table = [[name, dtype, *(f"{v:.3g} ({where})" for v, where in cols)] for name, dtype, *cols in worst.values()]
    bounds = "; ".join(f"{d}: {profile('seed').gradient_bound(d).describe()}" for d in ("bfloat16", "float16"))
    text = "\n".join([
        f"# Gradient bounds against Hugging Face's RMSNorm modules ({dev}, torch {torch.__version__}, "
        f"{datetime.date.today().isoformat()})", "",
        f"Command: `python benchmarks/hf_gradients.py --device {args.device}"
        + (f" --out {args.out}`" if args.out else "`"), "",
        f"Value families {', '.join(GRADIENT_FAMILIES)}; dims {', '.join(map(str, DIMS))}; "
        f"{' and '.join(map(str, ELEMENTS))} elements a batch; {args.seeds} seeds; eps 1e-6; a normal weight and "
        "upstream gradient; the weight in x's dtype, as a model cast to it holds it.", "",
        "Worst over the cases, with the case. *margin*: the worst error over its allowance under the seed profile's "
        f"gradient bound ({bounds}); above 1 fails. *roundings of the terms*: the fewest roundings in x's dtype of "
        "the terms each element sums (`gradient_terms`) that cover the error alone.", "",
        tabulate(table, ["module", "dtype", "dx margin", "dx roundings of the terms", "dw margin",
                         "dw roundings of the terms"], tablefmt="github"), "",
    ])
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
