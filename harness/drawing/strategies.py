"""Hypothesis strategies that draw conformance cases; torch, not Hypothesis, draws the tensors.

Sizes are biased toward where kernels change behaviour: a single row, counts below 16, powers of two and
their neighbours, multiples of the SM count; and dims toward the target model's 4096 and 128, plus odd
ones that exercise tail masking.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import strategies as st

from ...contract import DEFAULT_EPS, TARGET_DIMS
from ...contract.rmsnorm import QK_NORM_HEADS, THRESHOLD_ROWS, WIDE_DIMS, WIDE_TAIL_DIMS
from .budget import CPU_SWEEP_ELEMENTS, INTERPRETED_SWEEP_ELEMENTS
from .cases import (
    NONFINITE_VALUES,
    PAD_CONTENTS,
    STRIDED_LAYOUTS,
    VALUE_FAMILIES,
    WEIGHT_FAMILIES,
    WEIGHT_LAYOUTS,
    AccuracyCase,
    Batch,
    BatchSizeCase,
    GradientCase,
    GradModeCase,
    LeadingDimsCase,
    NonfiniteCase,
    PaddingCase,
    PermutationCase,
    PositionCase,
    RepeatCase,
    SliceCase,
    StridedCase,
    torch_dtype,
)

# Elements (rows * dim) per batch where no budget is given: the CPU's (harness/drawing/budget.py says why).
DEFAULT_MAX_ELEMENTS = CPU_SWEEP_ELEMENTS
INTERPRETED_MAX_ELEMENTS = INTERPRETED_SWEEP_ELEMENTS
# Up to Llama-3.1-405B's hidden 16384 and its odd neighbour above.
MAX_DIM = 16385
# The entry point a case calls where the strategy is not told which ones the backend offers.
FORWARD_ONLY = ("forward",)

# Dims where tails, vector widths and block sizes change.
EDGE_DIMS = (1, 2, 3, 7, 8, 63, 64, 65, 127, 129, 255, 256, 257, 1000, 1023, 1025, 2047, 2049,
             4095, 4097, 5120, 8191, 8192, *sorted((*WIDE_DIMS, *WIDE_TAIL_DIMS)))
# Row counts where kernels switch: the contract's thresholds (which every sweep also checks explicitly),
# powers of two and their neighbours, multiples of 132 SMs (H200).
EDGE_ROWS = tuple(sorted({*THRESHOLD_ROWS, 31, 32, 33, 63, 64, 65, 127, 128, 129, 131, 132, 133, 511, 512, 513}))
# QK-norm's head counts (Qwen3's key/value and query heads), and one or two heads.
HEAD_COUNTS = (1, 2, *QK_NORM_HEADS)


def _check_positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name}={value} must be at least 1")


# The strategy constructors below are cached: a composite that builds its strategies at every draw makes new
# objects that Hypothesis validates and labels again each time (about a fifth of a zoo run's time went there,
# in Hypothesis' recursive_property). The same arguments give the same strategy, and so the same draws.
@functools.cache
def dims(*, max_dim: int = MAX_DIM, model_dims: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    """A last dim: 4096 and 128 each about a quarter of the time, a model's own dims (``--dims``) as often as
    each of them, edge dims, anything up to ``max_dim``."""
    _check_positive("max_dim", max_dim)
    targets = [d for d in TARGET_DIMS.values() if d <= max_dim]
    edges = [d for d in EDGE_DIMS if d <= max_dim]
    own = [st.sampled_from(model_dims)] if model_dims else []
    return st.one_of(*(st.just(d) for d in targets), *own, st.sampled_from(edges), st.integers(1, max_dim))


@functools.lru_cache(maxsize=4096)
def row_counts(*, max_rows: int, min_rows: int = 1) -> st.SearchStrategy[int]:
    """A row count in [min_rows, max_rows]: a third below 16, a third edge counts, a third anything."""
    _check_positive("max_rows", max_rows)
    if min_rows > max_rows:
        raise ValueError(f"min_rows={min_rows} is larger than max_rows={max_rows}")
    edges = [r for r in EDGE_ROWS if min_rows <= r <= max_rows] or [min_rows]
    small = st.integers(min_rows, min(max_rows, max(min_rows, 15)))
    return st.one_of(small, st.sampled_from(edges), st.integers(min_rows, max_rows))


@functools.cache
def epsilons() -> st.SearchStrategy[float]:
    """eps from 1e-12 to 0.5: the common 1e-6 and 1e-5, and mantissa * 10^exponent otherwise."""
    drawn = st.builds(lambda m, e: float(f"{m}e{e}"), st.sampled_from((1, 2.5, 5)), st.integers(-12, -1))
    return st.one_of(st.just(DEFAULT_EPS), st.just(1e-5), drawn)


def max_rows_for(dim: int, max_elements: int) -> int:
    return max(1, max_elements // dim)


@functools.cache
def weight_layouts() -> st.SearchStrategy[str]:
    """Contiguous half the time (the simplest, where shrinking goes), else a strided view or an offset slice."""
    return st.one_of(st.just(WEIGHT_LAYOUTS[0]), st.sampled_from(WEIGHT_LAYOUTS[1:]))


def entry_points(entries: Sequence[str]) -> st.SearchStrategy[str]:
    """One of the backend's entry points, shrinking toward the first (``forward``)."""
    if not entries:
        raise ValueError("entries=() names no entry point; a backend always has 'forward'")
    return _entry_points(tuple(entries))


