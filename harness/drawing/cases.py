"""The configurations a conformance check runs on, and the tensors they stand for.

Hypothesis draws these small frozen dataclasses; a ``torch.Generator`` on the CPU seeded from them makes
the tensors, which then move to the device. So a case's ``repr`` is its replay recipe: the same repr gives
the same bits on any machine (device-side ``randn`` would depend on the GPU).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

# Value families of x. Magnitudes stay inside the contract's domain (sum of squares finite in fp32).
VALUE_FAMILIES: tuple[str, ...] = (
    "normal",      # standard normal
    "near_eps",    # mean square comparable to eps: where eps placement shows
    "tiny",        # far below eps (fp32/bf16 squares go subnormal)
    "huge",        # large but with a finite fp32 sum of squares
    "mixed_rows",  # each row at its own scale, 1e-3 .. 1e3
    "outliers",    # normal with a few entries 100x larger, as in LLM activations
    "constant",    # every row constant, one value per row
    "zero_rows",   # normal with some rows entirely zero
)
WEIGHT_FAMILIES: tuple[str, ...] = (
    "normal",      # mean 0: a `1 + weight` kernel is off by O(1)
    "around_one",  # 1 + 0.1 * normal, the trained-model regime
    "ones",
    "with_zeros",  # normal with a quarter of the entries zero
)
# Contents a pad row may hold; the last four are outside the domain on purpose.
PAD_CONTENTS: tuple[str, ...] = ("zeros", "normal", "huge", "dtype_max", "nan", "inf", "neg_inf")
# How the weight sits in memory. A model's weight is often a view: of a flat parameter buffer (FSDP), of a
# fused [q_norm; k_norm] tensor, or a strided slice of a larger one.
WEIGHT_LAYOUTS: tuple[str, ...] = (
    "contiguous",
    "strided",  # every other element of a buffer twice as long: stride 2
    "offset",   # a slice starting one element into a larger buffer: storage offset 1, not 16-byte aligned
)
# How strided rows sit in memory (StridedCase.layout), and the non-finite values NonfiniteCase plants.
STRIDED_LAYOUTS: tuple[str, ...] = ("row_stride", "column_major", "fused_heads", "last_dim_strided")
NONFINITE_VALUES: tuple[str, ...] = ("nan", "inf", "neg_inf")
# Fill of the buffer around a non-contiguous weight: a kernel that reads past the view reads NaN.
_WEIGHT_BUFFER_FILL = math.nan

# Largest |x| per family and dtype: fp16 tops out at 65504; fp32 squares overflow past ~1.8e19.
_HUGE_SCALE = {"float16": 2.0e4, "bfloat16": 1.0e15, "float32": 1.0e15}
_TINY_SCALE = {"float16": 1.0e-4, "bfloat16": 1.0e-20, "float32": 1.0e-20}


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


# The salt of a fused add's residual: its own stream, apart from x's further batches (small salts).
RESIDUAL_SALT = 101
# Batches of this many elements or more are drawn on a GPU's own generator, not on the host and copied: drawing a
# threshold plan's batches of up to 2^28 elements on the host was most of its time on an H200. Smaller ones stay
# host-drawn, the same values on every device (replays, the parity gate).
DEVICE_DRAW_ELEMENTS = 1 << 22


def drawing_device(elements: int, device: torch.device | str) -> torch.device:
    """Where a batch of ``elements`` bound for ``device`` is drawn: that GPU when it is large, else the CPU."""
    device = torch.device(device)
    return device if device.type != "cpu" and elements >= DEVICE_DRAW_ELEMENTS else torch.device("cpu")


@dataclass(frozen=True)
class Batch:
    """A [rows, dim] batch of x in ``dtype`` and its weight, drawn from ``seed``.

    ``weight_dtype`` (the weight's, when a backend declares that pair) and ``residual_dtype`` (a fused add's
    residual) default to ``dtype``, ``weight_layout`` (how the weight sits in memory) to contiguous; the repr
    leaves them out then, so a case's repr is the same as before they existed.
    """

    dim: int
    rows: int
    dtype: str
    values: str = "normal"
    weight: str = "normal"
    eps: float = 1e-6
    seed: int = 0
    weight_dtype: str = ""
    residual_dtype: str = ""
    weight_layout: str = "contiguous"

    def __post_init__(self) -> None:
        for name in ("weight_dtype", "residual_dtype"):
            if not getattr(self, name):
                object.__setattr__(self, name, self.dtype)

    def __repr__(self) -> str:
        fields = [f"dim={self.dim!r}", f"rows={self.rows!r}", f"dtype={self.dtype!r}", f"values={self.values!r}",
                  f"weight={self.weight!r}", f"eps={self.eps!r}", f"seed={self.seed!r}"]
        fields += [f"{name}={getattr(self, name)!r}" for name in ("weight_dtype", "residual_dtype")
                   if getattr(self, name) != self.dtype]
        if self.weight_layout != WEIGHT_LAYOUTS[0]:
            fields.append(f"weight_layout={self.weight_layout!r}")
        return f"Batch({', '.join(fields)})"

    def generator(self, salt: int = 0, device: torch.device | str = "cpu") -> torch.Generator:
        return torch.Generator(device=device).manual_seed((self.seed * 1_000_003 + salt) % (2**63))

    def x(self, rows: int | None = None, salt: int = 0, device: torch.device | str = "cpu") -> torch.Tensor:
        """x, drawn on the CPU unless ``device`` says otherwise; ``rows`` and ``salt`` give further batches of the
        same family. Drawn on the CPU, the values are the same for every device; drawn on a device, they come from
        that device's generator (for batches too large to draw on the host and copy in time)."""
        return make_values(self.values, rows if rows is not None else self.rows, self.dim, self.dtype,
                           self.eps, self.generator(salt, device))

    def w(self) -> torch.Tensor:
        return make_weight(self.weight, self.dim, self.weight_dtype, self.generator(salt=-1))

    def residual(self, rows: int | None = None, salt: int = 0, device: torch.device | str = "cpu") -> torch.Tensor:
        """A fused add's residual in ``residual_dtype``: the value family of x, its own draws (on the CPU unless
        ``device`` says otherwise, as for x)."""
        return make_values(self.values, rows if rows is not None else self.rows, self.dim, self.residual_dtype,
                           self.eps, self.generator(RESIDUAL_SALT + salt, device))


