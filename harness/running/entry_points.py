"""The entry points a backend is called through, as descriptions: which method, which inputs are rows, which
outputs are compared, and the reference each output is held to. One description serves every check, so the
Axis-A variants, NaN/Inf confinement, purity and fresh outputs hold ``forward``, ``forward_fp32`` and the
variants engines ship (fused add, weight offset, no weight) alike (harness/checking/entry_checks.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...contract import reference
from ...contract.families import semantics, variants
from ..drawing.cases import Batch, drawing_device, lay_out_weight
from ..vocabulary.entry_point_names import AXIS_A_ENTRY_POINTS, FORWARD_ENTRY_POINTS

References = Callable[[Any, Sequence[torch.Tensor], "torch.Tensor | None", float], tuple[torch.Tensor, ...]]


@dataclass(frozen=True)
class EntryPoint:
    """One way into a backend: ``name(*rows, weight, eps)`` (no weight where ``weighted`` is False).

    ``rows`` names the inputs that are rows ([..., dim], transformed alike by every Axis-A variant), ``outputs``
    what the call returns, in order, every one of them compared. ``rule`` is the Axis-A rule its variants are
    recorded under (None: each variant's own rule, as for ``forward``); ``purity_rule`` the rule an input it
    changed breaks. ``reference`` gives the fp32 reference of each output (a stored residual as stored).
    """

    name: str
    rows: tuple[str, ...]
    outputs: tuple[str, ...]
    reference: References
    weighted: bool = True
    rule: str | None = None
    purity_rule: str = semantics.PURITY.id

    def offered_by(self, backend: Any) -> bool:
        if self.name == "forward":
            return True
        if self.name == "forward_fp32":
            return bool(getattr(backend, "has_forward_fp32", False))
        return bool(backend.offers(self.name))

    def writes_in_place(self, backend: Any) -> bool:
        """Does the backend declare that this entry point writes into its row inputs?"""
        return self.name == "fused_add" and bool(getattr(backend, "fused_add_in_place", False))

    def args(self, rows: Sequence[torch.Tensor], weight: torch.Tensor | None, eps: float) -> tuple[Any, ...]:
        return (*rows, weight, eps) if self.weighted else (*rows, eps)

    def inputs(self, batch: Batch, device: torch.device | str, *, rows: int | None = None,
               salt: int = 0) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """The row inputs of ``batch`` (x, and a fused add's residual) and its weight, laid out as the batch says,
        on ``device``: made on the CPU, so the same bits on any device, unless they are large enough to be drawn
        on the GPU itself (cases.drawing_device); the weight laid out there."""
        where = drawing_device((rows if rows is not None else batch.rows) * batch.dim, device)
        made = {"x": lambda: batch.x(rows, salt, device=where),
                "residual": lambda: batch.residual(rows, salt, device=where)}
        row_inputs = [made[name]().to(device) for name in self.rows]
        weight = lay_out_weight(batch.w().to(device), batch.weight_layout) if self.weighted else None
        return row_inputs, weight


def _forward_reference(backend: Any, rows: Sequence[torch.Tensor], w: torch.Tensor | None,
                       eps: float) -> tuple[torch.Tensor, ...]:
    assert w is not None  # a weighted entry point is always given its weight
    return (reference.reference_fp32(rows[0], w, eps),)


def _fused_add_reference(backend: Any, rows: Sequence[torch.Tensor], w: torch.Tensor | None,
                         eps: float) -> tuple[torch.Tensor, ...]:
    assert w is not None
    return reference.reference_fused_add(rows[0], rows[1], w, eps)


def _offset_reference(backend: Any, rows: Sequence[torch.Tensor], w: torch.Tensor | None,
                      eps: float) -> tuple[torch.Tensor, ...]:
    assert w is not None
    return (reference.reference_offset(rows[0], w, eps, getattr(backend, "offset_dtype", "float32")),)


def _unweighted_reference(backend: Any, rows: Sequence[torch.Tensor], w: torch.Tensor | None,
                          eps: float) -> tuple[torch.Tensor, ...]:
    return (reference.reference_unweighted(rows[0], eps),)


FORWARD = EntryPoint("forward", ("x",), ("y",), _forward_reference)
FORWARD_FP32 = EntryPoint("forward_fp32", ("x",), ("y",), _forward_reference)
FUSED_ADD = EntryPoint("fused_add", ("x", "residual"), ("y", "residual_out"), _fused_add_reference,
                       rule=variants.AXIS_A_FUSED_ADD.id, purity_rule=variants.PURITY.id)
OFFSET = EntryPoint("forward_offset", ("x",), ("y",), _offset_reference, rule=variants.AXIS_A_OFFSET.id,
                    purity_rule=variants.PURITY.id)
UNWEIGHTED = EntryPoint("forward_unweighted", ("x",), ("y",), _unweighted_reference, weighted=False,
                        rule=variants.AXIS_A_UNWEIGHTED.id, purity_rule=variants.PURITY.id)

ENTRY_POINTS: dict[str, EntryPoint] = {e.name: e for e in (FORWARD, FORWARD_FP32, FUSED_ADD, OFFSET, UNWEIGHTED)}
# A case names entry points by the shared vocabulary's words: one description for each, in the same order.
assert tuple(ENTRY_POINTS) == AXIS_A_ENTRY_POINTS, (tuple(ENTRY_POINTS), AXIS_A_ENTRY_POINTS)


def entry_point(name: str) -> EntryPoint:
    """The description called ``name``; a KeyError lists the known ones."""
    try:
        return ENTRY_POINTS[name]
    except KeyError:
        raise KeyError(f"unknown entry point {name!r}; known: {', '.join(ENTRY_POINTS)}") from None


def entry_points(backend: Any) -> tuple[str, ...]:
    """The plain norm's entry points ``backend`` offers, ``forward`` first (``harness/running/backend.py`` says
    which)."""
    return tuple(name for name in FORWARD_ENTRY_POINTS if ENTRY_POINTS[name].offered_by(backend))


def missing_reason(backend: Any, entry: str) -> str | None:
    """Why ``backend`` cannot be called through ``entry``, or None."""
    if entry not in ENTRY_POINTS:
        return f"unknown entry point {entry!r}; known: {', '.join(ENTRY_POINTS)}"
    if not ENTRY_POINTS[entry].offered_by(backend):
        verb = "has no" if entry in FORWARD_ENTRY_POINTS else "does not offer"
        return f"{getattr(backend, 'name', backend)} {verb} {entry}"
    return None


def call(subject: Any, entry: str, rows: Sequence[torch.Tensor], weight: torch.Tensor | None,
         eps: float, *, fresh: bool = True) -> tuple[torch.Tensor, ...]:
    """``entry`` of the subject's backend on (rows, weight, eps), through the subject where it offers a call
    (isolated, its global state, inputs and returned outputs watched); every output as a fresh tensor, in the
    description's order, so that two calls never compare by aliasing. ``fresh=False`` returns the outputs as the
    backend gave them, for a caller that is done with them before it calls the backend again (no later call can
    write into them first)."""
    reason = missing_reason(subject.backend, entry)
    if reason:
        raise LookupError(reason)
    args = ENTRY_POINTS[entry].args(rows, weight, eps)
    if callable(getattr(subject, "call", None)):
        out = subject.call(entry, *args)
    else:
        out = getattr(subject.backend, entry)(*args)
    outs = tuple(out) if isinstance(out, tuple | list) else (out,)
    return tuple(t.detach().clone() if fresh else t.detach() for t in outs)
