"""The RMSNorm contract instance: formula, domain, Axis-A variants, Axis-B bounds, semantics, gradients.

Every suite, report and CONTRACT.md reads this module; a number lives here once, with where it comes from.
"""

from __future__ import annotations

from .rules import Profile, Rule, Tolerance, UlpBound

VERSION = "2.9.0"

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
         "Rows [0:b] computed alone equal the same rows inside a batch of N > b (at the thresholds, further "
         "runs of b consecutive rows too, so that a threshold of a few rows is checked on many)."),
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
         "A view whose rows sit in a wider buffer, a column-major layout, or a 3-D view whose last dim is strided (a "
         "transposed [B, D, S] activation seen as [B, S, D]) equals a contiguous copy; a weight "
         "that is a strided view or an offset slice of a larger tensor equals a contiguous weight."),
    Rule("axis_a.repeat", "repeat",
         "The same call twice gives the same bits."),
    Rule("axis_a.grad_mode", "grad mode",
         "The same rows give the same bits with inputs that require grad (training: x and the weight, x alone with "
         "the weight frozen as under LoRA, the weight alone, the weight an nn.Parameter), with plain inputs, under "
         "torch.no_grad() and under torch.inference_mode() (sampling)."),
    Rule("axis_a.execution_mode", "execution mode",
         "The same call gives eager's bits under torch.compile, captured in a CUDA graph and replayed (on a GPU), "
         "under torch.use_deterministic_algorithms(True), with 1, 2, 4 and the machine's count of intra-op threads "
         "(on a CPU), under torch.no_grad() and under torch.inference_mode(), through every entry point (forward, "
         "forward_fp32, the fused add in place or not, offset, no weight), every output. The default gate holds a "
         "sample to it (1 and 17 rows at the target dims, the weight in x's dtype, and a few drawn cases); --modes "
         "widens the compiled and captured forward to the full sweep, --modes=none turns the sample off."),
    Rule("axis_a.first_call", "first call",
         "The first call a fresh backend gets for a (dim, dtype), in a fresh process where no cache is warm, "
         "gives the same bits as its later calls and as a long-running process's calls, through every entry point "
         "(forward, forward_fp32, and each variant offered), every output."),
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
         "A weight that is not 1-D of size x.shape[-1] makes the call raise, or, where it broadcasts against x "
         "as that 1-D weight would (a (1, D) weight), gives x's shape and the 1-D weight's values within the "
         "output bound: it is never reshaped, truncated or read out of bounds into other values or shapes. Not "
         "raising at all is interface.shape_error's concern, which warns."),
    Rule("semantics.purity", "purity",
         "Inputs are unchanged, nothing outside the output is written, and the output aliases no input."),
    Rule("semantics.bounds", "guard zones",
         "A call writes nothing outside the tensors it writes: every input and in-place output lies in a larger "
         "allocation with canaries (signalling-NaN bits) before and after the view and in the gaps of strided and "
         "padded layouts, and after the call every canary is unchanged (forward, the variants, an in-place fused "
         "add's x and residual, and the backward's grad_output and inputs)."),
    Rule("semantics.device_fault", "device fault",
         "A call leaves the device usable: no device-side assert, illegal memory access or launch failure after "
         "which the context is lost. A fault is the failure of the backend and case that raised it alone; "
         "the process ends, and checks of other backends that could not run read 'not run: the device was lost'."),
    Rule("semantics.empty_batch", "empty batch",
         "Zero rows (any leading dims with a zero) give an empty output of x's shape and dtype."),
    Rule("semantics.dim_one", "dim 1",
         "A last dim of 1 is normalised like any other."),
    Rule("semantics.global_state", "global state",
         "A call leaves torch's process-wide state as it found it: default dtype and device, grad and inference "
         "mode, deterministic-algorithm flags, matmul precision, RNG state, thread count, autocast, the "
         "flushing of subnormals to zero, torch's own functions (none replaced), its mode stacks (no mode left "
         "on) and its saved-tensor hooks (none left pushed), the process's SIGINT and SIGTERM handlers and "
         "working directory, the interpreter's trace and profile functions and its recursion limit (not "
         "lowered), and the functions the verdict is computed and "
         "its report written with: the harness's own, pytest's and Hypothesis' in-test functions, and the "
         "standard library's json, file and process functions (none replaced)."),
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
         "Dtypes the backend does not declare raise TypeError naming the dtype, and so does every (x dtype, "
         "weight dtype) pair it does not declare, naming both; mismatched devices raise "
         "ValueError naming both devices; an eps that is not a number raises TypeError or ValueError naming eps; "
         "a non-finite or non-positive eps raises ValueError naming eps.", severity="interface"),
    Rule("interface.opcheck", "torch.library op check",
         "A backend that is a torch.library op passes torch.library.opcheck: its schema matches what it does "
         "(no undeclared mutation or aliasing), its fake (meta) kernel gives the real output's shape, dtype and "
         "strides, and its autograd registration is sound.", severity="interface"),
    Rule("interface.in_place_version", "in-place version counters",
         "A fused add that declares fused_add_in_place moves the autograd version counters of x and residual "
         "when it writes them, as every in-place torch op does: a graph that saved either before the write then "
         "refuses to use it, where a kernel that writes through pointers alone lets a backward run on "
         "overwritten values.", severity="interface"),
)

