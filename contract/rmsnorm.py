"""The RMSNorm contract instance: formula, domain, Axis-A variants, Axis-B bounds, semantics, gradients.

Every suite, report and CONTRACT.md reads this module; a number lives here once, with where it comes from.
"""

from __future__ import annotations

from .families import axis_a, axis_b, fp8, gradients, interface, parity, semantics, variants
from .rules import Profile, Rule, Tolerance, UlpBound

VERSION = "2.11.0"

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

AXIS_A_VARIANTS: tuple[Rule, ...] = axis_a.RULES

AXIS_B_RULES: tuple[Rule, ...] = axis_b.RULES

SEMANTIC_RULES: tuple[Rule, ...] = semantics.RULES

INTERFACE_RULES: tuple[Rule, ...] = interface.RULES

GRADIENT_RULES: tuple[Rule, ...] = gradients.RULES

# Checked only when a run asks for it (--require-parity, --modes): then it gates like any numerics rule.
PARITY_RULES: tuple[Rule, ...] = parity.RULES

# --- Declared capabilities, the variants engines ship, and rounding classes ---------------------------------

# (x dtype, weight dtype) pairs the contract defines. Weight in x's dtype is the default a backend declares; an
# fp32 weight with 16-bit activations is what engines run for Qwen3's q/k norms in on-policy RL.
DTYPE_PAIRS: tuple[tuple[str, str], ...] = (
    ("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float16"),
    ("bfloat16", "float32"), ("float16", "float32"),
)
MIXED_PRECISION = (
    "An fp32 weight with bf16 or fp16 x multiplies the fp32 normalized row in fp32, and the product is rounded "
    "once to x's dtype: the weight is never rounded to x's dtype first."
)
# The rules a run sweeps over every declared (x dtype, weight dtype) pair, by the first part of their ids; the
# others (semantics, interface) run once per x dtype, with the backend's first declared pair for it.
PAIR_SWEPT_AXES: tuple[str, ...] = ("axis_a", "axis_b", "gradients", "variants", "mixed_precision")
# Rules of an entry point that takes no weight: the weight's dtype means nothing to them, so they are not swept.
WEIGHTLESS_RULES: tuple[str, ...] = ("axis_a.unweighted", "variants.unweighted_output")
# Rules about an fp32 weight with 16-bit x: they run on those pairs only, where a backend declares them.
MIXED_PAIR_AXES: tuple[str, ...] = ("mixed_precision",)

# The variants, as optional backend methods; each has its reference in contract/reference.py.
VARIANTS: dict[str, str] = {
    "fused_add": "fused_add(x, residual, weight, eps) -> (y, residual_out): residual_out = x + residual in fp32, "
                 "rounded once to residual's dtype; y = RMSNorm(residual_out as stored) in x's dtype.",
    "forward_offset": "forward_offset(x, weight, eps) -> y = (x / rms) * (1 + weight), 1 + weight formed in fp32 "
                      "(or rounded to the weight's dtype where the backend declares offset_dtype = 'weight').",
    "forward_unweighted": "forward_unweighted(x, eps) -> y = x / rms, rounded once to x's dtype.",
}
# Where a backend forms 1 + weight: "float32" (the default) or "weight" (rounded to the weight's dtype).
OFFSET_DTYPES: tuple[str, ...] = ("float32", "weight")
# A fused add's residual: in x's dtype, or fp32 where a backend declares fused_add_fp32_residual.
RESIDUAL_DTYPES = "x's dtype, or float32 with bf16/fp16 x where the backend declares fused_add_fp32_residual"

# Rounding classes: where a kernel rounds. Two kernels of different classes are never bitwise equal, so the
# report says which class each backend's bits match (informational); a backend may declare its class.
ROUNDING_CLASSES: dict[str, str] = {
    "product_fp32": "the fp32 normalized row times the fp32 weight, rounded once to x's dtype (the contract's "
                    "formula, and Gemma's Hugging Face order)",
    "normalized_rounded": "the normalized row rounded to x's dtype, then multiplied by the weight and rounded "
                          "again (the Hugging Face Llama order, Liger's llama casting mode)",
    "inverse_rounded": "1/rms rounded to x's dtype, the row times it rounded, then the weight multiply rounded "
                       "again (a norm written in 16-bit torch ops, x * torch.rsqrt(var + eps).to(x.dtype)); with no "
                       "weight, the one class that rounds twice",
}
# What a fused add normalizes. Only the stored residual meets the contract; the fp32 sum is reported as a class
# so that a report can say why such a kernel is not bitwise equal to the others.
FUSED_ADD_INPUTS: dict[str, str] = {
    "stored_residual": "residual_out as stored, in the residual's dtype, for both the rms and the normalized row "
                       "(the contract)",
    "fp32_sum": "the fp32 sum x + residual before its rounding, for both (breaks "
                "variants.fused_add_stored_residual)",
    "rms_of_fp32_sum": "the rms from the fp32 sum, the normalized row from residual_out as stored (breaks "
                       "variants.fused_add_stored_residual)",
    "row_of_fp32_sum": "the rms from residual_out as stored, the normalized row from the fp32 sum (breaks "
                       "variants.fused_add_stored_residual)",
}

