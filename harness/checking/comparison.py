"""Comparisons that return a verdict with its statistics; assertions and reports both read the result.

Bitwise means identical bit patterns through integer views: stricter than ``torch.equal`` about -0.0
and NaN payloads. Tolerance comparisons report max abs/rel error, max ULP in the output dtype, the margin
(worst error over its allowance) and where it happened, and check NaN/Inf placement separately.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...contract import FP32_ROUNDING, Bound, Tolerance, UlpBound

_INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16,
             torch.float64: torch.int64, torch.float8_e4m3fn: torch.int8}
_BITS = {torch.float32: 32, torch.bfloat16: 16, torch.float16: 16, torch.float64: 64, torch.float8_e4m3fn: 8}
# ULP-error histogram bins: 0, 1, 2-3, 4-7, ... (bin k >= 1 holds 2**(k-1) to 2**k - 1 ULP); the last bin is open.
ULP_BINS = 16
_ULP_EDGES = torch.tensor([1 << k for k in range(ULP_BINS - 1)], dtype=torch.int64)


def ulp_bin_label(k: int) -> str:
    """The ULP range of histogram bin ``k``, as a plot's tick label."""
    if k == 0:
        return "0"
    low, high = 1 << (k - 1), (1 << k) - 1
    if k == ULP_BINS - 1:
        return f">={low}"
    return str(low) if low == high else f"{low}-{high}"


def ulp_histogram(ulps: torch.Tensor, keep: torch.Tensor | None = None) -> list[int]:
    """Elements per ULP-error bin (``ULP_BINS`` power-of-two bins): a few integers a report can sum across
    cases and draw, where the max ULP alone hides whether one element or all of them were off."""
    flat = ulps.flatten() if keep is None else ulps[keep]
    index = torch.bucketize(flat, _ULP_EDGES.to(flat.device), right=True)
    return torch.bincount(index, minlength=ULP_BINS).tolist()


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a float tensor as unsigned values in int64 (float64 keeps its signed view)."""
    if t.dtype not in _INT_VIEW:
        raise TypeError(f"no bit view for dtype {t.dtype}")
    raw = t.detach().cpu().contiguous().view(_INT_VIEW[t.dtype]).to(torch.int64)
    width = _BITS[t.dtype]
    return raw if width == 64 else raw & ((1 << width) - 1)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do two tensors of one dtype and shape hold the same bit patterns? Contiguous ones are compared as whole
    64-bit words where their sizes and offsets allow (torch.equal's cost is per element: an int64 view of a bf16
    tensor compares in about a third of the time of its int16 view), others through their own integer view."""
    return bool(same_bits_flag(a, b))


def same_bits_flag(a: torch.Tensor, b: torch.Tensor) -> bool | torch.Tensor:
    """:func:`same_bits` as a flag: a bool, or on a GPU a 0-dim bool tensor that :func:`read_flags` reads back
    with the others of its call."""
    a, b = a.detach(), b.detach()
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    size = a.element_size()
    if a.is_contiguous() and b.is_contiguous() and size < 8 and a.numel() * size % 8 == 0 and all(
            t.storage_offset() * size % 8 == 0 for t in (a, b)):
        return equal_flag(a.reshape(-1).view(torch.int64), b.reshape(-1).view(torch.int64))
    view = _INT_VIEW.get(a.dtype)
    if view is None:
        return equal_flag(a, b)
    return equal_flag(a.view(view), b.view(view))


def equal_flag(a: torch.Tensor, b: torch.Tensor) -> bool | torch.Tensor:
    """``torch.equal(a, b)`` on the CPU; on a GPU the same condition left on the device (a 0-dim bool tensor), to
    be read back with others by :func:`read_flags`."""
    if a.device.type == "cpu" or a.device != b.device or a.dtype != b.dtype:
        return bool(torch.equal(a, b))
    if a.shape != b.shape:
        return False
    return (a == b).all()