def lay_out_weight(w: torch.Tensor, layout: str) -> torch.Tensor:
    """``w``'s values in ``layout``, made on ``w``'s own device (a copy between devices would make any
    layout contiguous again); the buffer around the view holds NaN."""
    dim = w.shape[-1]
    if layout == "contiguous":
        return w
    if layout == "strided":
        buffer = torch.full((2 * dim,), _WEIGHT_BUFFER_FILL, dtype=w.dtype, device=w.device)
        buffer[::2] = w
        return buffer[::2]
    if layout == "offset":
        buffer = torch.full((dim + 8,), _WEIGHT_BUFFER_FILL, dtype=w.dtype, device=w.device)
        buffer[1: dim + 1] = w
        return buffer[1: dim + 1]
    raise ValueError(f"unknown weight layout {layout!r}; known: {', '.join(WEIGHT_LAYOUTS)}")


def make_values(family: str, rows: int, dim: int, dtype: str, eps: float,
                gen: torch.Generator) -> torch.Tensor:
    """Rows of x from a value family, computed in fp32 on the generator's device, then rounded to ``dtype``."""
    on = gen.device
    base = torch.randn(rows, dim, generator=gen, device=on)
    if family == "normal":
        out = base
    elif family == "near_eps":
        out = base * math.sqrt(eps)
    elif family == "tiny":
        out = base * _TINY_SCALE[dtype]
    elif family == "huge":
        out = base.clamp(-3, 3) * _HUGE_SCALE[dtype]
    elif family == "mixed_rows":
        span = 2.0 if dtype == "float16" else 3.0
        out = base * torch.pow(10.0, (torch.rand(rows, 1, generator=gen, device=on) * 2 - 1) * span)
    elif family == "outliers":
        spikes = torch.rand(rows, dim, generator=gen, device=on) < 0.01
        out = torch.where(spikes, base * 100.0, base)
    elif family == "constant":
        out = torch.randn(rows, 1, generator=gen, device=on).expand(rows, dim).clone()
        out[torch.rand(rows, generator=gen, device=on) < 0.2] = 0.0
    elif family == "zero_rows":
        out = base.clone()
        out[torch.rand(rows, generator=gen, device=on) < 0.25] = 0.0
    else:
        raise ValueError(f"unknown value family {family!r}; known: {', '.join(VALUE_FAMILIES)}")
    return out.to(torch_dtype(dtype))