VARIANT_RULES: tuple[Rule, ...] = variants.RULES

# --- fp8 output: RMSNorm fused with fp8 (E4M3FN) quantization, as rollout engines ship it ---------------------
# The format's facts and the references are in contract/fp8.py. Kept in a block of its own.

FP8_VARIANTS: dict[str, str] = {
    "forward_fp8_static": "forward_fp8_static(x, weight, eps, scale) -> q: clamp(y32 / scale, -448, 448) rounded "
                          "once to float8_e4m3fn, scale one fp32 value (shape () or (1,)), y32 the fp32 reference.",
    "forward_fp8_dynamic": "forward_fp8_dynamic(x, weight, eps) -> (q, scale): scale per row, fp32 of shape "
                           "x.shape[:-1] + (1,), max(max |y32_row| / 448, 1 / (448 * 512)); q quantized with it once.",
    "fused_add_fp8_static": "fused_add_fp8_static(x, residual, weight, eps, scale) -> (q, residual_out): the fused "
                            "add's residual_out, and its y quantized with the static scale.",
    "fused_add_fp8_dynamic": "fused_add_fp8_dynamic(x, residual, weight, eps) -> (q, scale, residual_out): the fused "
                             "add's residual_out, and its y quantized with per-row dynamic scales.",
}
VARIANTS.update(FP8_VARIANTS)  # every variant is an optional backend method the harness knows by name

# Where an fp8 kernel rounds before it quantizes. Two kernels of different classes give different fp8 bits on
# the elements where the x-dtype rounding lands the value on an fp8 rounding tie (1.2% of bf16 outputs, 0.14% of
# fp16 ones, at 64 x 4096 normal rows with dynamic scales).
FP8_ROUNDING_CLASSES: dict[str, str] = {
    "fp32_once": "the fp32 normalized row times the weight, divided by the scale and quantized once (the "
                 "contract; FlashInfer's rmsnorm_quant)",
    "through_x_dtype": "the normalized row rounded to x's dtype first (under either rounding class of forward), "
                       "then quantized: vLLM's fused quant kernels, which round x * rms to x's dtype",
}

FP8_OUTPUT_BOUND = UlpBound(
    1, "E4M3FN has 3 mantissa bits (a relative step of 2^-3 to 2^-4): a kernel that rounds the normalized row to "
       "bf16 or fp16 before quantizing (unit roundoff 2^-8 or 2^-11 per rounding, vLLM's order), multiplies by "
       "1 / scale or reduces in another order moves the value across at most one fp8 rounding boundary. "
       "Calibrated: native 0 ULP, through x's dtype 1 ULP, static and dynamic, bf16 and fp16, every value family "
       "(python benchmarks/calibrate_fp8.py).")
FP8_SCALE_BOUND = Tolerance(
    0.0, 2.0**-6, "a scale taken from the row's max after rounding the row to bf16 must pass: vLLM's order rounds "
                  "twice (unit roundoff 2^-8 each), just under 2^-7, and reaches 2^-7.4 in calibration (fp16: "
                  "2^-10.3; native 0; python benchmarks/calibrate_fp8.py); 2^-6 leaves a factor of two, while a "
                  "scale from other rows' max (a block of rows, the batch) is off by tens of percent.")

FP8_RULES: tuple[Rule, ...] = fp8.RULES