def read_flags(flags: Sequence[bool | torch.Tensor]) -> list[bool]:
    """Conditions as Python bools, those left on a device (0-dim bool tensors) read back together: one wait for
    the GPU per device, not one per condition.

    Each read of a GPU value makes the host wait for the GPU. Alone on an H200 a wait cost about 0.03 ms; with the
    eight pytest-xdist workers of a run time-sliced on it, 0.54 ms, and the waits (``torch.equal`` above all: the
    guard zones, purity and fresh-output fingerprints of every backend call) were 40 % of a Triton run's worker
    time."""
    out = [f if isinstance(f, bool) else False for f in flags]
    by_device: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
    for i, f in enumerate(flags):
        if not isinstance(f, bool):
            by_device.setdefault(f.device, []).append((i, f.reshape(()).to(torch.bool)))
    for pending in by_device.values():
        values = torch.stack([f for _, f in pending]).tolist()
        for (i, _), value in zip(pending, values, strict=True):
            out[i] = bool(value)
    return out


def _hex(pattern: int, dtype: torch.dtype) -> str:
    return f"0x{pattern & ((1 << _BITS[dtype]) - 1):0{_BITS[dtype] // 4}x}"


def ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Map bit patterns to integers whose difference counts representable values (ULPs) between floats.

    Sign-magnitude becomes two's complement, so +0 and -0 both map to 0 and adjacent floats differ by 1.
    """
    width = _BITS[t.dtype]
    if width == 64:
        raise TypeError("ULP distances are taken in the output dtype, not float64")
    raw = t.detach().contiguous().view(_INT_VIEW[t.dtype])
    # 8- and 16-bit patterns fit int32 with room for differences; 32-bit ones need int64 for the difference.
    b = raw.to(torch.int32 if width <= 16 else torch.int64)
    magnitude = b & ((1 << (width - 1)) - 1)
    return torch.where(b < 0, -magnitude, magnitude)


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Elementwise count of representable values between two tensors of one dtype (int64)."""
    if actual.dtype != expected.dtype:
        raise TypeError(f"ULP distance needs one dtype, got {actual.dtype} and {expected.dtype}")
    return (ordered_bits(actual) - ordered_bits(expected)).abs_().to(torch.int64)


def _unravel(flat_index: int, shape: torch.Size) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat_index % size if size else 0)
        flat_index //= max(size, 1)
    return tuple(reversed(index))


@dataclass(frozen=True)
class BitwiseResult:
    """Verdict of a bitwise comparison, with the first differing element's index and bit patterns."""

    equal: bool
    total: int
    mismatches: int = 0
    first_index: tuple[int, ...] | None = None
    actual_bits: str | None = None
    expected_bits: str | None = None
    actual_value: float | None = None
    expected_value: float | None = None
    problem: str | None = None  # shape or dtype disagreement: no elementwise comparison possible

    def describe(self) -> str:
        if self.problem:
            return f"not equal: {self.problem}"
        if self.equal:
            return f"bitwise equal ({self.total} elements)"
        pct = 100.0 * self.mismatches / max(self.total, 1)
        return (
            f"not equal: {self.mismatches} / {self.total} elements ({pct:.2f}%) differ in their bits; "
            f"first at index {self.first_index}: {self.actual_value!r} ({self.actual_bits}) "
            f"but expected {self.expected_value!r} ({self.expected_bits})"
        )


def _canonical_nans(t: torch.Tensor) -> torch.Tensor:
    """``t`` with every NaN replaced by one NaN pattern: IEEE 754 leaves NaN sign and payload to the
    implementation, so two devices (or a GPU and Triton's CPU interpreter) may follow one order and still
    write different NaN bits."""
    return torch.where(torch.isnan(t), torch.full_like(t, float("nan")), t)


def compare_bitwise(actual: torch.Tensor, expected: torch.Tensor, *, nan_payloads: bool = True) -> BitwiseResult:
    """Identical shape, dtype and bit patterns; -0.0 differs from +0.0 and NaN payloads count, unless
    ``nan_payloads`` is False: then a NaN matches any NaN (its place still counts)."""
    total = expected.numel()
    if actual.dtype != expected.dtype:
        return BitwiseResult(False, total, total,
                             problem=f"dtype {actual.dtype}, but expected {expected.dtype}")
    if tuple(actual.shape) != tuple(expected.shape):
        return BitwiseResult(False, total, total,
                             problem=f"shape {tuple(actual.shape)}, but expected {tuple(expected.shape)}")
    if not nan_payloads and actual.dtype in _INT_VIEW:
        actual, expected = _canonical_nans(actual.detach()), _canonical_nans(expected.detach())
    if actual.dtype in _INT_VIEW and same_bits(actual, expected):
        return BitwiseResult(True, total)  # the common case, on the device, without widening every pattern
    a, e = bits(actual), bits(expected)
    differ = a != e
    mismatches = int(differ.sum())
    if mismatches == 0:
        return BitwiseResult(True, total)
    first = int(differ.flatten().nonzero()[0])
    index = _unravel(first, expected.shape)
    return BitwiseResult(
        False, total, mismatches, index,
        actual_bits=_hex(int(a.flatten()[first]), actual.dtype),
        expected_bits=_hex(int(e.flatten()[first]), expected.dtype),
        actual_value=float(actual.detach().flatten()[first].cpu()),
        expected_value=float(expected.detach().flatten()[first].cpu()),
    )


