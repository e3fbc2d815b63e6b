"""The RMSNorm contract instance: formula, domain, Axis-A variants, Axis-B bounds, semantics, gradients.

Every suite, report and CONTRACT.md reads this module; a number lives here once, with where it comes from.
"""

from __future__ import annotations

from .rules import Profile, Rule, Tolerance, UlpBound

VERSION = "2.0.0"

FORMULA = "y = x * rsqrt(mean(x^2, dim=-1) + eps) * weight"
DEFAULT_EPS = 1e-6

# The dtypes the contract covers; names are torch's, so `getattr(torch, name)` gives the dtype.
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")

# Qwen3-8B: hidden 4096 for the input and post-attention norms, head_dim 128 for QK-norm.
TARGET_DIMS: dict[str, int] = {"hidden": 4096, "head_dim": 128}

DOMAIN = (
    "Accuracy (Axis-B) is promised for finite inputs whose sum of squares is finite in fp32 and a finite "
    "eps > 0. Outside that domain a row's own output is unspecified beyond NaN/Inf placement, but Axis-A "
    "holds everywhere: no row may change another row's bits."
)

AXIS_A_VARIANTS: tuple[Rule, ...] = (
    Rule("axis_a.batch_size", "batch size",
         "Rows [0:b] computed alone equal the same rows inside a batch of N > b."),
    Rule("axis_a.slice_offset", "slice offset",
         "Rows [a:a+b], as a view and as a copy, equal rows a..a+b of the full batch."),
    Rule("axis_a.padding", "padding",
         "Real rows beside pad rows of any content (zeros, random, huge, NaN, Inf), before or after, equal "
         "the real rows computed alone."),
    Rule("axis_a.position", "position",
         "The same row placed at any index of a batch gives the same bits."),
    Rule("axis_a.permutation", "permutation",
         "Permuting the rows of a batch permutes the output rows and changes no bits."),
    Rule("axis_a.leading_dims", "leading dims",
         "[B, S, D] equals the flattened [B*S, D]; QK-norm's [T, H, 128] equals [T*H, 128]."),
    Rule("axis_a.strided_rows", "strided rows",
         "A view whose rows sit in a wider buffer, or a column-major layout, equals a contiguous copy."),
    Rule("axis_a.repeat", "repeat",
         "The same call twice gives the same bits."),
)

AXIS_B_RULES: tuple[Rule, ...] = (
    Rule("axis_b.output", "output accuracy",
         "forward(x, w) in x.dtype lies within the profile's bound of the fp32 reference computed from the "
         "very inputs the backend received (upcast), and NaN/Inf sit exactly where the reference has them."),
    Rule("axis_b.forward_fp32", "fp32 output accuracy",
         "Where a backend offers forward_fp32, its fp32 output lies within the float32 bound of the "
         "reference for inputs of every dtype."),
)

SEMANTIC_RULES: tuple[Rule, ...] = (
    Rule("semantics.eps_inside_sqrt", "eps inside the sqrt",
         "eps is added to mean(x^2) before the square root: rows whose mean square is near eps show it."),
    Rule("semantics.plain_weight", "plain weight",
         "The output is scaled by weight, not by 1 + weight: a zero weight gives a zero output."),
    Rule("semantics.independent_formula", "independent formula",
         "The output agrees, within the bound, with the formula written directly in fp32 torch ops."),
    Rule("semantics.dtype_routing", "dtype routing",
         "forward returns x.dtype, forward_fp32 returns float32; shape and device are those of x."),
    Rule("semantics.shape_guard", "shape guard",
         "A weight that is not 1-D of size x.shape[-1] makes the call raise: it is never broadcast, reshaped "
         "or read out of bounds."),
    Rule("semantics.purity", "purity",
         "Inputs are unchanged, nothing outside the output is written, and the output aliases no input."),
    Rule("semantics.empty_batch", "empty batch",
         "Zero rows (any leading dims with a zero) give an empty output of x's shape and dtype."),
    Rule("semantics.dim_one", "dim 1",
         "A last dim of 1 is normalised like any other."),
    Rule("semantics.global_state", "global state",
         "A call leaves torch's process-wide state as it found it: default dtype and device, grad and inference "
         "mode, deterministic-algorithm flags, matmul precision, RNG state, thread count."),
    Rule("semantics.fresh_output", "fresh output",
         "An output, once returned, belongs to the caller: a later call must not change it (no reused output "
         "buffer, as a CUDA-graph static output would be)."),
    Rule("semantics.nonfinite_confined", "NaN/Inf confined",
         "A NaN or Inf in one row changes no other row's bits and sits where the reference puts it."),
)