GRADIENT_RULES: tuple[Rule, ...] = (
    Rule("gradients.dx_tolerance", "dx accuracy",
         "dx, with the weight trained and with it frozen (x alone requiring grad, as under LoRA), lies within the "
         "profile's gradient bound of fp32 autograd through the reference. Besides atol and "
         "rtol, the bound allows fp32 roundings of the terms dx sums, inv * (|g w| + |xhat| * mean(|g w xhat|)): "
         "in rows of small scale those terms cancel to a small dx, and any fp32 order is off by roundings of them."),
    Rule("gradients.dw_tolerance", "dw accuracy",
         "dw lies within the profile's gradient bound of fp32 autograd through the reference, with the same "
         "allowance for roundings of its terms, sum(|g xhat|) over the rows."),
    Rule("gradients.dx_batch_invariance", "dx batch invariance",
         "dx of rows [0:b] computed alone equals dx of the same rows inside a larger batch, bitwise, with the "
         "weight trained and with it frozen (requires_grad=False, as under LoRA)."),
    Rule("gradients.dw_determinism", "dw determinism",
         "dw is bitwise identical run to run for the same inputs, and on a CPU with 1, 2, 4 and the machine's count "
         "of intra-op threads, at drawn batches and at the large-batch thresholds."),
)

# Checked only when a run asks for it (--require-parity, --modes): then it gates like any numerics rule.
PARITY_RULES: tuple[Rule, ...] = (
    Rule("parity.bitwise", "bitwise parity",
         "Two backends required to be at parity (or one backend and itself under torch.compile or CUDA-graph "
         "replay) give identical output bits for the same input bits, under every Axis-A variant, dtype and "
         "entry point both offer. A NaN matches any NaN in the same place: IEEE 754 leaves NaN sign and payload "
         "to the implementation, and devices differ in them."),
)

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