@dataclass(frozen=True)
class ToleranceResult:
    """Verdict of a bound check, with the statistics every report column needs."""

    passed: bool
    total: int
    bound: str
    mismatches: int = 0          # finite elements outside the bound
    nonfinite_mismatches: int = 0  # NaN/Inf where the reference has none, or the other way round
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: int = 0
    margin: float = 0.0          # worst error over its allowance: <= 1 passes
    worst_index: tuple[int, ...] | None = None
    worst_actual: float | None = None
    worst_expected: float | None = None
    first_nonfinite_index: tuple[int, ...] | None = None
    problem: str | None = None
    ulp_hist: tuple[int, ...] = ()  # finite elements per ULP-error bin (ulp_histogram)

    def describe(self) -> str:
        if self.problem:
            return f"not comparable: {self.problem}"
        head = "within" if self.passed else "outside"
        parts = [f"{head} {self.bound}: margin {self.margin:.3g} (worst error / allowed)"]
        if self.mismatches:
            pct = 100.0 * self.mismatches / max(self.total, 1)
            parts.append(f"{self.mismatches} / {self.total} elements ({pct:.2f}%) outside the bound")
        parts.append(f"max abs err {self.max_abs:.3g}, max rel err {self.max_rel:.3g}, max {self.max_ulp} ULP")
        if self.worst_index is not None:
            parts.append(f"worst at index {self.worst_index}: {self.worst_actual!r} "
                         f"against {self.worst_expected!r}")
        if self.nonfinite_mismatches:
            parts.append(f"{self.nonfinite_mismatches} elements have NaN/Inf where the reference does not "
                         f"(or the reverse), first at index {self.first_nonfinite_index}")
        return "; ".join(parts)


