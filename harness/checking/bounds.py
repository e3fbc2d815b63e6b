"""Guard zones (``semantics.bounds``): every tensor the harness hands a backend lies in a larger allocation whose
elements around the view, and in the gaps of a strided layout, hold canaries; after the call each canary must be
unchanged. Address sanitizers and compute-sanitizer's memcheck catch stray writes the same way.

The canaries are signalling-NaN bit patterns: no arithmetic produces them (it would quiet them), so a correct
kernel never writes one, and a kernel that reads past its view reads NaN. A guarded copy keeps the original's
sizes, strides and alignment (its address modulo the allocator's alignment), so the kernel takes the same path;
what the call writes into the view is copied back into the original, so in-place writes and purity breaches land
where the caller sees them. Outputs a kernel allocates itself are beyond the harness's reach.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .comparison import read_flags, same_bits_flag

# dtype -> (the integer dtype of its bits, the canary's bits): signalling NaNs (the quiet bit clear).
CANARIES: dict[torch.dtype, tuple[torch.dtype, int]] = {
    torch.float32: (torch.int32, 0x7FA5A5A5),
    torch.bfloat16: (torch.int16, 0x7FA5),
    torch.float16: (torch.int16, 0x7DA5),
    torch.float64: (torch.int64, 0x7FF4A5A5A5A5A5A5),
}
# Canaries on each side of a view: at least this many elements, and at least one row (a kernel one row off
# writes a whole row past the end; its first element lands here).
MIN_GUARD = 64
# Allocations start at multiples of these bytes (CUDA's caching allocator; the CPU allocator): a guarded copy sits
# at the same address modulo them as the original, so alignment-dependent code paths are the same.
ALIGNMENT = {"cuda": 512, "cpu": 64}
# The names of each entry point's tensor arguments, for the message.
ARGUMENT_NAMES: dict[str, tuple[str, ...]] = {
    "forward": ("x", "weight"), "forward_fp32": ("x", "weight"), "forward_offset": ("x", "weight"),
    "forward_unweighted": ("x",), "fused_add": ("x", "residual", "weight"),
}


def guardable(t: Any) -> bool:
    """Tensors the harness can guard: a contract dtype on a CPU or CUDA device, not part of an autograd graph, and
    no element stored twice (an expanded view cannot be written)."""
    if not isinstance(t, torch.Tensor) or t.dtype not in CANARIES or t.device.type not in ALIGNMENT:
        return False
    if t.requires_grad or t.is_sparse or t.layout != torch.strided:
        return False
    return not any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.stride(), strict=True))


def span(t: torch.Tensor) -> int:
    """Elements from a view's first element to its last, gaps included."""
    if t.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))