@functools.cache
def _entry_points(entries: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.sampled_from(entries)


@st.composite
def batches(draw: st.DrawFn, *, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS, model_dims: tuple[int, ...] = (),
            min_rows: int = 1, dim: int | None = None, values: str | None = None,
            any_weight_layout: bool = False) -> Batch:
    """A :class:`Batch` of ``dtype``; ``dim`` and ``values`` pin those fields when given. The weight is
    contiguous unless ``any_weight_layout`` (for checks that lay the weight out as the batch says)."""
    _check_positive("max_elements", max_elements)
    d = dim if dim is not None else draw(dims(model_dims=model_dims))
    cap = max(min_rows, max_rows_for(d, max_elements))
    return Batch(
        dim=d,
        rows=draw(row_counts(min_rows=min_rows, max_rows=cap)),
        dtype=dtype,
        values=values if values is not None else draw(st.sampled_from(VALUE_FAMILIES)),
        weight=draw(st.sampled_from(WEIGHT_FAMILIES)),
        eps=draw(epsilons()),
        seed=draw(st.integers(0, 2**32 - 1)),
        weight_layout=draw(weight_layouts()) if any_weight_layout else WEIGHT_LAYOUTS[0],
    )


# Every Axis-A strategy takes ``entries``, the entry points the backend offers (harness/running/entry_points.py), and
# draws one per case; batches draw any weight layout, since Axis-A holds for every layout of the weight.


@st.composite
def batch_size_cases(draw: st.DrawFn, *, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS,
                     model_dims: tuple[int, ...] = (), entries: Sequence[str] = FORWARD_ONLY) -> BatchSizeCase:
    """A sub-batch [0:length] of a larger batch; lengths lean small, where reductions re-plan.

    A kernel whose plan changes at some row count T fails only when length < T <= rows, and T is unknown
    (16 for torch's CUDA reduction, 256 for an autotuner's key, ...). So half the time the whole batch
    takes half to all of the element budget: one small sub-batch then straddles nearly every T at once.
    (The contract's thresholds are also checked explicitly: harness/drawing/thresholds.py.)
    """
    b = draw(batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements, min_rows=2, any_weight_layout=True))
    b = _widened(draw, b, max_elements)
    return BatchSizeCase(b, draw(row_counts(max_rows=b.rows - 1)), entry=draw(entry_points(entries)))


