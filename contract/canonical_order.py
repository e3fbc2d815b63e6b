"""The canonical reduction order: the exact sequence of fp32 operations that the project's own backends follow,
so that native, Triton and CUDA are bitwise equal to each other on every input and device, not only each
batch-invariant. It is data here; CONTRACT.md renders it, contract/reference.py implements it.

Why the normalize step multiplies by a reciprocal: a correctly rounded division per element (``x / rms``) is
a MUFU reciprocal, a Newton-Raphson correction and a range check on a GPU, which made the kernels
compute-bound on an H200; one correctly rounded division per row (``inv = 1 / rms``) and a rounded multiply
per element is as cheap as a copy. ``x * inv`` is not always ``RN(x / rms)`` (two roundings instead of one:
at most about one fp32 ulp apart), which moves no accuracy bound: the fp32 bound is 1e-5, the bf16/fp16 ones
a few ulp of the output dtype. What must not move is where zeros, NaN and Inf land; ``RECIPROCAL_NOTE`` says
why they do not.
"""

from __future__ import annotations

from typing import NamedTuple

# Elements per group: one 16-byte vector of bf16/fp16 (two of fp32), so a GPU thread reduces a group in
# registers straight from one vectorised load.
GROUP = 8


class Step(NamedTuple):
    """One step of the canonical order: a short name and the statement a kernel author implements."""

    name: str
    statement: str


CANONICAL_ORDER: tuple[Step, ...] = (
    Step("squares", "Each square is formed in fp32 from the upcast input, `s_i = x_i * x_i`: one correctly "
         "rounded multiply, never fused into a multiply-add with the add that follows."),
    Step("padding", f"The row of D squares is padded with +0.0 to `P = max({GROUP}, next power of two >= D)` "
         f"and cut into `G = P/{GROUP}` groups of {GROUP} consecutive elements (one 16-byte vector of bf16 or "
         "fp16, two of fp32)."),
    Step("group", "Each group `v` is reduced by halving: `v[0:4] + v[4:8]`, then `[0:2] + [2:4]`, then "
         "`[0] + [1]` (fp32 adds)."),
    Step("groups", "The G group sums `r` are reduced by halving: `r[0:G/2] + r[G/2:G]`, repeated until one "
         "value `S` is left. (A GPU thread that owns groups t, t+T, t+2T, ... does the first levels in "
         "registers; the rest pair thread t with t+T/2.)"),
    Step("normalize", "`mean = S / D` (correctly rounded division by D as a value, not a multiply by 1/D), "
         "`rms = sqrt(mean + eps)` (fp32 add, correctly rounded sqrt), `inv = 1 / rms` (one correctly rounded "
         "division per row, not an approximate reciprocal or rsqrt), `xhat = x32 * inv`, `y32 = xhat * w32` "
         "(two separately rounded multiplies, never one multiply-add); `y` is `y32` rounded once to the output "
         "dtype (`forward_fp32` returns `y32`). The weight offset multiplies `xhat` by `1 + w32` formed in "
         "fp32 (or the weight's dtype, where declared); no weight: `y32 = xhat`."),
    Step("backward dot", "The backward's row sum `dot = sum((g * w) * x)`, each product rounded in fp32, is "
         "formed in the order of the padding, group and groups steps."),
    Step("backward dx", "`coef = (dot / D) / (rms * rms)` (once a row: two correctly rounded divisions and a "
         "multiply), `dx32 = (g * w - x32 * coef) * inv`, every operation a separate correctly rounded fp32 "
         "operation in that order (no multiply-add); `dx` is `dx32` rounded once to x's dtype."),
    Step("backward dw", "For each column, the products `p_r = g_r * (x32_r * inv_r)` of every row r (leading "
         "dims flattened; `x32_r * inv_r` is the forward's `xhat`) are summed in the order of the padding, "
         "group and groups steps with rows in place "
         "of elements, then `+ 0.0` is added: a zero sum is +0.0, so a kernel may pad the rows with zero rows "
         "up to any larger power of two; `dw` is that rounded once to the weight's dtype. The order depends on the "
         "number of rows only, never on a launch."),
)


# Why x * inv keeps every zero, NaN and Inf where x / rms puts it (each case is a row's rms; x one of its
# elements, so x is non-finite only in a row whose sum of squares, and with it rms, is non-finite).
RECIPROCAL_NOTE = (
    "`x * inv` puts zeros (with their signs), NaN and Inf exactly where `x / rms` does. "
    "rms is NaN (a NaN in the row): inv is NaN and so is every element, as with the division. "
    "rms is +Inf (an Inf in the row, or a sum of squares that overflows fp32): inv is +0.0; a finite x gives "
    "x * +0.0 = a zero of x's sign, as x / Inf does, and an infinite x gives Inf * 0 = NaN, as Inf / Inf does. "
    "rms is +0.0 (only where eps rounds to 0 in fp32, below 2^-150, on a row whose squares are all +0.0): "
    "inv is +Inf; a zero x gives 0 * Inf = NaN, as 0 / 0 does, and a nonzero x (whose square underflowed) "
    "an Inf of its sign, as x / 0 does. "
    "rms is finite and positive: then rms >= 2^-75 (the square root of the smallest positive fp32) and "
    "rms <= 2^64, so inv is a normal number in [2^-64, 2^75], never 0 or Inf; x is finite, and "
    "|x / rms| is at most about sqrt(D) (x's own square is in the sum) or, where the mean square underflowed, "
    "below 2^27 (such an x is below 2^-48 and rms is at least 2^-75), so neither x / rms nor x * inv "
    "overflows; both are finite with x's sign (a zero x gives a zero of its sign both ways), and they differ "
    "by at most one fp32 ulp (two roundings instead of one; inv is within 2^-24 of 1 / rms, relatively), "
    "which can also turn an underflowing quotient into a zero or the smallest subnormal. "
    "The weight's multiply is the same step as before, so y's NaN/Inf pattern follows xhat's. The backward's "
    "per-element multiplies by inv follow the same cases: dx's and dw's terms are NaN/Inf/zero where the "
    "division by rms made them."
)


def padded_width(size: int) -> int:
    """P for a reduction over ``size`` elements: ``max(GROUP, next power of two >= size)``."""
    if size < 0:
        raise ValueError(f"size={size} must be at least 0")
    return max(GROUP, 1 << max(size - 1, 0).bit_length())


def render_markdown() -> str:
    """The canonical order as CONTRACT.md's numbered list, then why its reciprocal keeps the edge cases."""
    steps = "\n".join(f"{i}. **{step.name}.** {step.statement}" for i, step in enumerate(CANONICAL_ORDER, 1))
    return f"{steps}\n\n**Edge cases of the reciprocal.** {RECIPROCAL_NOTE}"