def make_weight(family: str, dim: int, dtype: str, gen: torch.Generator) -> torch.Tensor:
    base = torch.randn(dim, generator=gen)
    if family == "normal":
        out = base
    elif family == "around_one":
        out = 1.0 + 0.1 * base
    elif family == "ones":
        out = torch.ones(dim)
    elif family == "with_zeros":
        out = torch.where(torch.rand(dim, generator=gen) < 0.25, torch.zeros(dim), base)
    else:
        raise ValueError(f"unknown weight family {family!r}; known: {', '.join(WEIGHT_FAMILIES)}")
    return out.to(torch_dtype(dtype))


def make_pad(content: str, rows: int, dim: int, dtype: str, gen: torch.Generator) -> torch.Tensor:
    """Pad rows; their own outputs are never checked, only their effect on real rows."""
    if content not in PAD_CONTENTS:
        raise ValueError(f"unknown pad content {content!r}; known: {', '.join(PAD_CONTENTS)}")
    return _fill_pad(torch.empty(rows, dim, dtype=torch_dtype(dtype)), content, gen)


def pad_rows(t: torch.Tensor, content: str, before: int, after: int, gen: torch.Generator) -> torch.Tensor:
    """``t``'s rows with ``before`` pad rows of ``content`` above them and ``after`` below, as one new tensor on
    ``t``'s device: the bits of ``torch.cat([make_pad(.., before, ..), t, make_pad(.., after, ..)])`` with the pads
    drawn from ``gen`` in that order, written in place rather than made apart and concatenated."""
    if content not in PAD_CONTENTS:
        raise ValueError(f"unknown pad content {content!r}; known: {', '.join(PAD_CONTENTS)}")
    rows = t.shape[0]
    out = torch.empty(before + rows + after, *t.shape[1:], dtype=t.dtype, device=t.device)
    _fill_pad(out[:before], content, gen)
    out[before: before + rows].copy_(t)
    _fill_pad(out[before + rows:], content, gen)
    return out


def _fill_pad(out: torch.Tensor, content: str, gen: torch.Generator) -> torch.Tensor:
    """Write pad rows of ``content`` into ``out`` (any device; values drawn from ``gen`` on its own device)."""
    dt = out.dtype
    if content == "zeros":
        return out.zero_()
    if content == "normal":
        return out.copy_(torch.randn(out.shape, generator=gen, device=gen.device))
    if content == "huge":
        scale = _HUGE_SCALE[str(dt).removeprefix("torch.")]
        return out.copy_(torch.randn(out.shape, generator=gen, device=gen.device).clamp(-3, 3) * scale)
    fill = {"dtype_max": torch.finfo(dt).max, "nan": math.nan, "inf": math.inf, "neg_inf": -math.inf}
    return out.fill_(fill[content])


# --- Axis-A cases: each names the variant it checks -------------------------------------------------


@dataclass(frozen=True)
class BatchSizeCase:
    """Rows [start:start+length], copied into a batch of their own, against the same rows in the whole batch;
    ``start`` is 0 in the sweep and steps on at the thresholds, so a few-row threshold is checked on many rows.
    ``entry`` is the entry point called (every Axis-A case has one)."""

    batch: Batch
    length: int
    start: int = 0
    entry: str = "forward"


@dataclass(frozen=True)
class SliceCase:
    """Rows [start:start+length] as a view (or a copy) against the whole batch."""

    batch: Batch
    start: int
    length: int
    as_view: bool = True
    entry: str = "forward"


@dataclass(frozen=True)
class PaddingCase:
    """``batch`` holds the real rows; pad rows go before and after them."""

    batch: Batch
    before: int
    after: int
    content: str = "zeros"
    entry: str = "forward"


@dataclass(frozen=True)
class PositionCase:
    """Row 0 of ``batch`` placed at index ``first`` of one batch and ``second`` of another of equal size."""

    batch: Batch
    first: int
    second: int
    entry: str = "forward"


@dataclass(frozen=True)
class PermutationCase:
    batch: Batch
    perm_seed: int = 0
    entry: str = "forward"


@dataclass(frozen=True)
class LeadingDimsCase:
    """The batch viewed with leading dims ``shape`` (their product is batch.rows)."""

    batch: Batch
    shape: tuple[int, ...]
    entry: str = "forward"