def _widened(draw: st.DrawFn, b: Batch, max_elements: int) -> Batch:
    """``b``, or half the time ``b`` with half to all of the budget's rows: see :func:`batch_size_cases`."""
    cap = max_rows_for(b.dim, max_elements)
    if cap > b.rows and draw(st.booleans()):
        b = replace(b, rows=draw(st.integers(max(b.rows, cap // 2), cap)))
    return b


def _misaligned_dims(dtype: str) -> list[int]:
    """Edge dims whose rows are not a multiple of 16 bytes in ``dtype``: a slice starting at row a is then
    misaligned for most a, and kernels that pick vectorised loads by pointer alignment change path."""
    size = torch_dtype(dtype).itemsize
    return [d for d in EDGE_DIMS if (d * size) % 16 and d >= 7]


@functools.cache
def _slice_dims(dtype: str, model_dims: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    return st.one_of(dims(model_dims=model_dims), st.sampled_from(_misaligned_dims(dtype)))


@functools.lru_cache(maxsize=4096)
def _lengths_to(rest: int) -> st.SearchStrategy[int]:
    """A slice's length: any count up to ``rest``, or all of it (``x[a:]``)."""
    return st.one_of(row_counts(max_rows=rest), st.just(rest))


@functools.lru_cache(maxsize=4096)
def _pad_before(room: int) -> st.SearchStrategy[int]:
    return st.one_of(st.just(0), row_counts(max_rows=room))


_VIEW_OR_COPY = st.one_of(st.booleans(), st.just(True))
_GRADIENT_VALUES = st.one_of(st.sampled_from(("normal", "outliers", "mixed_rows", "zero_rows")), st.just("mixed_rows"))


@st.composite
def slice_cases(draw: st.DrawFn, *, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS,
                model_dims: tuple[int, ...] = (), entries: Sequence[str] = FORWARD_ONLY) -> SliceCase:
    """Rows [start:start+length] of a batch, as a view or a copy.

    Views come three times in four, since a view (its offset, its alignment) is what this variant adds to
    the batch-size one. At the target dims every row starts 16-byte aligned, so half the time the dim is
    one whose rows do not: a view's alignment then depends on where the slice starts. Half the slices run
    to the end of the batch (``x[a:]``, as chunked prefill continues a prefix): a changed reduction order
    shows in a given row's bits only about half the time, and every row of a long slice is another chance.
    """
    dim = draw(_slice_dims(dtype, model_dims))
    b = draw(batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements, min_rows=2, dim=dim,
                     any_weight_layout=True))
    start = draw(st.integers(1, b.rows - 1))
    length = draw(_lengths_to(b.rows - start))
    return SliceCase(b, start, length, as_view=draw(_VIEW_OR_COPY),
                     entry=draw(entry_points(entries)))


@st.composite
def padding_cases(draw: st.DrawFn, *, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS,
                  model_dims: tuple[int, ...] = (), entries: Sequence[str] = FORWARD_ONLY) -> PaddingCase:
    b = draw(batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements, any_weight_layout=True))
    room = max(1, max_rows_for(b.dim, max_elements) - b.rows)
    before = draw(_pad_before(room))
    after = draw(row_counts(max_rows=room)) if before == 0 else draw(st.integers(0, room))
    return PaddingCase(b, before, after, content=draw(st.sampled_from(PAD_CONTENTS)),
                       entry=draw(entry_points(entries)))


@st.composite
def position_cases(draw: st.DrawFn, *, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS,
                   model_dims: tuple[int, ...] = (), entries: Sequence[str] = FORWARD_ONLY) -> PositionCase:
    b = draw(batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements, min_rows=2, any_weight_layout=True))
    first = draw(st.integers(0, b.rows - 1))
    second = draw(st.integers(0, b.rows - 1).filter(lambda i: i != first))
    return PositionCase(b, first, second, entry=draw(entry_points(entries)))


def permutation_cases(*, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS, model_dims: tuple[int, ...] = (),
                      entries: Sequence[str] = FORWARD_ONLY) -> st.SearchStrategy:
    return st.builds(PermutationCase,
                     batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements, min_rows=2,
                             any_weight_layout=True),
                     st.integers(0, 2**32 - 1), entry=entry_points(entries))


@st.composite
def leading_dims_cases(draw: st.DrawFn, *, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS,
                       model_dims: tuple[int, ...] = (), entries: Sequence[str] = FORWARD_ONLY) -> LeadingDimsCase:
    """[B, S, dim] or [T, H, dim] shapes; at dim 128 the head counts are QK-norm's."""
    d = draw(dims(model_dims=model_dims))
    cap = max_rows_for(d, max_elements)
    inner_choices = st.sampled_from(HEAD_COUNTS) if d == TARGET_DIMS["head_dim"] else row_counts(max_rows=64)
    inner = min(draw(inner_choices), cap)
    outer = draw(row_counts(max_rows=max(1, cap // inner)))
    shape: tuple[int, ...] = (outer, inner)
    if draw(st.booleans()) and outer % 2 == 0:
        shape = (2, outer // 2, inner)
    b = draw(batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements, dim=d, min_rows=outer * inner,
                     any_weight_layout=True))
    return LeadingDimsCase(replace(b, rows=outer * inner), shape, entry=draw(entry_points(entries)))


@st.composite
def strided_cases(draw: st.DrawFn, *, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS,
                  model_dims: tuple[int, ...] = (), entries: Sequence[str] = FORWARD_ONLY) -> StridedCase:
    layout = draw(st.sampled_from(STRIDED_LAYOUTS))
    heads = draw(st.sampled_from(HEAD_COUNTS)) if layout == "fused_heads" else 1
    # Fused heads need at least one token of ``heads`` rows.
    b = draw(batches(dtype=dtype, model_dims=model_dims, max_elements=max(heads, max_elements // heads), min_rows=heads,
                     any_weight_layout=True))
    # An extra of 1 misaligns every row; 8 keeps 16-byte alignment in bf16 and moves only the stride.
    extra = draw(st.sampled_from((1, 2, 8, 64)))
    return StridedCase(b, layout, extra=extra, heads=heads, entry=draw(entry_points(entries)))


def repeat_cases(*, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS, model_dims: tuple[int, ...] = (),
                 entries: Sequence[str] = FORWARD_ONLY) -> st.SearchStrategy:
    return st.builds(RepeatCase, batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements,
                                         any_weight_layout=True),
                     entry=entry_points(entries))


def grad_mode_cases(*, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS, model_dims: tuple[int, ...] = (),
                    entries: Sequence[str] = FORWARD_ONLY) -> st.SearchStrategy:
    """A batch through one entry point, compared across every grad mode."""
    return st.builds(GradModeCase, batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements,
                                           any_weight_layout=True),
                     entry=entry_points(entries))


def accuracy_cases(*, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS, values: str | None = None,
                   model_dims: tuple[int, ...] = (), any_weight_layout: bool = False) -> st.SearchStrategy:
    """Batches for output checks; ``any_weight_layout`` for checks that lay the weight out as drawn."""
    return st.builds(AccuracyCase, batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements, values=values,
                                           any_weight_layout=any_weight_layout))


@st.composite
def nonfinite_cases(draw: st.DrawFn, *, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS,
                    model_dims: tuple[int, ...] = (), entries: Sequence[str] = FORWARD_ONLY) -> NonfiniteCase:
    b = draw(batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements, min_rows=2, values="normal",
                     any_weight_layout=True))
    rows_hit = draw(st.integers(1, max(1, b.rows // 2)))
    count = draw(st.integers(1, b.dim))
    return NonfiniteCase(b, draw(st.sampled_from(NONFINITE_VALUES)), rows_hit, count,
                         entry=draw(entry_points(entries)))


@st.composite
def gradient_cases(draw: st.DrawFn, *, dtype: str, max_elements: int = DEFAULT_MAX_ELEMENTS,
                   model_dims: tuple[int, ...] = ()) -> GradientCase:
    """Gradients on normal-scale values: other families make atol meaningless for dx.

    Half the draws are mixed_rows: rows of small scale have a large rstd, and dx's two terms, each of
    order rstd, cancel there; a backward that rounds them before adding them fails only on such rows.
    ``length`` (the sub-batch whose dx must not change) is drawn as in :func:`batch_size_cases`.
    """
    values = draw(_GRADIENT_VALUES)
    b = draw(batches(dtype=dtype, model_dims=model_dims, max_elements=max_elements, min_rows=2, values=values))
    b = _widened(draw, b, max_elements)
    return GradientCase(b, draw(row_counts(max_rows=b.rows - 1)))


def with_residual_dtypes(cases: st.SearchStrategy, residual_dtypes: tuple[str, ...]) -> st.SearchStrategy:
    """``cases`` whose batch carries a fused add's residual dtype, drawn from ``residual_dtypes`` (x's dtype,
    and fp32 where a backend takes an fp32 residual)."""
    if not residual_dtypes:
        raise ValueError("residual_dtypes must name at least one dtype")

    def set_dtype(case_and_dtype: tuple) -> object:
        case, dtype = case_and_dtype
        return replace(case, batch=replace(case.batch, residual_dtype=dtype))

    return st.tuples(cases, st.sampled_from(residual_dtypes)).map(set_dtype)
