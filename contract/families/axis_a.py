"""Axis-A: batch invariance. A row's output bits do not depend on what else is in the batch, in every dtype
and through every entry point the backend offers.
"""

from __future__ import annotations

from ..rules import Rule

BATCH_SIZE = Rule(
    "axis_a.batch_size", "batch size",
    "Rows [0:b] computed alone equal the same rows inside a batch of N > b (at the thresholds, further "
    "runs of b consecutive rows too, so that a threshold of a few rows is checked on many).")

SLICE_OFFSET = Rule(
    "axis_a.slice_offset", "slice offset",
    "Rows [a:a+b], as a view and as a copy, equal rows a..a+b of the full batch.")

PADDING = Rule(
    "axis_a.padding", "padding",
    "Real rows beside pad rows of any content (zeros, random, huge, NaN, Inf), before or after, equal "
    "the real rows computed alone.")

POSITION = Rule(
    "axis_a.position", "position",
    "The same row placed at any index of a batch gives the same bits.")

PERMUTATION = Rule(
    "axis_a.permutation", "permutation",
    "Permuting the rows of a batch permutes the output rows and changes no bits.")

LEADING_DIMS = Rule(
    "axis_a.leading_dims", "leading dims",
    "[B, S, D] equals the flattened [B*S, D]; QK-norm's [T, H, 128] equals [T*H, 128].")

STRIDED_ROWS = Rule(
    "axis_a.strided_rows", "strided rows",
    "A view whose rows sit in a wider buffer, a column-major layout, or a 3-D view whose last dim is strided (a "
    "transposed [B, D, S] activation seen as [B, S, D]) equals a contiguous copy; a weight "
    "that is a strided view or an offset slice of a larger tensor equals a contiguous weight.")

REPEAT = Rule(
    "axis_a.repeat", "repeat",
    "The same call twice gives the same bits.")

GRAD_MODE = Rule(
    "axis_a.grad_mode", "grad mode",
    "The same rows give the same bits with inputs that require grad (training: x and the weight, x alone with "
    "the weight frozen as under LoRA, the weight alone, the weight an nn.Parameter), with plain inputs, under "
    "torch.no_grad() and under torch.inference_mode() (sampling).")

EXECUTION_MODE = Rule(
    "axis_a.execution_mode", "execution mode",
    "The same call gives eager's bits under torch.compile, captured in a CUDA graph and replayed (on a GPU), "
    "under torch.use_deterministic_algorithms(True), with 1, 2, 4 and the machine's count of intra-op threads "
    "(on a CPU), under torch.no_grad() and under torch.inference_mode(), through every entry point (forward, "
    "forward_fp32, the fused add in place or not, offset, no weight), every output. The default gate holds a "
    "sample to it (1 and 17 rows at the target dims, the weight in x's dtype, and a few drawn cases); --modes "
    "widens the compiled and captured forward to the full sweep, --modes=none turns the sample off.")

FIRST_CALL = Rule(
    "axis_a.first_call", "first call",
    "The first call a fresh backend gets for a (dim, dtype), in a fresh process where no cache is warm, "
    "gives the same bits as its later calls and as a long-running process's calls, through every entry point "
    "(forward, forward_fp32, and each variant offered), every output.")

# The family in CONTRACT.md's order.
RULES: tuple[Rule, ...] = (
    BATCH_SIZE,
    SLICE_OFFSET,
    PADDING,
    POSITION,
    PERMUTATION,
    LEADING_DIMS,
    STRIDED_ROWS,
    REPEAT,
    GRAD_MODE,
    EXECUTION_MODE,
    FIRST_CALL,
)
