"""The inputs a backend declares it takes (``layouts``, ``min_dim``, ``max_dim``, ``dim_multiple_of``): read and
checked when it loads, and asked before every call, so that a case outside them is not run (with the limit as its
reason) instead of being held against the backend. The vocabulary is the contract's (contract/refusals.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...contract.refusals import ALIGNMENT_BYTES, LAYOUTS
from ...contract.rmsnorm import TARGET_DIMS

# What a declared-limit skip's "Did not run" reason starts with, so reports can tell it from other skips.
NOT_RUN_PREFIX = "not run: outside the declared limits"


def layout_of(t: torch.Tensor) -> str:
    """``t``'s layout in the contract's words: contiguous (dense, 16-byte aligned), offset (dense, not aligned),
    strided (not dense)."""
    if not t.is_contiguous():
        return "strided"
    return "contiguous" if t.numel() == 0 or t.data_ptr() % ALIGNMENT_BYTES == 0 else "offset"


@dataclass(frozen=True)
class InputLimits:
    """A backend's declared limits; the defaults take the contract's whole domain."""

    layouts: tuple[str, ...] = tuple(LAYOUTS)
    min_dim: int = 1
    max_dim: int | None = None
    dim_multiple_of: int = 1

    @classmethod
    def declared(cls, impl: Any, name: str) -> InputLimits:
        """The limits ``impl`` declares as attributes; a malformed one raises ``ValueError`` naming it."""
        def bad(attribute: str, value: Any, want: str) -> ValueError:
            return ValueError(f"backend {name!r}: {attribute}={value!r} is malformed: {want}")

        layouts = getattr(impl, "layouts", None)
        if layouts is None:
            layouts = tuple(LAYOUTS)
        else:
            want = f"a sequence of layout names among {', '.join(LAYOUTS)} (e.g. ('contiguous',))"
            if isinstance(layouts, str) or not isinstance(layouts, Iterable):
                raise bad("layouts", layouts, want)
            layouts = tuple(layouts)
            if not layouts or any(v not in LAYOUTS for v in layouts):
                raise bad("layouts", layouts, want)
        numbers: dict[str, int | None] = {}
        for attribute, default in (("min_dim", 1), ("max_dim", None), ("dim_multiple_of", 1)):
            value = getattr(impl, attribute, None)
            if value is None:
                numbers[attribute] = default
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(attribute, value, "a positive int")
            numbers[attribute] = value
        min_dim, max_dim, multiple = (numbers["min_dim"] or 1), numbers["max_dim"], (numbers["dim_multiple_of"] or 1)
        if max_dim is not None and max_dim < min_dim:
            raise bad("max_dim", max_dim, f"at least min_dim={min_dim}")
        return cls(layouts, min_dim, max_dim, multiple)

    @property
    def declared_any(self) -> bool:
        return self != InputLimits()

    def describe(self) -> str:
        """The limits in a few words ("layouts contiguous; dim a multiple of 8"), "" when none are declared."""
        parts = []
        if set(self.layouts) != set(LAYOUTS):
            parts.append("layouts " + ", ".join(self.layouts))
        if self.min_dim > 1 or self.max_dim is not None:
            parts.append(f"dim {self.min_dim}–{self.max_dim}" if self.max_dim is not None else f"dim ≥ {self.min_dim}")
        if self.dim_multiple_of > 1:
            parts.append(f"dim a multiple of {self.dim_multiple_of}")
        return "; ".join(parts)

    def target_gaps(self, targets: Iterable[tuple[str, int]] = tuple(TARGET_DIMS.items())) -> list[str]:
        """The target shapes (the contract's, or a run's --target-dims) these limits keep out, in its words
        ("hidden 4096", "contiguous rows"): a kernel may honestly decline them, but then the model's own shapes were
        never checked, and it cannot pass."""
        gaps = [f"{name} {dim}" for name, dim in targets if self.dim_outside(dim)]
        return gaps + ([] if "contiguous" in self.layouts else ["contiguous rows"])

    def outside(self, names: Sequence[str], args: Sequence[Any]) -> str | None:
        """Why a call with ``args`` (tensor arguments named by ``names``, in order) is outside these limits, or
        None. Only valid calls are judged: a tensor without a last dim is left to the backend's own guard."""
        tensors = [(names[i] if i < len(names) else f"argument {i}", a) for i, a in enumerate(args)
                   if isinstance(a, torch.Tensor)]
        if not tensors:
            return None
        for label, t in tensors:
            layout = layout_of(t)
            if layout not in self.layouts:
                return f"{label} {layout} (it takes layouts {', '.join(self.layouts)})"
        x = tensors[0][1]
        if x.dim() < 1:
            return None
        return self.dim_outside(x.shape[-1])

    def dim_outside(self, dim: int) -> str | None:
        """Why rows of ``dim`` elements are outside these limits, or None: what a plan can ask of a case before
        its inputs exist (a fresh process's first calls)."""
        # The reason names the limit, not the case's dim: "Did not run" lists each reason once.
        if dim < self.min_dim:
            return f"a dim below its min_dim={self.min_dim}"
        if self.max_dim is not None and dim > self.max_dim:
            return f"a dim above its max_dim={self.max_dim}"
        if dim % self.dim_multiple_of:
            return f"a dim that is not a multiple of its dim_multiple_of={self.dim_multiple_of}"
        return None


def describe_call(names: Sequence[str], args: Sequence[Any]) -> str:
    """The tensor arguments of a call as a report names the input: "x [2, 4096] bfloat16 contiguous, weight
    [4096] float32 strided (stride 2)"."""
    parts = []
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            continue
        label = names[i] if i < len(names) else f"argument {i}"
        layout = layout_of(a)
        where = f" (stride {', '.join(map(str, a.stride()))})" if layout == "strided" else ""
        parts.append(f"{label} {list(a.shape)} {str(a.dtype).removeprefix('torch.')} {layout}{where}")
    return ", ".join(parts)


def refused_feature(names: Sequence[str], args: Sequence[Any]) -> str:
    """What about a refused call stands out, in a few words for "Pick a kernel": the tensors that are not
    contiguous ("strided weight"), else the dim ("dim 1"); the dtype has a column of its own."""
    odd = [f"{layout_of(a)} {names[i] if i < len(names) else f'argument {i}'}" for i, a in enumerate(args)
           if isinstance(a, torch.Tensor) and layout_of(a) != "contiguous"]
    if odd:
        return ", ".join(odd)
    x = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return f"dim {x.shape[-1]}" if x is not None and x.dim() else "its inputs"
