"""The stage of a bitwise difference: where in the kernel's arithmetic two outputs of the same rows part, read from
the shape of the difference alone (and, where the inputs are at hand, from the contract's rounding classes).

- **per-row scale**: in every differing row, every differing element moved the same way and by about one rounding
  step: the row's rms changed, so the sum of squares was added in another order or precision;
- **elementwise**: elements of one row moved both ways (the weight multiply, the offset, the cast): named by the
  rounding class whose bits the output has, where one does;
- **columns**: the differences keep to some columns (a tail, or a vector width), named;
- **wrong values**: elements off by far more than rounding (the kernel read other elements);
- **fused-add residual** and **fp8 scale**: the differing output is a fused add's stored residual, or an fp8 entry
  point's scale, or an output that follows from one that differs too (fp8 values divided by a scale that differs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from .comparison import bits, same_bits, ulp_distance

# Differences of more ulps than this are not a rounding of the same value: the kernel computed something else.
WRONG_VALUE_ULPS = 1 << 12
# A per-row scale moves each element by at most a few ulps of the output dtype (the rms moved by one fp32 ulp or a
# few: an fp32 output one or two ulps, a 16-bit output one).
SCALE_ULPS = 64
# Outputs that others are computed from, cause first: a fused add's residual is normalized, and an fp8 entry point's
# values are y divided by its scale. Where one of them differs too, its stage is the stage.
UPSTREAM_OUTPUTS = ("residual_out", "scale")


@dataclass
class Stage:
    """Where two outputs part: ``kind`` is one of the module's stages; ``text`` says it to a person."""

    kind: str
    text: str
    rows: int = 0  # rows that differ
    of_rows: int = 0
    elements: int = 0
    max_ulp: int = 0
    columns: list[list[int]] = field(default_factory=list)  # [first, last] ranges of the differing columns
    rounding_class: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text, "rows": self.rows, "of_rows": self.of_rows,
                "elements": self.elements, "max_ulp": self.max_ulp, "columns": self.columns,
                "rounding_class": self.rounding_class}


