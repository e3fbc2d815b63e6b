"""Rounding classes: which reference rounding order a backend's bits match, and the vote that checks a
convention a backend declares (its rounding class, where it forms 1 + weight, an fp32 weight, the stored residual).

Two correct kernels that round at different places can never be bitwise equal, and an accuracy bound cannot
tell them apart (they differ by about one ULP). Bits can: on the elements where two conventions give
different bits, a kernel has one convention's bits or the other's. A kernel with another reduction order
differs from a reference by a few fp32 ULPs, far less than the output dtype's rounding step, so it still has
its own convention's bits there but for 1 element in 7,000 to 100,000 (reports/cpu/vote-rates.md); a kernel
that follows the other convention has the other's bits on nearly all of them. So the vote is decisive without
bitwise equality.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from ...contract.reference import offset_scale, rounding_class_outputs
from .comparison import bits

# A breach needs at least this many elements with the other convention's bits: one stray element is what a
# correct kernel with another reduction order shows about once in 7,000 to 100,000 discriminating elements.
MIN_OTHER_VOTES = 2


@dataclass(frozen=True)
class Vote:
    """How an output sides on the elements where two conventions give different bits."""

    discriminating: int  # elements where no tensor of one side has the bits of a tensor of the other
    declared: int  # of those, elements where the output has a declared-side tensor's bits
    other: int  # ... and where it has an other-side tensor's bits

    @property
    def breached(self) -> bool:
        return self.other >= MIN_OTHER_VOTES and self.other > self.declared

    def describe(self, declared: str, other: str) -> str:
        if not self.discriminating:
            return f"{declared} and {other} give the same bits on every element here"
        return (f"on the {self.discriminating} elements where {declared} and {other} give different bits, the "
                f"output has {declared}'s bits on {self.declared} and {other}'s on {self.other}")


def vote(actual: torch.Tensor, declared: Sequence[torch.Tensor], other: Sequence[torch.Tensor]) -> Vote:
    """Side with ``declared`` or ``other`` element by element; each side may hold several tensors (the same
    convention under each rounding class, say), an element siding with a side if it has any of its bits."""
    out = bits(actual)
    mine = [bits(t) for t in declared]
    theirs = [bits(t) for t in other]
    apart = torch.ones_like(out, dtype=torch.bool)
    for a in mine:
        for b in theirs:
            apart &= a != b
    has_mine = torch.zeros_like(apart)
    has_theirs = torch.zeros_like(apart)
    for a in mine:
        has_mine |= out == a
    for b in theirs:
        has_theirs |= out == b
    return Vote(int(apart.sum()), int((apart & has_mine).sum()), int((apart & has_theirs).sum()))


def row_matches(actual: torch.Tensor, classes: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """For each class, how many rows of ``actual`` have exactly that class's bits."""
    dim = actual.shape[-1]
    out = bits(actual).reshape(-1, dim)
    return {name: int((out == bits(ref).reshape(-1, dim)).all(dim=-1).sum()) for name, ref in classes.items()}


def distinguishable(classes: Mapping[str, torch.Tensor]) -> bool:
    """Do any two classes give different bits somewhere? (In fp32 output they coincide.)"""
    refs = [bits(t) for t in classes.values()]
    return any(not torch.equal(refs[0], r) for r in refs[1:])


# --- the classes of each entry point --------------------------------------------------------------------


def forward_classes(x: torch.Tensor, weight: torch.Tensor, eps: float) -> dict[str, torch.Tensor]:
    return rounding_class_outputs(x, weight.float(), eps, x.dtype)


def offset_classes(x: torch.Tensor, weight: torch.Tensor, eps: float, offset_dtype: str) -> dict[str, torch.Tensor]:
    return rounding_class_outputs(x, offset_scale(weight, offset_dtype), eps, x.dtype)


def unweighted_classes(x: torch.Tensor, eps: float) -> dict[str, torch.Tensor]:
    ones = torch.ones(x.shape[-1], dtype=torch.float32, device=x.device)
    return rounding_class_outputs(x, ones, eps, x.dtype)


def fused_add_classes(x: torch.Tensor, residual: torch.Tensor, residual_out: torch.Tensor, weight: torch.Tensor,
                      eps: float) -> dict[str, torch.Tensor]:
    """Classes named ``"<input>, <rounding class>"``: the input normalized is the stored residual_out or the
    fp32 sum before its rounding (contract ``FUSED_ADD_INPUTS``)."""
    inputs = {"stored_residual": residual_out.float(), "fp32_sum": x.float() + residual.float()}
    return {f"{source}, {name}": out
            for source, normalized in inputs.items()
            for name, out in rounding_class_outputs(normalized, weight.float(), eps, x.dtype).items()}


def fused_add_alternatives(x: torch.Tensor, residual: torch.Tensor, residual_out: torch.Tensor,
                           weight: torch.Tensor, eps: float) -> dict[str, dict[str, torch.Tensor]]:
    """For each input choice of the contract's ``FUSED_ADD_INPUTS`` (where the rms and the normalized row come
    from), the output of every rounding class. The contract's choice, ``stored_residual``, is voted against each
    other choice separately and within one rounding class, so that no mixture of choices or classes can side
    with it on a count taken over all of them at once."""
    stored, total = residual_out.float(), x.float() + residual.float()
    choices = {"stored_residual": (stored, stored), "fp32_sum": (total, total),
               "rms_of_fp32_sum": (stored, total), "row_of_fp32_sum": (total, stored)}
    return {name: rounding_class_outputs(row, weight.float(), eps, x.dtype, rms_of=rms_of)
            for name, (row, rms_of) in choices.items()}


def closest_class(actual: torch.Tensor, classes: Mapping[str, torch.Tensor]) -> str:
    """The class whose bits ``actual`` has on the most elements."""
    out = bits(actual)
    return max(classes, key=lambda name: int((out == bits(classes[name])).sum()))


def side(classes: Mapping[str, torch.Tensor], part: str) -> list[torch.Tensor]:
    """The class outputs whose name contains ``part``: one side of a vote."""
    return [t for name, t in classes.items() if part in name.split(", ")]
