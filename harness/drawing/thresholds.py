"""The contract's thresholds (row counts, dims and QK-norm shapes where real kernels switch strategy) as
explicit cases for one device, dtype and element budget: Axis-A's, and the wide dims' accuracy, 3-D views with a
strided last dim and dw across thread counts at large batches.

A random sweep reaches a given row count only by chance and a derandomized one misses the same counts on every
run; these cases run in every sweep beside the random draws, so no threshold is missed by chance. What the
budget cannot reach is said, for the report's "Did not run".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ...contract import TARGET_DIMS
from ...contract.rmsnorm import (
    DEFAULT_SM_COUNT,
    INT32_OFFSET_DIM,
    INT32_OFFSET_LIMIT,
    INT32_OFFSET_ROWS_CHECKED,
    QK_NORM_HEADS,
    QK_NORM_TOKENS,
    THRESHOLD_DIMS,
    THRESHOLD_ROWS,
    THRESHOLD_SM_MULTIPLES,
    WIDE_TAIL_DIMS,
)
from .budget import CPU_WIDE_ELEMENTS, WIDE_DIM_FROM, at_dim
from .cases import (
    PAD_CONTENTS,
    AccuracyCase,
    Batch,
    BatchSizeCase,
    GradientCase,
    LeadingDimsCase,
    PaddingCase,
    SliceCase,
    StridedCase,
)

# A changed reduction order changes a given row's bits about half the time (reports/cpu/detection.md), so a
# threshold of fewer rows is checked on several runs of that many rows: 8 rows miss a switch 1 time in 256.
MIN_ROWS_CHECKED = 8
# Key/value heads of a fused QKV projection beside the query heads (Qwen3: 8 of each), for the fused-heads view.
FUSED_KV_HEADS = 8
# Rows of an accuracy case at each threshold dim: a few, each the whole width (a dropped tail block shows in every row).
ACCURACY_ROWS = 4
# Rows of a 3-D view with a strided last dim: two halves of 17 rows (past the below-16 switch), each half laid out
# column-major; fewer where a wide dim's budget is smaller, and never fewer than 4 (2 x 2: a real stride).
STRIDED_3D_ROWS = 34
STRIDED_3D_MIN_ROWS = 4
# dx invariance at the small-batch thresholds: sub-batches of these many rows against a batch past 16 rows.
SMALL_GRADIENT_LENGTHS = (1, 15)
SMALL_GRADIENT_ROWS = 33
# dw across thread counts is checked at batches of at least this many rows (the prefill thresholds), where a
# backward splits its sum over rows into per-thread or per-block partial sums.
LARGE_BATCH_ROWS = 2048
# Seeds of the threshold batches: fixed, so a threshold check is the same case on every run and machine.
SEED = 20260


@dataclass(frozen=True)
class Plan:
    """The cases one explicit test runs, in order, and what the budget left out (None if nothing)."""

    cases: list[Any] = field(default_factory=list)
    skipped: str | None = None


def sm_count(device: torch.device) -> int:
    """The device's SM (multiprocessor) count; the contract's default where it is not a GPU."""
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return DEFAULT_SM_COUNT


def row_thresholds(device: torch.device) -> tuple[int, ...]:
    """The contract's row counts plus k x this device's SM count, sorted.

    Each count is checked against a batch above it (batch size, slice) and padded up to the next count
    (padding), so a switch just above or just below a count is straddled without listing its neighbours.
    """
    sms = sm_count(device)
    return tuple(sorted({*THRESHOLD_ROWS, *(k * sms for k in THRESHOLD_SM_MULTIPLES)}))


def _batch(dim: int, rows: int, dtype: str, salt: int = 0) -> Batch:
    # Normal values: a changed reduction order shows in about half the rows (not in zero or constant rows).
    return Batch(dim=dim, rows=rows, dtype=dtype, values="normal", weight="around_one",
                 seed=SEED + 7919 * dim + salt)


def _pieces(t: int) -> int:
    return -(-MIN_ROWS_CHECKED // t)


def _reach(dim: int, budget: int, counts: Sequence[int],
           device: torch.device) -> tuple[int, list[int], list[int]]:
    """The largest batch in reach at ``dim`` (a wide dim's on a CPU: budget.at_dim), the counts below it (checked
    on both sides), the rest."""
    largest = at_dim(dim, budget, device) // dim
    return largest, [t for t in counts if t < largest], [t for t in counts if t >= largest]


def _where(dim: int, budget: int, device: torch.device) -> str:
    """How a note names ``dim``: a wide dim whose budget the CPU caps says so (--max-elements does not lift it)."""
    if at_dim(dim, budget, device) < budget:
        return f"dim {dim} (rows wider than {WIDE_DIM_FROM}: at most {CPU_WIDE_ELEMENTS} elements on a CPU)"
    return f"dim {dim}"


def _skipped_note(what: str, budget: int, source: str, beyond: dict[str, list[int]]) -> str | None:
    if not any(beyond.values()):
        return None
    listed = "; ".join(f"{where}: {', '.join(map(str, counts))}" for where, counts in beyond.items() if counts)
    return f"{what} beyond the element budget of {budget} ({source}), not checked: {listed}. {_more_room(source)}"


def _more_room(source: str) -> str:
    """How to check what a budget left out: a sweep that caps the budget (smoke) ignores --max-elements."""
    if source.startswith("--sweep="):
        return f"{source} keeps to this budget whatever --max-elements says; --sweep=ci checks them"
    return "Raise --max-elements where memory and time allow"


def batch_size_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str], *,
                    dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """Per dim, the largest batch in reach; per threshold t below it, runs of t rows copied alone."""
    cases, beyond = [], {}
    counts = row_thresholds(device)
    for entry in entries:
        for dim in dims:
            largest, in_reach, beyond[_where(dim, budget, device)] = _reach(dim, budget, counts, device)
            batch = _batch(dim, largest, dtype)
            for t in in_reach:
                cases += [BatchSizeCase(batch, t, start=j * t, entry=entry)
                          for j in range(_pieces(t)) if (j + 1) * t <= largest]
    return Plan(cases, _skipped_note("Axis-A thresholds (rows)", budget, source, beyond))


def slice_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str], *,
               dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """Per dim, the largest batch in reach; per threshold t, views of t rows ending at the batch's end (as
    chunked prefill continues a prefix), then further back."""
    cases, beyond = [], {}
    counts = row_thresholds(device)
    for entry in entries:
        for dim in dims:
            largest, in_reach, beyond[_where(dim, budget, device)] = _reach(dim, budget, counts, device)
            batch = _batch(dim, largest, dtype)
            for t in in_reach:
                cases += [SliceCase(batch, largest - (j + 1) * t, t, as_view=True, entry=entry)
                          for j in range(_pieces(t)) if largest - (j + 1) * t >= 1]
    return Plan(cases, _skipped_note("Axis-A thresholds (rows)", budget, source, beyond))


def padding_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str], *,
                 dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """Per dim, each threshold's rows padded up to the next threshold (the last up to the largest batch in
    reach), and MIN_ROWS_CHECKED rows padded up to the largest: a switch between any two counts is straddled.
    Pad rows go after the real rows (as engines pad a batch to a captured graph's size), every other time
    before them, and cycle through the pad contents."""
    cases, beyond = [], {}
    counts = row_thresholds(device)
    for entry in entries:
        for dim in dims:
            largest, in_reach, beyond[_where(dim, budget, device)] = _reach(dim, budget, counts, device)
            pairs = [*zip(in_reach, [*in_reach[1:], largest], strict=True)] if in_reach else []
            if largest > MIN_ROWS_CHECKED:
                pairs.append((MIN_ROWS_CHECKED, largest))
            for i, (t, total) in enumerate(pairs):
                pad = total - t
                before, after = (pad, 0) if i % 2 else (0, pad)
                content = PAD_CONTENTS[i % len(PAD_CONTENTS)]
                cases += [PaddingCase(_batch(dim, t, dtype, salt=i * 64 + j), before, after, content, entry=entry)
                          for j in range(_pieces(t))]
    return Plan(cases, _skipped_note("Axis-A thresholds (rows)", budget, source, beyond))


def _qk_shapes(budget: int) -> tuple[list[tuple[int, int]], dict[str, list[int]]]:
    head_dim = TARGET_DIMS["head_dim"]
    shapes, beyond = [], {}
    for heads in QK_NORM_HEADS:
        far = [t for t in QK_NORM_TOKENS if t * heads * head_dim > budget]
        beyond[f"[T, {heads}, {head_dim}] with T"] = far
        shapes += [(t, heads) for t in QK_NORM_TOKENS if t not in far]
    return shapes, beyond


def qk_leading_dims_plan(dtype: str, device: torch.device, budget: int, source: str,
                         entries: Sequence[str], *, dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """QK-norm's [T, H, 128] against the flat [T*H, 128], for every head count and token count in reach."""
    shapes, beyond = _qk_shapes(budget)
    head_dim = TARGET_DIMS["head_dim"]
    cases = [LeadingDimsCase(_batch(head_dim, t * h, dtype, salt=h), (t, h), entry=entry)
             for entry in entries for t, h in shapes]
    return Plan(cases, _skipped_note("QK-norm shapes", budget, source, beyond))


def qk_fused_heads_plan(dtype: str, device: torch.device, budget: int, source: str,
                        entries: Sequence[str], *, dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """QK-norm's query heads as a strided view of a fused QKV projection (key and value heads beside them)
    against a contiguous copy, for every head count and token count in reach."""
    shapes, beyond = _qk_shapes(budget)
    head_dim = TARGET_DIMS["head_dim"]
    cases = [StridedCase(_batch(head_dim, t * h, dtype, salt=h), "fused_heads", extra=2 * FUSED_KV_HEADS,
                         heads=h, entry=entry)
             for entry in entries for t, h in shapes]
    return Plan(cases, _skipped_note("QK-norm shapes", budget, source, beyond))


def _offset_note(what: str, elements: int, budget: int, source: str) -> str:
    return (f"32-bit offset case ({what}, {elements} elements, rows past {INT32_OFFSET_LIMIT} elements) beyond the "
            f"room of {budget} elements ({source}), not checked. "
            + (f"{_more_room(source)}, where memory allows: a GPU with room for it in one or two processes"
               if source.startswith("--sweep=") else
               "Run it where memory allows: a GPU with room for it in one or two processes, or --max-elements"))


def int32_batch_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str], *,
                     dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """The last rows of a contiguous batch whose offsets reach past 2^31 elements: BatchSizeCases of those rows."""
    dim, n = INT32_OFFSET_DIM, INT32_OFFSET_ROWS_CHECKED
    rows = INT32_OFFSET_LIMIT // dim + n
    if rows * dim > budget:
        return Plan([], _offset_note(f"{rows} x {dim}", rows * dim, budget, source))
    batch = _batch(dim, rows, dtype, salt=31)
    return Plan([BatchSizeCase(batch, n, start=rows - n, entry=entry) for entry in entries])


def int32_strided_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str], *,
                       dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """A view of rows 2 x dim elements apart (a half of a fused projection) whose last rows start past 2^31
    elements, while the view itself holds about 2^30."""
    dim, n = INT32_OFFSET_DIM, INT32_OFFSET_ROWS_CHECKED
    rows = INT32_OFFSET_LIMIT // (2 * dim) + n
    if 2 * rows * dim > budget:
        return Plan([], _offset_note(f"a strided view of {rows} x {dim}, rows {2 * dim} apart", 2 * rows * dim,
                                     budget, source))
    batch = _batch(dim, rows, dtype, salt=32)
    return Plan([StridedCase(batch, "row_stride", extra=dim, entry=entry) for entry in entries])