@dataclass(frozen=True)
class StridedCase:
    """``layout``: 'row_stride' (rows inside a wider buffer), 'column_major', 'fused_heads' ([T, H, dim] sliced
    out of a wider [T, (H + extra) * dim] projection, as QK-norm sees q), or 'last_dim_strided' ([2, S, dim] whose
    halves are each column-major: a transposed [2, dim, S] activation, its last dim S elements apart)."""

    batch: Batch
    layout: str
    extra: int = 1
    heads: int = 1
    entry: str = "forward"


@dataclass(frozen=True)
class RepeatCase:
    batch: Batch
    entry: str = "forward"


@dataclass(frozen=True)
class GradModeCase:
    """The batch through ``entry`` with inputs that require grad, plain, under no_grad and inference_mode."""

    batch: Batch
    entry: str = "forward"


@dataclass(frozen=True)
class ExecutionModeCase:
    """The batch through ``entry`` eagerly, then under torch.compile, CUDA-graph replay (on a GPU), no_grad and
    inference_mode: each must give eager's bits."""

    batch: Batch
    entry: str = "forward"


@dataclass(frozen=True)
class FirstCallCase:
    """The first call for (batch.dim, batch.dtype) in a fresh process, against its next call there and the
    same call in the test's own process."""

    batch: Batch
    entry: str = "forward"


def strided_layout(case: StridedCase, t: torch.Tensor) -> torch.Tensor:
    """Rows ``t`` ([rows, dim]) laid out as ``case`` says: the same values, other strides."""
    rows, dim = t.shape
    if case.layout == "row_stride":
        buffer = torch.zeros(rows, dim + case.extra, dtype=t.dtype, device=t.device)
        buffer[:, :dim] = t
        return buffer[:, :dim]
    if case.layout == "column_major":
        return t.t().contiguous().t()
    if case.layout == "fused_heads":
        # q of a fused projection: [T, (H + extra) * dim] sliced to [T, H * dim], viewed as [T, H, dim].
        tokens = rows // case.heads
        buffer = torch.zeros(tokens, (case.heads + case.extra) * dim, dtype=t.dtype, device=t.device)
        buffer[:, : case.heads * dim] = t[: tokens * case.heads].reshape(tokens, case.heads * dim)
        return buffer[:, : case.heads * dim].view(tokens, case.heads, dim)
    if case.layout == "last_dim_strided":
        # [outer, S, dim] with strides (dim * S, 1, S): a kernel that indexes it as 2-D [rows, dim] with
        # stride(-2), stride(-1) reads the first half right and the second from the first half's memory.
        outer = 2 if rows >= 2 else 1
        inner = rows // outer
        return t[: outer * inner].reshape(outer, inner, dim).transpose(1, 2).contiguous().transpose(1, 2)
    raise ValueError(f"unknown layout {case.layout!r}")


# --- Axis-B, semantics and gradient cases ----------------------------------------------------------


@dataclass(frozen=True)
class AccuracyCase:
    batch: Batch


@dataclass(frozen=True)
class NonfiniteCase:
    """Entries of ``rows_hit`` rows of x set to ``value`` ('nan', 'inf', 'neg_inf') at ``count`` columns each,
    called through ``entry``."""

    batch: Batch
    value: str
    rows_hit: int
    count: int = 1
    entry: str = "forward"


@dataclass(frozen=True)
class GradientCase:
    batch: Batch
    length: int


# The words a case field may hold, by field name wherever the field appears: what a replay accepts. The dtype
# fields and ``entry`` take the contract's dtypes and the entry points (drawing/replay.py adds those).
FIELD_VOCABULARY: dict[str, tuple[str, ...]] = {
    "values": VALUE_FAMILIES,
    "weight": WEIGHT_FAMILIES,
    "content": PAD_CONTENTS,
    "value": NONFINITE_VALUES,
    "layout": STRIDED_LAYOUTS,
    "weight_layout": WEIGHT_LAYOUTS,
}

# Every case type this module defines (a frozen dataclass named ``...Case``), and the batch they hold: what a
# replay may call. Derived, so a new case type is replayable by being defined here.
CASE_TYPES: dict[str, type] = {
    name: obj for name, obj in list(globals().items())
    if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == __name__
    and (name.endswith("Case") or obj is Batch)
}
