"""The default gate's sample for the execution modes (``axis_a.execution_mode``): the row thresholds nearest
Qwen3-8B's dims and a handful of drawn cases, through every entry point. Small on purpose: each (entry point,
dtype, layout) costs torch.compile a trace, and the sample must stay within the time to verdict; ``--modes``
widens the compiled and captured paths to the full sweep (the parity gate).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from hypothesis import strategies as st

from ...contract import TARGET_DIMS
from ...contract.rmsnorm import THRESHOLD_DIMS
from .cases import Batch, ExecutionModeCase
from .strategies import batches, entry_points
from .thresholds import SEED, Plan

# Row counts on both sides of the most common switch (below 16 rows a row is split across more lanes): a decode
# step of one row, and 17 rows. Each shape costs torch.compile a trace (static shapes: running/modes.py).
SAMPLE_ROWS: tuple[int, ...] = (1, 17)
# Drawn cases a test adds to the thresholds: a handful, with every weight layout and value family in reach.
SAMPLE_EXAMPLES = 3
# The drawn cases' size: the modes' cost is in tracing, not in elements; small batches keep the eager side cheap.
SAMPLE_ELEMENTS = 1 << 15


def execution_mode_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str], *,
                        dims: Sequence[int] = ()) -> Plan:
    """Per entry point, the target dims (hidden size and head_dim) and a model's own (those of ``dims`` that are
    not the contract's threshold dims: ``--dims``) at each of ``SAMPLE_ROWS``."""
    sampled = dict.fromkeys((*TARGET_DIMS.values(), *(d for d in dims if d not in THRESHOLD_DIMS)))
    cases = [ExecutionModeCase(Batch(dim=dim, rows=rows, dtype=dtype, values="normal", weight="around_one",
                                     seed=SEED + 7919 * dim + rows), entry=entry)
             for entry in entries for dim in sampled for rows in SAMPLE_ROWS if rows * dim <= budget]
    beyond = [f"{rows} x {dim}" for dim in sampled for rows in SAMPLE_ROWS if rows * dim > budget]
    skipped = (f"execution-mode sample beyond the element budget of {budget} ({source}): {', '.join(beyond)}"
               if beyond else None)
    return Plan(cases, skipped)


def execution_mode_cases(*, dtype: str, max_elements: int, entries: Sequence[str],
                         model_dims: tuple[int, ...] = ()) -> st.SearchStrategy:
    """A few drawn batches through one entry point each, any weight layout, at most ``SAMPLE_ELEMENTS``."""
    return st.builds(ExecutionModeCase, batches(dtype=dtype, max_elements=min(max_elements, SAMPLE_ELEMENTS),
                                                any_weight_layout=True, model_dims=model_dims),
                     entry=entry_points(entries))