VARIANT_RULES: tuple[Rule, ...] = (
    Rule("axis_a.fused_add", "fused add batch invariance",
         "fused_add's y and residual_out hold every Axis-A variant above (batch size, slice offset, padding, "
         "position, permutation, leading dims, strided rows and weight layouts, repeat, grad mode, and the "
         "thresholds), bitwise, the residual transformed like x; its first calls are held to axis_a.first_call."),
    Rule("axis_a.offset", "offset batch invariance",
         "forward_offset's output holds every Axis-A variant above, bitwise, the thresholds included (its first "
         "calls: axis_a.first_call)."),
    Rule("axis_a.unweighted", "no-weight batch invariance",
         "forward_unweighted's output holds every Axis-A variant above, bitwise, the thresholds included (its first "
         "calls: axis_a.first_call)."),
    Rule("variants.fused_add_residual", "fused add residual",
         "residual_out is bitwise x + residual computed in fp32 and rounded once to the residual's dtype; a "
         "backend that declares fused_add_in_place writes it into residual (and y into x), and returns nothing "
         "or the tensors it wrote, (x, residual)."),
    Rule("variants.fused_add_output", "fused add output accuracy",
         "fused_add's y, in x's dtype and shape, lies within the output bound of the fp32 reference RMSNorm of "
         "residual_out as stored."),
    Rule("variants.fused_add_stored_residual", "fused add normalizes the stored residual",
         "The rms and the normalized row of y both come from residual_out as stored, never from the fp32 sum. y "
         "is held against each other choice in turn (both from the sum, the rms from the sum, the row from the "
         "sum), within its rounding class: on the elements where that choice and the stored residual give "
         "different bits, y has that choice's bits on no more of them than the stored residual's (a breach "
         "needs two)."),
    Rule("variants.offset_output", "offset output accuracy",
         "forward_offset's y, in x's dtype and shape, lies within the output bound of the fp32 reference "
         "(x / rms) * (1 + weight), 1 + weight formed in the declared offset dtype."),
    Rule("variants.offset_dtype", "offset dtype",
         "1 + weight is formed where the backend declares (fp32 by default): on the elements where forming it in "
         "fp32 or in the weight's dtype gives different bits, y has the other one's bits on no more of them than "
         "the declared one's (a breach needs two)."),
    Rule("variants.unweighted_output", "no-weight output accuracy",
         "forward_unweighted's y, in x's dtype and shape, lies within the output bound of the fp32 reference "
         "x / rms."),
    Rule("variants.purity", "variant purity",
         "A variant leaves its inputs unchanged and returns outputs that alias no input; a fused add that "
         "declares fused_add_in_place writes y into x and residual_out into residual, and nothing else."),
    Rule("variants.rounding_class", "declared rounding class",
         "A backend that declares its rounding class follows it, through every entry point it declares it for "
         "(forward, fused_add, forward_offset, forward_unweighted): held against each other class in turn, on "
         "the elements where that class and the declared one give different bits, its output has that class's "
         "bits on no more of them than the declared one's (a breach needs two)."),
    Rule("mixed_precision.fp32_weight", "fp32 weight",
         "With an fp32 weight and bf16/fp16 x, the weight enters the product in fp32 (forward, and the fused add "
         "and offset where offered): on the elements where rounding the weight to x's dtype first gives "
         "different bits, the output has the rounded weight's bits on no more of them than the fp32 weight's "
         "(a breach needs two)."),
)

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

FP8_RULES: tuple[Rule, ...] = (
    Rule("axis_a.fp8", "fp8 batch invariance",
         "The fp8 entry points' outputs (the fp8 bits, the per-row dynamic scales, a fused add's residual_out) "
         "hold every Axis-A variant above (batch size, slice offset, padding, position, leading dims, repeat), "
         "bitwise, with one static scale for the whole case."),
    Rule("variants.fp8_output", "fp8 output accuracy",
         "q is float8_e4m3fn of x's shape and lies within 1 fp8 ULP (ordered-bit distance) of the correctly "
         "rounded fp8 value of y32 / scale, or of y rounded to x's dtype first and then divided (the "
         "through_x_dtype class: in fp16's subnormal range that rounding alone can exceed an fp8 step), with the "
         "kernel's own scale for a dynamic quantization (so a scale difference does not compound); values past "
         "+-448 saturate to +-448, and q is NaN exactly where the reference is."),
    Rule("variants.fp8_scale", "fp8 dynamic scale",
         "A dynamic scale is fp32 of shape x.shape[:-1] + (1,), and each row's is that row's own "
         "max(max |y32| / 448, 1 / (448 * 512)) within the fp8 scale bound."),
    Rule("variants.fp8_rounding_class", "declared fp8 rounding class",
         "A backend that declares its fp8 rounding class follows it: on the elements where the two classes give "
         "different fp8 bits, its output has the other class's bits on no more of them than the declared one's "
         "(a breach needs two)."),
)

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
# Hidden sizes past 8192: Falcon-180B's 14848, Llama-3.1-405B's 16384, and 16384's odd neighbours (a one-element
# tail past a power-of-two block, and a row one short of it). Kernels keep a path of their own for rows this wide
# (a split row, another block loop).
WIDE_DIMS: tuple[int, ...] = (14848, 16383, 16384, 16385)
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