def _nonfinite_class(t: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf."""
    cls = torch.zeros(t.shape, dtype=torch.int8, device=t.device)
    cls[torch.isnan(t)] = 1
    cls[torch.isposinf(t)] = 2
    cls[torch.isneginf(t)] = 3
    return cls


def _safe_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den with 0 where num is 0 (even if den is 0) and inf where only den is 0."""
    return torch.where(num == 0, torch.zeros((), dtype=num.dtype, device=num.device), num / den)


def _nonfinite_placement(a: torch.Tensor, r_out: torch.Tensor,
                         shape: torch.Size) -> tuple[torch.Tensor | None, int, tuple[int, ...] | None]:
    """(mask of elements finite in both or None when all are, misplaced NaN/Inf count, the first's index)."""
    if bool(torch.isfinite(a).all()) and bool(torch.isfinite(r_out).all()):
        return None, 0, None
    a_cls, r_cls = _nonfinite_class(a), _nonfinite_class(r_out)
    misplaced = a_cls != r_cls
    count = int(misplaced.sum())
    first = _unravel(int(misplaced.flatten().nonzero()[0]), shape) if count else None
    return (a_cls == 0) & (r_cls == 0), count, first


def _bound_ratio(bound: Bound, err: torch.Tensor, ref_abs: torch.Tensor, ulps: torch.Tensor,
                 terms: torch.Tensor | None) -> torch.Tensor:
    """Each element's error over what ``bound`` allows there: above 1 is a breach."""
    if isinstance(bound, Tolerance):
        allowed = ref_abs.mul(bound.rtol).add_(bound.atol)
        if terms is not None and bound.term_roundings:
            allowed.add_(terms, alpha=bound.term_roundings * FP32_ROUNDING)
        return _safe_ratio(err, allowed)
    if isinstance(bound, UlpBound):
        return _safe_ratio(ulps.to(err.dtype), torch.tensor(float(bound.max_ulp), dtype=err.dtype))
    raise TypeError(f"unknown bound {bound!r}")


def _check_terms(bound: Bound, terms: torch.Tensor | None, reference: torch.Tensor) -> None:
    """Raise unless ``terms`` is given exactly where ``bound`` allows for them, in the reference's shape."""
    if isinstance(bound, Tolerance) and bound.term_roundings and terms is None:
        raise ValueError(f"the bound {bound.describe()!r} allows roundings of the terms, but no terms were given")
    if terms is not None and tuple(terms.shape) != tuple(reference.shape):
        raise ValueError(f"terms of shape {tuple(terms.shape)} for a reference of shape {tuple(reference.shape)}")


def compare_within(actual: torch.Tensor, reference: torch.Tensor, bound: Bound,
                   *, correctly_rounded: torch.Tensor | None = None,
                   terms: torch.Tensor | None = None) -> ToleranceResult:
    """Hold ``actual`` (in its own dtype) to ``bound`` against a float32 or float64 ``reference``.

    ``Tolerance`` bounds compare values, with ``terms`` (the size of the terms each element sums, the reference's
    shape) where the bound allows roundings of them; ``UlpBound`` bounds compare ULPs in ``actual.dtype`` against
    ``correctly_rounded`` (the fp64 oracle) rounded to that dtype, falling back to ``reference``.
    Errors are taken in float32 (float64 for a float64 reference): the rounding of a difference is far
    below any bound the contract sets. The work stays on the tensors' device; only statistics come back.
    """
    total = reference.numel()
    _check_terms(bound, terms, reference)
    if tuple(actual.shape) != tuple(reference.shape):
        return ToleranceResult(False, total, bound.describe(),
                               problem=f"shape {tuple(actual.shape)}, but expected {tuple(reference.shape)}")
    if not actual.is_floating_point():
        return ToleranceResult(False, total, bound.describe(), problem=f"dtype {actual.dtype} is not a float")
    if total == 0:
        return ToleranceResult(True, 0, bound.describe())
    work = torch.float64 if reference.dtype == torch.float64 else torch.float32
    a = actual.detach().to(work)
    r = reference.detach().to(device=a.device, dtype=work)
    # Where the reference lies beyond the output dtype's range, the correctly rounded output is +-Inf:
    # placement is judged against the reference rounded to the output dtype.
    # (widened again: torch has no isfinite for float8 dtypes; the round trip keeps NaN and Inf where they are)
    r_out = reference.detach().to(device=a.device, dtype=actual.dtype).to(work)
    finite, nonfinite_mismatches, first_nonfinite = _nonfinite_placement(a, r_out, reference.shape)

    err = (a - r).abs_()
    ref_abs = r.abs()
    target = correctly_rounded if correctly_rounded is not None else reference
    ulps = ulp_distance(actual.detach(), target.detach().to(device=a.device, dtype=actual.dtype))
    if finite is not None:
        for t in (err, ref_abs, ulps):
            t.masked_fill_(~finite, 0)
    rel = _safe_ratio(err, ref_abs)
    if terms is not None:
        terms = terms.detach().to(device=a.device, dtype=work)
        terms = terms if finite is None else terms.masked_fill(~finite, 0)
    ratio = _bound_ratio(bound, err, ref_abs, ulps, terms)
    if finite is not None:
        ratio.masked_fill_(~finite, -1.0)
    flat = ratio.flatten()
    worst = int(flat.argmax())
    margin = float(flat[worst])
    worst_index = None if margin < 0 else _unravel(worst, reference.shape)  # below 0: nothing finite to compare
    return ToleranceResult(
        passed=bool((flat > 1.0).sum() == 0) and nonfinite_mismatches == 0,
        total=total,
        bound=bound.describe(),
        mismatches=int((flat > 1.0).sum()),
        nonfinite_mismatches=nonfinite_mismatches,
        max_abs=float(err.max()),
        max_rel=float(rel.max()),
        max_ulp=int(ulps.max()),
        margin=max(margin, 0.0),
        worst_index=worst_index,
        worst_actual=float(a.flatten()[worst]) if worst_index is not None else None,
        worst_expected=float(r.flatten()[worst]) if worst_index is not None else None,
        first_nonfinite_index=first_nonfinite,
        ulp_hist=tuple(ulp_histogram(ulps, finite)),
    )