def accuracy_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str], *,
                  dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """ACCURACY_ROWS rows at each threshold dim (the wide ones and a model's own included) and at 16384's odd
    neighbours, for the Axis-B checks: the random sweep reaches a given dim only by chance, and a wide row's own
    path (another block loop, its tail) only at that width."""
    dims = list(dict.fromkeys((*dims, *WIDE_TAIL_DIMS)))
    cases = [AccuracyCase(_batch(dim, ACCURACY_ROWS, dtype, salt=41)) for dim in dims
             if ACCURACY_ROWS * dim <= budget]
    beyond = [str(dim) for dim in dims if ACCURACY_ROWS * dim > budget]
    return Plan(cases, f"accuracy at dims {', '.join(beyond)} beyond the element budget of {budget} ({source})"
                if beyond else None)


def strided_3d_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str], *,
                    dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """Per threshold dim, a [2, S, dim] view whose last dim is strided (each half column-major: a transposed
    [B, dim, S] activation) against a contiguous copy."""
    cases, beyond = [], []
    for dim in dims:
        rows = min(STRIDED_3D_ROWS, at_dim(dim, budget, device) // dim)
        if rows < STRIDED_3D_MIN_ROWS:
            beyond.append(str(dim))
            continue
        cases += [StridedCase(_batch(dim, rows, dtype, salt=43), "last_dim_strided", entry=entry) for entry in entries]
    return Plan(cases, f"3-D views with a strided last dim at dims {', '.join(beyond)} beyond the element budget of "
                       f"{budget} ({source})" if beyond else None)


def small_batch_gradient_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str],
                              *, dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """Per threshold dim up to 8192, SMALL_GRADIENT_LENGTHS rows alone against a batch of SMALL_GRADIENT_ROWS: a
    backward's launch heuristic (a row split over more lanes) switches below 16 rows, as a forward's does."""
    cases, beyond = [], []
    for dim in dims:
        if dim > WIDE_DIM_FROM:
            continue
        if SMALL_GRADIENT_ROWS * dim > budget:
            beyond.append(str(dim))
            continue
        batch = _batch(dim, SMALL_GRADIENT_ROWS, dtype, salt=53)
        cases += [GradientCase(batch, length=n) for n in SMALL_GRADIENT_LENGTHS]
    return Plan(cases, f"dx at {SMALL_GRADIENT_ROWS} rows at dims {', '.join(beyond)}: beyond the element budget of "
                       f"{budget} ({source})" if beyond else None)


def large_batch_gradient_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str],
                              *, dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """Per threshold dim, one batch of the largest threshold row count in reach, if that is at least
    LARGE_BATCH_ROWS: dw's sum over rows is where a backward partitions rows by thread or block."""
    cases, beyond = [], []
    counts = [t for t in THRESHOLD_ROWS if t >= LARGE_BATCH_ROWS]
    for dim in dims:
        reach = [t for t in counts if t * dim <= at_dim(dim, budget, device)]
        if reach:
            cases.append(GradientCase(_batch(dim, reach[-1], dtype, salt=47), length=1))
        else:
            beyond.append(str(dim))
    return Plan(cases, f"dw at {LARGE_BATCH_ROWS} rows or more at dims {', '.join(beyond)}: beyond the element "
                       f"budget of {budget} ({source})" if beyond else None)