# --- Thresholds: where real kernels switch strategy ---------------------------------------------------
# Every sweep checks the batch-size, slice-offset and padding variants at each of these row counts in each of
# THRESHOLD_DIMS, and QK-norm's [T, H, 128] at each head count, as explicit cases beside the random draws
# (harness/drawing/thresholds.py), as far as the element budget reaches; the report lists what it could not reach.
THRESHOLD_ROWS: tuple[int, ...] = (
    *range(1, 17),                 # decode batches: one-row paths, and rows split across lanes below 16
    255, 256, 257,                 # block sizes and autotuner buckets
    264,                           # two rows per SM on a 132-SM H200: where persistent kernels start to loop
    1023, 1024, 1025, 2047, 2048, 2049, 4096, 8192, 16384,  # prefill batches: split reductions, new tiles
    32767, 32768,                  # Liger-Kernel packs 16 rows per program from 32768 rows at dim <= 256
    65536, 131072,                 # long-context prefill at head_dim 128 (QK-norm sees tokens x heads rows)
    # Past 2^18 rows, where a GPU's memory holds them: a 16K-token prefill chunk of 128 query heads is 2^21 rows of
    # head_dim, and kernels that put rows on a grid axis of at most 65535 blocks tile them in further launches.
    262144, 524288, 1048576, 2097152,
)
# 32-bit offsets: a kernel that forms row * row_stride in int32 reads and writes the wrong rows once an offset
# passes 2^31 elements. Checked on rows near the end of a contiguous batch past 2^31 elements (524,304 rows of
# 4096: its last 16 rows start at or past 2^31) and of a strided view whose last rows start past 2^31 while the
# view holds half as many elements, where memory allows; listed under "Did not run" elsewhere.
INT32_OFFSET_LIMIT = 2**31
INT32_OFFSET_DIM = 4096
INT32_OFFSET_ROWS_CHECKED = 16
# Launch grids sized by the GPU: k x its SM count.
THRESHOLD_SM_MULTIPLES: tuple[int, ...] = (1, 2, 3, 4)
DEFAULT_SM_COUNT = 132  # an H200's: the SM count the multiples use where no GPU is present
# Hidden sizes past 8192: Falcon-180B's 14848 and Llama-3.1-405B's 16384. Kernels keep a path of their own for rows
# this wide (a split row, another block loop).
WIDE_DIMS: tuple[int, ...] = (14848, 16384)
# 16384's odd neighbours: a one-element tail past a power-of-two block, and a row one short of it. The sweeps draw
# them and the accuracy checks run at them; a wide row's row-count switches are checked at WIDE_DIMS (on a CPU each
# threshold dim costs the gate as much as the other dims' thresholds together).
WIDE_TAIL_DIMS: tuple[int, ...] = (16383, 16385)
# The target dims, Qwen3-14B/32B's hidden 5120, 8192 (70B-class hidden) and the wide dims.
THRESHOLD_DIMS: tuple[int, ...] = (4096, 128, 5120, 8192, *WIDE_DIMS)
# QK-norm heads of 128: 8 key/value heads, and 32 (Qwen3-8B), 40 (Qwen3-14B), 64 (Qwen3-32B) and 128 query heads
# (DeepSeek-V3's and Llama-3.1-405B's count: a QK-norm model of their width).
QK_NORM_HEADS: tuple[int, ...] = (8, 32, 40, 64, 128)
QK_NORM_TOKENS: tuple[int, ...] = (1, 2, 3, 16, 17, 257, 2048)

ALL_RULES: tuple[Rule, ...] = (AXIS_A_VARIANTS + AXIS_B_RULES + SEMANTIC_RULES + GRADIENT_RULES + INTERFACE_RULES
                               + PARITY_RULES + VARIANT_RULES + FP8_RULES)

RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in ALL_RULES}


def rule(rule_id: str) -> Rule:
    """The rule called ``rule_id``; a KeyError lists the known ones."""
    try:
        return RULES_BY_ID[rule_id]
    except KeyError:
        raise KeyError(f"no contract rule {rule_id!r}; known: {', '.join(RULES_BY_ID)}") from None


# Gradients carry a reduction over the row (dx) or over the batch (dw) on top of the forward's rounding,
# so they get their own bounds. atol and rtol were set on normal inputs; where dx's two terms cancel (rows of small
# scale) every fp32 order is off by roundings of the terms, not of dx, so each bound also allows
# GRADIENT_TERM_ROUNDINGS fp32 roundings of them (reference.gradient_terms). See CONTRACT.md, "Calibration".
GRADIENT_TERM_ROUNDINGS = 256
_TERMS_WHY = (" Plus 256 fp32 roundings of the terms: correct fp32 backwards in other orders reached 15 (tree orders) "
              "and 146 (every sum left to right, dim 16384), margins of at most 0.08; one fp16 rounding of the terms "
              "is 32 times more (benchmarks/calibrate_gradients.py).")
# Measured against Hugging Face's eager modules under autograd, weight in x's dtype (benchmarks/hf_gradients.py,
# reports/cpu/hf-gradients.md), and kept: loosened for them, the bound would pass a planted defect as well.
_EAGER_WHY = (" Hugging Face's LlamaRMSNorm (and Qwen3RMSNorm, the same code) under autograd fails it: {llama}. Its "
              "backward rounds g * w and each g * xhat to x's dtype before the sums, 1-4 roundings in x's dtype of "
              "the terms; the zoo's LowPrecisionGradientSum, which rounds dx's two terms so, reaches {zoo}, so a "
              "bound that passed Llama's dx would pass that defect. GemmaRMSNorm, fp32 inside and rounded once, "
              "passes at {gemma} (reports/cpu/hf-gradients.md).")
_GRADIENTS: dict[str, Tolerance] = {
    "float32": Tolerance(1e-4, 1e-4, "fp32 dw sums thousands of rows; 1e-4 is ~800 ULP of slack." + _TERMS_WHY,
                         GRADIENT_TERM_ROUNDINGS),
    "bfloat16": Tolerance(5e-2, 2e-2, "one bf16 rounding (2^-8 relative) of a value with cancellation." + _TERMS_WHY
                          + _EAGER_WHY.format(llama="dx margin 12.5, dw 2.8", zoo="dx margin 9.4",
                                              gemma="0.19 and 0.18"),
                          GRADIENT_TERM_ROUNDINGS),
    "float16": Tolerance(5e-3, 2e-3, "one fp16 rounding (2^-11 relative) of a value with cancellation." + _TERMS_WHY
                         + _EAGER_WHY.format(llama="dx margin 2.6, dw 1.7", zoo="dx margin 3.8",
                                             gemma="0.24 and 0.21"),
                         GRADIENT_TERM_ROUNDINGS),
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