INTERFACE_RULES: tuple[Rule, ...] = (
    Rule("interface.shape_error", "shape error",
         "The error for a wrong-shaped weight is a ValueError naming both shapes.", severity="interface"),
    Rule("interface.input_errors", "input errors",
         "Dtypes the backend does not declare raise TypeError naming the dtype; mismatched devices raise "
         "ValueError naming both devices; an eps that is not a number raises TypeError or ValueError naming eps; "
         "a non-finite or non-positive eps raises ValueError naming eps.", severity="interface"),
)

GRADIENT_RULES: tuple[Rule, ...] = (
    Rule("gradients.dx_tolerance", "dx accuracy",
         "dx lies within the profile's gradient bound of fp32 autograd through the reference."),
    Rule("gradients.dw_tolerance", "dw accuracy",
         "dw lies within the profile's gradient bound of fp32 autograd through the reference."),
    Rule("gradients.dx_batch_invariance", "dx batch invariance",
         "dx of rows [0:b] computed alone equals dx of the same rows inside a larger batch, bitwise."),
    Rule("gradients.dw_determinism", "dw determinism",
         "dw is bitwise identical run to run for the same inputs."),
)

# Checked only when a run asks for it (--require-parity, --modes): then it gates like any numerics rule.
PARITY_RULES: tuple[Rule, ...] = (
    Rule("parity.bitwise", "bitwise parity",
         "Two backends required to be at parity (or one backend and itself under torch.compile or CUDA-graph "
         "replay) give identical output bits for the same input bits, under every Axis-A variant, dtype and "
         "entry point both offer."),
)

ALL_RULES: tuple[Rule, ...] = (AXIS_A_VARIANTS + AXIS_B_RULES + SEMANTIC_RULES + GRADIENT_RULES + INTERFACE_RULES
                               + PARITY_RULES)
RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in ALL_RULES}


def rule(rule_id: str) -> Rule:
    """The rule called ``rule_id``; a KeyError lists the known ones."""
    try:
        return RULES_BY_ID[rule_id]
    except KeyError:
        raise KeyError(f"no contract rule {rule_id!r}; known: {', '.join(RULES_BY_ID)}") from None


# Gradients carry a reduction over the row (dx) or over the batch (dw) on top of the forward's rounding,
# so they get their own bounds. Calibrated on normal inputs: see CONTRACT.md, "Calibration".
_GRADIENTS: dict[str, Tolerance] = {
    "float32": Tolerance(1e-4, 1e-4, "fp32 dw sums thousands of rows; 1e-4 is ~800 ULP of slack."),
    "bfloat16": Tolerance(5e-2, 2e-2, "one bf16 rounding (2^-8 relative) of a value with cancellation."),
    "float16": Tolerance(5e-3, 2e-3, "one fp16 rounding (2^-11 relative) of a value with cancellation."),
}

SEED = Profile(
    name="seed",
    description="The seed's tolerances, with fp32 calibrated: the default gate.",
    output={
        "float32": Tolerance(1e-5, 1e-5, "calibrated: independent fp32 formulas reach margin 0.03 of it "
                                         "(benchmarks/calibrate.py)."),
        "bfloat16": Tolerance(2e-2, 1.6e-2, "seed value: about two bf16 ULP (2^-8 = 3.9e-3) of slack."),
        "float16": Tolerance(1e-3, 1e-3, "seed value: about two fp16 ULP (2^-11 = 4.9e-4) of slack."),
    },
    gradients=_GRADIENTS,
)

STRICT = Profile(
    name="strict",
    description="At most 1 ULP from the correctly rounded (fp64) value in bf16 and fp16; fp32 as calibrated.",
    output={
        "float32": UlpBound(8, "fp32 output keeps its fp32 accumulation error: the reference itself reaches "
                               "4 ULP (benchmarks/calibrate.py); 8 admits one other reduction order."),
        "bfloat16": UlpBound(1, "fp32 accumulation then one rounding to bf16: 1 ULP at a tie at most."),
        "float16": UlpBound(1, "fp32 accumulation then one rounding to fp16: 1 ULP at a tie at most."),
    },
    gradients=_GRADIENTS,
)

PROFILES: dict[str, Profile] = {SEED.name: SEED, STRICT.name: STRICT}
DEFAULT_PROFILE = SEED.name


def profile(name: str) -> Profile:
    """The profile called ``name``; a KeyError lists the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"no contract profile {name!r}; known: {', '.join(PROFILES)}") from None
