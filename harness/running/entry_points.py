"""The entry points the Axis-A variants of CONTRACT.md's table hold a backend to: ``forward`` and, where the
backend offers it, ``forward_fp32``. Both take (x, weight, eps), so one Axis-A check covers both, and the sweep
draws the entry point with the rest of the case.

The variants engines ship (fused add, weight offset, no weight) are held to every Axis-A variant under their
own rules (``axis_a.fused_add``, ``axis_a.offset``, ``axis_a.unweighted``) in ``suites/test_variants.py``.
"""

from __future__ import annotations

from typing import Any

import torch

AXIS_A_ENTRY_POINTS: tuple[str, ...] = ("forward", "forward_fp32")


def entry_points(backend: Any) -> tuple[str, ...]:
    """The entry points ``backend`` offers, ``forward`` first (``harness/running/backend.py`` says which)."""
    return ("forward", "forward_fp32") if getattr(backend, "has_forward_fp32", False) else ("forward",)


def missing_reason(backend: Any, entry: str) -> str | None:
    """Why ``backend`` cannot be called through ``entry``, or None."""
    if entry not in AXIS_A_ENTRY_POINTS:
        return f"unknown entry point {entry!r}; known: {', '.join(AXIS_A_ENTRY_POINTS)}"
    if entry not in entry_points(backend):
        return f"{getattr(backend, 'name', backend)} has no {entry}"
    return None


def call(subject: Any, entry: str, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``entry`` of the subject's backend on (x, weight, eps), through the subject where it offers a call
    (isolated, its global state and output buffer watched); the output as a fresh tensor, so that two calls
    never compare by aliasing."""
    reason = missing_reason(subject.backend, entry)
    if reason:
        raise LookupError(reason)
    if callable(getattr(subject, "call", None)):
        out = subject.call(entry, x, weight, eps)
    else:
        out = getattr(subject.backend, entry)(x, weight, eps)
    return out.detach().clone()