@dataclass
class Zone:
    """One tensor argument in its guarded allocation."""

    name: str
    original: torch.Tensor
    buffer: torch.Tensor  # 1-D, the whole allocation
    view: torch.Tensor  # what the backend gets: the original's values, sizes and strides
    lead: int  # elements of canary before the view

    @property
    def bits_dtype(self) -> torch.dtype:
        return CANARIES[self.original.dtype][0]

    @property
    def canary(self) -> int:
        return CANARIES[self.original.dtype][1]

    def lays_out(self, t: torch.Tensor) -> bool:
        """Is ``t`` this zone's view or a copy of its whole allocation with the view at the same place (what an
        in-place backend adapter writes into instead of the caller's tensors)?"""
        return (t.dtype == self.view.dtype and t.shape == self.view.shape and t.stride() == self.view.stride()
                and t.storage_offset() == self.lead and t.device == self.view.device
                and t.untyped_storage().nbytes() == self.buffer.untyped_storage().nbytes())

    def _storage(self, t: torch.Tensor | None) -> torch.Tensor:
        """This allocation, or the one of the copy ``t`` lies in, as a 1-D tensor of its length."""
        return self.buffer if t is None else t.new_empty(0).set_(t.untyped_storage(), 0, self.buffer.shape, (1,))

    def _changed(self, bits: torch.Tensor) -> torch.Tensor:
        """Over the whole allocation's bits: True where a canary changed (the view's own elements are never)."""
        changed = bits != self.canary
        changed.as_strided(self.view.shape, self.view.stride(), self.lead).fill_(False)
        return changed

    def intact(self, t: torch.Tensor | None = None) -> bool | torch.Tensor:
        """Whether every canary of this allocation (or of the copy ``t`` lies in) is unchanged: a bool, or on a GPU
        a 0-dim bool tensor that comparison.read_flags reads back with the call's other conditions."""
        bits = self._storage(t).view(self.bits_dtype)
        if self.view.is_contiguous():  # no gaps: the canaries are the two ends
            end = self.lead + span(self.view)
            changed = (bits[: self.lead] != self.canary).any() | (bits[end:] != self.canary).any()
        else:
            changed = self._changed(bits).any()
        return not bool(changed) if bits.device.type == "cpu" else ~changed

    def written(self, t: torch.Tensor | None = None, label: str = "") -> str | None:
        """Where a canary of this allocation (or of the copy ``t`` lies in) changed, or None. The details of a
        breach: a call's zones are first read all at once through :meth:`intact`."""
        storage = self._storage(t)
        bits = storage.view(self.bits_dtype)
        where = self._changed(bits).nonzero().flatten()
        if where.numel() == 0:
            return None
        first = int(where[0])
        value = int(bits[first]) & ((1 << (8 * storage.element_size())) - 1)
        digits = 2 * storage.element_size()
        return (f"{label or self.name}: {where.numel()} of {int(bits.numel()) - self.view.numel()} guard elements "
                f"written; the first {self.locate(first - self.lead)} (it holds 0x{value:0{digits}X} where the canary "
                f"0x{self.canary:0{digits}X} was)")

    def locate(self, rel: int) -> str:
        """Where element ``rel`` of the allocation, counted from the view's first element, lies relative to it."""
        view = self.view
        extent = span(view)
        rows = view.shape[0] if view.dim() >= 2 else None
        row_stride = view.stride(-2) if view.dim() >= 2 else None
        if rel < 0:
            return f"{-rel} element(s) before the view's first element"
        if rel >= extent:
            past = rel - extent + 1
            text = f"{past} element(s) past the view's last element"
            if rows is not None and view.dim() == 2 and row_stride and view.stride(-1) == 1:
                row, column = divmod(rel, row_stride)
                text += f", at row {row}, column {column} of a view of {rows} rows (rows from 0)"
            return text
        if view.dim() >= 2 and row_stride and view.stride(-1) == 1:
            row, column = divmod(rel, row_stride)
            return (f"in the gap after row {row} of the view, column {column} of a row stride of {row_stride} "
                    f"(its rows hold {view.shape[-1]} columns)")
        return f"at element {rel} of the view's span, which holds no element of the view"


def located(watched: Sequence[tuple[Zone, torch.Tensor | None, str]], intact: Sequence[bool]) -> list[str]:
    """Where each watched zone whose canaries were read as changed (``intact``, in the same order) was written:
    only such a zone is looked at again."""
    return [w for (z, t, label), ok in zip(watched, intact, strict=True) if not ok and (w := z.written(t, label))]


_TEMPLATES: dict[tuple[torch.dtype, str], torch.Tensor] = {}


def canaries(dtype: torch.dtype, device: torch.device, n: int) -> torch.Tensor:
    """``n`` canaries of ``dtype`` on ``device`` (a view of one cached run: most calls are small, and a few torch
    ops more per call would cost more than the kernel)."""
    key = (dtype, str(device))
    run = _TEMPLATES.get(key)
    if run is None or run.numel() < n:
        run = torch.empty(max(n, 1 << 12), dtype=dtype, device=device)
        run.view(CANARIES[dtype][0]).fill_(CANARIES[dtype][1])
        _TEMPLATES[key] = run
    return run[:n]


