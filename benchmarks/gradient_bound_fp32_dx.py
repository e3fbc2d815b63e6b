"""How far two correct fp32 backwards of RMSNorm lie from fp64, on the case where the fp32 gradient bound (atol 1e-4,
rtol 1e-4 of fp32 autograd through the reference) failed a kernel: dim 3, 174,763 rows of the 'mixed_rows' family
(rows whose scales differ widely), the upstream gradient test_gradient_accuracy draws.

    python benchmarks/gradient_bound_fp32_dx.py

The kernel: x / rms * w in fp32 torch ops, rms from the canonical sum of squares, its backward torch's autograd
(a correct fp32 backward in another order than the reference's)."""

from __future__ import annotations

import torch

from rmsnorm_conformance.contract import profile
from rmsnorm_conformance.contract.reference import gradient_terms, reference_fp32
from rmsnorm_conformance.harness.checking.comparison import compare_within
from rmsnorm_conformance.harness.drawing.cases import Batch


def kernel(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    t = x32 * x32
    width = 1 << (t.shape[-1] - 1).bit_length()
    t = torch.nn.functional.pad(t, (0, width - t.shape[-1]))
    while t.shape[-1] > 1:
        t = t[..., : t.shape[-1] // 2] + t[..., t.shape[-1] // 2:]
    rms = torch.sqrt(t / x.shape[-1] + eps)
    return (x32 / rms) * weight.float()


def fp64(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def grads(f, x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.detach().clone().requires_grad_(True)
    f(x, w.detach().clone().requires_grad_(True), eps).backward(g)
    return x.grad


def main() -> None:
    b = Batch(dim=3, rows=174763, dtype="float32", values="mixed_rows", weight="normal", eps=1e-06, seed=0)
    x, w = b.x(), b.w()
    g = torch.randn(b.rows, b.dim, generator=b.generator(salt=5, device="cpu")).to(x.dtype)
    oracle = grads(fp64, x.double(), w.double(), g.double(), b.eps)
    ref = grads(reference_fp32, x, w, g, b.eps)
    other = grads(kernel, x, w, g, b.eps)
    for name, dx in (("the reference (fp32)", ref), ("the other order (fp32)", other)):
        err = (dx.double() - oracle).abs()
        row = int(err.argmax()) // b.dim
        print(f"{name}: worst |dx - dx_fp64| {float(err.max()):.3e}, in a row whose largest |dx| is "
              f"{float(oracle[row].abs().max()):.4g}")
    for name, dx in (("the reference", ref), ("the other order", other)):
        margin = ((dx.double() - oracle).abs() / (1e-4 + 1e-4 * oracle.abs())).max()
        print(f"{name} against fp64 itself, worst error over the bound's allowance there: {float(margin):.2f}")
    apart = (other - ref).abs()
    margin = apart / (1e-4 + 1e-4 * ref.abs())  # the gradient bound, as the suite applies it
    i = int(margin.argmax())
    row = i // b.dim
    rms = float(x[row].double().pow(2).mean().sqrt())
    print(f"the other order against the reference: worst margin {float(margin.max()):.2f} (worst error over the "
          f"allowance) at row {row}, x = {[f'{v:.3e}' for v in x[row].tolist()]} (rms {rms:.3e}, "
          f"1 / rms {1 / rms:.4g})")
    print(f"  there dx_fp64 = {float(oracle.view(-1)[i]):.4e}, the reference {float(ref.view(-1)[i]):.4e}, the other "
          f"order {float(other.view(-1)[i]):.4e}; the row's dx_fp64 {[f'{v:.4g}' for v in oracle[row].tolist()]}")
    print(f"  off fp64 there: the reference {float((ref.view(-1)[i].double() - oracle.view(-1)[i]).abs()):.3e}, "
          f"the other order {float((other.view(-1)[i].double() - oracle.view(-1)[i]).abs()):.3e}; allowed "
          f"{1e-4 + 1e-4 * float(ref.view(-1)[i].abs()):.3e}")
    bound = profile("seed").gradient_bound("float32")
    result = compare_within(other, ref, bound, terms=gradient_terms(x, w, g, b.eps)[0])
    print(f"the contract's bound now ({bound.describe()}): worst margin {result.margin:.3g}")

if __name__ == "__main__":
    main()