def _ranges(columns: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for c in columns:
        if out and c == out[-1][1] + 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def _ranges_text(ranges: list[list[int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in ranges)


def stage_of(actual: torch.Tensor, expected: torch.Tensor, *, output: str = "y",
             classes: Mapping[str, torch.Tensor] | None = None,
             upstream: Mapping[str, Sequence[torch.Tensor]] | None = None) -> Stage:
    """The stage at which ``actual`` parts from ``expected`` (the same rows, two settings). ``output`` names the
    differing output (``residual_out``, ``scale`` have stages of their own); ``classes``: the contract's rounding
    classes' outputs for the rows of ``actual``, to name the one its bits match; ``upstream``: the same call's other
    outputs, by name, as (actual, expected), where ``output`` is computed from them (UPSTREAM_OUTPUTS)."""
    cause = _upstream_stage(output, upstream or {})
    if cause is not None:
        return cause
    dim = actual.shape[-1] if actual.dim() else 1
    a = actual.detach().cpu().reshape(-1, dim)
    e = expected.detach().cpu().reshape(-1, dim)
    differ = bits(a) != bits(e)
    rows = differ.any(dim=-1)
    stage = Stage("", "", int(rows.sum()), a.shape[0], int(differ.sum()))
    if a.dtype.is_floating_point and a.dtype.itemsize > 1:
        finite = torch.isfinite(a) & torch.isfinite(e)
        ulps = ulp_distance(a, e)
        stage.max_ulp = int(ulps[differ & finite].max()) if (differ & finite).any() else 0
    where = f"{stage.elements} elements in {stage.rows} of {stage.of_rows} rows"
    named = _named_stage(stage, output, where, a.dtype)
    if named is not None:
        return named
    columns = sorted(set(differ.nonzero()[:, 1].tolist()))
    stage.columns = _ranges(columns)
    if _one_scale_per_row(a, e, differ) and (stage.max_ulp <= SCALE_ULPS or _one_ratio_per_row(a, e, differ)):
        stage.kind = "per-row scale"
        how = (f"by at most {stage.max_ulp} ulp: the row's rms changed, so its sum of squares was added in another "
               "order or precision") if stage.max_ulp <= SCALE_ULPS else (
            f"by one ratio a row, up to {stage.max_ulp} ulp: the row's rms is another value (other rows, or other "
            "values, entered its statistic)")
        stage.text = (f"a per-row scale: in each differing row every differing element moved the same way, {how} "
                      f"({where})")
        return stage
    if stage.max_ulp > WRONG_VALUE_ULPS:
        stage.kind = "wrong values"
        stage.text = (f"elementwise, and not a rounding: elements up to {stage.max_ulp} ulps off ({where}); the kernel "
                      "computed other values (read other elements)")
        return stage
    if len(columns) <= dim // 2 and len(stage.columns) <= 4 and stage.rows > 1:
        stage.kind = "columns"
        stage.text = f"confined to columns {_ranges_text(stage.columns)} of {dim} ({where}): a tail or a vector width"
        return stage
    stage.kind = "elementwise"
    stage.text = f"elementwise: elements of a row moved both ways, by at most {stage.max_ulp} ulp ({where})"
    if classes:
        name, exact = _matching_class(a, classes)
        if name:
            stage.rounding_class = name
            stage.text += (f"; the bits match the contract's rounding class {name!r}" if exact else
                           f"; the bits are closest to the contract's rounding class {name!r}")
    return stage


def _upstream_stage(output: str, upstream: Mapping[str, Sequence[torch.Tensor]]) -> Stage | None:
    """The stage of the first output ``output`` is computed from that differs too (the fp8 values of a scale that
    differs show the scale's stage, not their own); None where every one is equal or none is at hand."""
    causes = UPSTREAM_OUTPUTS[:UPSTREAM_OUTPUTS.index(output)] if output in UPSTREAM_OUTPUTS else UPSTREAM_OUTPUTS
    for name in causes:
        if name not in upstream:
            continue
        a, e = upstream[name]
        if same_bits(a, e):
            continue
        cause = stage_of(a, e, output=name)
        cause.text += f" (the breach was found in {output}, computed from it)"
        return cause
    return None


def _named_stage(stage: Stage, output: str, where: str, dtype: torch.dtype) -> Stage | None:
    """The stages named by the output that differs, or by the lack of a difference; None for a row output."""
    if output == "residual_out":
        stage.kind, stage.text = "fused-add residual", f"the fused add's stored residual differs ({where})"
    elif output == "scale":
        stage.kind, stage.text = "fp8 scale", f"the fp8 output's scale differs ({where}): the values follow it"
    elif not stage.rows:
        stage.kind, stage.text = "none", "the outputs are equal"
    elif dtype.itemsize == 1:  # fp8 values: one step is a quarter of their size, so no finer stage is read
        stage.kind, stage.text = "fp8 values", f"the fp8 values differ ({where}) with the same scale"
    else:
        return None
    return stage


def _one_scale_per_row(a: torch.Tensor, e: torch.Tensor, differ: torch.Tensor) -> bool:
    """Did every differing element of each row move the same way, away from zero or toward it?"""
    grew = (a.double().abs() > e.double().abs()) & differ
    shrank = (a.double().abs() < e.double().abs()) & differ
    mixed = grew.any(dim=-1) & shrank.any(dim=-1)
    signs = (torch.signbit(a) != torch.signbit(e)) & differ & (a != 0) & (e != 0)
    return not bool(mixed.any()) and not bool(signs.any())


def _one_ratio_per_row(a: torch.Tensor, e: torch.Tensor, differ: torch.Tensor) -> bool:
    """Is each differing row ``e`` times one ratio, to a few roundings of the output dtype?"""
    step = torch.finfo(a.dtype).eps
    rows = differ.any(dim=-1)
    num, den = a[rows].double(), e[rows].double()
    usable = (den.abs() > torch.finfo(a.dtype).tiny) & torch.isfinite(num) & torch.isfinite(den)
    ratio = torch.where(usable, num / torch.where(usable, den, torch.ones_like(den)), torch.nan)
    spread = ratio.nan_to_num(nan=-math.inf).amax(dim=-1) - ratio.nan_to_num(nan=math.inf).amin(dim=-1)
    return bool((spread <= 8 * step * ratio.nan_to_num(nan=0).abs().amax(dim=-1)).all())


def _matching_class(a: torch.Tensor, classes: Mapping[str, torch.Tensor]) -> tuple[str, bool]:
    """The class whose bits ``a`` has on the most elements, and whether it has them on every element."""
    out = bits(a)
    best, hits = "", -1
    for name, t in classes.items():
        n = int((out == bits(t.detach().cpu().reshape(a.shape))).sum())
        if n > hits:
            best, hits = name, n
    return best, hits == out.numel()
