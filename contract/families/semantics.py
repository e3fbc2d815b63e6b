"""Semantics: what the call means beyond its numbers (eps inside the sqrt, a plain weight, dtype routing, the
shape guard, purity, guard zones, device faults, edge shapes, global state, fresh outputs, NaN/Inf confined).
"""

from __future__ import annotations

from ..rules import Rule

EPS_INSIDE_SQRT = Rule(
    "semantics.eps_inside_sqrt", "eps inside the sqrt",
    "eps is added to mean(x^2) before the square root: rows whose mean square is near eps show it.")

PLAIN_WEIGHT = Rule(
    "semantics.plain_weight", "plain weight",
    "The output is scaled by weight, not by 1 + weight: a zero weight gives a zero output.")

INDEPENDENT_FORMULA = Rule(
    "semantics.independent_formula", "independent formula",
    "The output agrees, within the bound, with the formula written directly in fp32 torch ops.")

DTYPE_ROUTING = Rule(
    "semantics.dtype_routing", "dtype routing",
    "forward returns x.dtype, forward_fp32 returns float32; shape and device are those of x.")

SHAPE_GUARD = Rule(
    "semantics.shape_guard", "shape guard",
    "A weight that is not 1-D of size x.shape[-1] makes the call raise, or, where it broadcasts against x "
    "as that 1-D weight would (a (1, D) weight), gives x's shape and the 1-D weight's values within the "
    "output bound: it is never reshaped, truncated or read out of bounds into other values or shapes. Not "
    "raising at all is interface.shape_error's concern, which warns.")

PURITY = Rule(
    "semantics.purity", "purity",
    "Inputs are unchanged, nothing outside the output is written, and the output aliases no input.")

BOUNDS = Rule(
    "semantics.bounds", "guard zones",
    "A call writes nothing outside the tensors it writes: every input and in-place output lies in a larger "
    "allocation with canaries (signalling-NaN bits) before and after the view and in the gaps of strided and "
    "padded layouts, and after the call every canary is unchanged (forward, the variants, an in-place fused "
    "add's x and residual, and the backward's grad_output and inputs).")

DEVICE_FAULT = Rule(
    "semantics.device_fault", "device fault",
    "A call leaves the device usable: no device-side assert, illegal memory access or launch failure after "
    "which the context is lost. A fault is the failure of the backend and case that raised it alone; "
    "the process ends, and checks of other backends that could not run read 'not run: the device was lost'.")

EMPTY_BATCH = Rule(
    "semantics.empty_batch", "empty batch",
    "Zero rows (any leading dims with a zero) give an empty output of x's shape and dtype.")

DIM_ONE = Rule(
    "semantics.dim_one", "dim 1",
    "A last dim of 1 is normalised like any other.")

GLOBAL_STATE = Rule(
    "semantics.global_state", "global state",
    "A call leaves torch's process-wide state as it found it: default dtype and device, grad and inference "
    "mode, deterministic-algorithm flags, matmul precision, RNG state, thread count, autocast, the "
    "flushing of subnormals to zero, torch's own functions (none replaced), its mode stacks (no mode left "
    "on) and its saved-tensor hooks (none left pushed), the process's SIGINT and SIGTERM handlers and "
    "working directory, the interpreter's trace and profile functions and its recursion limit (not "
    "lowered), and the functions the verdict is computed and "
    "its report written with: the harness's own, pytest's and Hypothesis' in-test functions, and the "
    "standard library's json, file and process functions (none replaced).")

FRESH_OUTPUT = Rule(
    "semantics.fresh_output", "fresh output",
    "An output, once returned, belongs to the caller: a later call must not change it (no reused output "
    "buffer, as a CUDA-graph static output would be).")

NONFINITE_CONFINED = Rule(
    "semantics.nonfinite_confined", "NaN/Inf confined",
    "A NaN or Inf in one row changes no other row's bits and sits where the reference puts it.")

# The family in CONTRACT.md's order.
RULES: tuple[Rule, ...] = (
    EPS_INSIDE_SQRT,
    PLAIN_WEIGHT,
    INDEPENDENT_FORMULA,
    DTYPE_ROUTING,
    SHAPE_GUARD,
    PURITY,
    BOUNDS,
    DEVICE_FAULT,
    EMPTY_BATCH,
    DIM_ONE,
    GLOBAL_STATE,
    FRESH_OUTPUT,
    NONFINITE_CONFINED,
)
