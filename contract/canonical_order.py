"""The canonical reduction order: the exact sequence of fp32 operations that the project's own backends follow,
so that native, Triton and CUDA are bitwise equal to each other on every input and device, not only each
batch-invariant. It is data here; CONTRACT.md renders it, contract/reference.py implements it.
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
         "`rms = sqrt(mean + eps)` (fp32 add, correctly rounded sqrt), `y32 = (x32 / rms) * w32` (correctly "
         "rounded division, then multiply; no multiply-add, no approximate reciprocal or rsqrt); `y` is `y32` "
         "rounded once to the output dtype (`forward_fp32` returns `y32`)."),
    Step("backward dot", "The backward's row sum `dot = sum((g * w) * x)`, each product rounded in fp32, is "
         "formed in the order of the padding, group and groups steps."),
    Step("backward dx", "`dx32 = (g * w - x32 * ((dot / D) / (rms * rms))) / rms`, every operation a separate "
         "correctly rounded fp32 operation in that order; `dx` is `dx32` rounded once to x's dtype."),
    Step("backward dw", "For each column, the products `p_r = g_r * (x32_r / rms_r)` of every row r (leading "
         "dims flattened) are summed in the order of the padding, group and groups steps with rows in place "
         "of elements, then `+ 0.0` is added: a zero sum is +0.0, so a kernel may pad the rows with zero rows "
         "up to any larger power of two; `dw` is that rounded once to the weight's dtype. The order depends on the "
         "number of rows only, never on a launch."),
)


def padded_width(size: int) -> int:
    """P for a reduction over ``size`` elements: ``max(GROUP, next power of two >= size)``."""
    if size < 0:
        raise ValueError(f"size={size} must be at least 0")
    return max(GROUP, 1 << max(size - 1, 0).bit_length())


def render_markdown() -> str:
    """The canonical order as CONTRACT.md's numbered list."""
    return "\n".join(f"{i}. **{step.name}.** {step.statement}" for i, step in enumerate(CANONICAL_ORDER, 1))