def guard(t: torch.Tensor, name: str) -> Zone:
    """``t``'s values in a guarded allocation, with ``t``'s sizes, strides and alignment."""
    bits_dtype, canary = CANARIES[t.dtype]
    size = t.element_size()
    align = ALIGNMENT[t.device.type]
    row = t.shape[-1] if t.dim() else 1
    guard_bytes = -(-max(MIN_GUARD, row) * size // align) * align
    lead = (guard_bytes + t.data_ptr() % align) // size
    extent = span(t)
    tail = guard_bytes // size
    if t.is_contiguous():  # one op: the canaries, the values, the canaries
        with torch.no_grad():
            buffer = torch.cat([canaries(t.dtype, t.device, lead), t.detach().reshape(-1),
                                canaries(t.dtype, t.device, tail)])
        return Zone(name, t, buffer, buffer.as_strided(t.shape, t.stride(), lead), lead)
    buffer = torch.empty(lead + extent + tail, dtype=t.dtype, device=t.device)
    buffer.view(bits_dtype).fill_(canary)
    view = buffer.as_strided(t.shape, t.stride(), lead)
    with torch.no_grad():
        view.copy_(t)
    return Zone(name, t, buffer, view, lead)


class GuardedCall:
    """The arguments of one backend call, each tensor in a guarded allocation; after the call, the guard zones'
    breaches (:meth:`breaches`) and the outputs as the caller should see them (:meth:`release`)."""

    def __init__(self, method: str, args: Sequence[Any]) -> None:
        names = ARGUMENT_NAMES.get(method, ())
        self.zones: list[Zone] = []
        self.args: list[Any] = []
        for i, a in enumerate(args):
            if guardable(a):
                zone = guard(a, names[i] if i < len(names) else f"argument {i + 1}")
                self.zones.append(zone)
                self.args.append(zone.view)
            else:
                self.args.append(a)

    def watched(self, out: Any) -> list[tuple[Zone, torch.Tensor | None, str]]:
        """The allocations whose canaries the call must have left alone, each with its label: the arguments' guarded
        ones, and outputs that are copies of an argument's whole allocation (an in-place fused add's x and residual,
        as the backend adapter passes them)."""
        watched: list[tuple[Zone, torch.Tensor | None, str]] = [(z, None, "") for z in self.zones]
        unmatched = list(self.zones)  # outputs come in the order of the arguments they copy (x, then residual)
        for o in out if isinstance(out, tuple | list) else (out,):
            if not isinstance(o, torch.Tensor):
                continue
            for z in unmatched:
                if o.untyped_storage().data_ptr() != z.buffer.untyped_storage().data_ptr() and z.lays_out(o):
                    unmatched.remove(z)
                    watched.append((z, o, f"{z.name} (written in place)"))
                    break
        return watched

    def breaches(self, out: Any) -> list[str]:
        """Every guard zone of :meth:`watched` with a changed canary, the canaries of all of them read back at once."""
        watched = self.watched(out)
        return located(watched, read_flags([z.intact(t) for z, t, _ in watched]))

    def release(self, out: Any, kept: Sequence[bool] | None = None) -> Any:
        """Copy what the call wrote into each view back into the caller's tensor, and return ``out`` with any output
        that is one of the guarded views replaced by the same view of the caller's tensor (so aliasing shows).
        ``kept``: whether each view still holds its original's bits, where the caller read that already."""
        if kept is None:
            kept = read_flags([same_bits_flag(z.view, z.original) for z in self.zones])
        for z, same in zip(self.zones, kept, strict=True):
            if not same:
                try:
                    with torch.no_grad():
                        z.original.copy_(z.view)
                except RuntimeError:
                    pass  # an inference tensor outside inference mode: the breach shows in the outputs instead
        if isinstance(out, tuple):
            return tuple(self._rebased(o) for o in out)
        if isinstance(out, list):
            return [self._rebased(o) for o in out]
        return self._rebased(out)

    def _rebased(self, o: Any) -> Any:
        if not isinstance(o, torch.Tensor):
            return o
        for z in self.zones:
            if o.untyped_storage().data_ptr() != z.buffer.untyped_storage().data_ptr():
                continue
            offset = z.original.storage_offset() + o.storage_offset() - z.lead
            room = z.original.untyped_storage().nbytes() // z.original.element_size()
            if o.dtype == z.original.dtype and offset >= 0 and offset + span(o) <= room:
                return o.new_empty(0).set_(z.original.untyped_storage(), offset, o.shape, o.stride())
        return o
