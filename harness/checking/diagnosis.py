"""The diagnosis of a bitwise breach (an Axis-A variant, a first call, an execution mode, a parity pair): where the
bits start to change, at which stage of the arithmetic, and the reduction order the kernel follows on each side.

It runs only on a breach, once per (backend, device, dtype, rule, entry point) of a run, and costs a capped number
of calls into the backend:

1. **The threshold.** The failing variant's parameter is moved between the two settings the check compared, with the
   rows that differed (they are the ones whose rounding shows the change) at the front: batch size and pad rows by
   bisection, the slice's address by alignment, the position by period, heads by bisection, layouts and modes one
   by one, a repeat by counting distinct results. Then which dims and dtypes show it.
2. **The stage** (checking/stage.py): per-row scale, elementwise (with its rounding class), columns, the residual of
   a fused add, an fp8 scale.
3. **The reduction order** (checking/fingerprint.py) at the two settings around the threshold (or the two backends of
   a parity pair), with the first level where the trees differ.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ...contract.families import fp8, parity
from ..running.entry_points import ENTRY_POINTS
from ..running.modes import deterministic_algorithms, intra_op_threads
from . import fingerprint as fp
from .comparison import bits
from .stage import Stage, stage_of

# The rules whose breaches carry a diagnosis: every Axis-A rule and the parity gate's.
DIAGNOSED_PREFIXES = ("axis_a.", parity.BITWISE.id)
PROBE_ROWS = 8  # rows that differed, carried into every probe batch
MAX_ELEMENTS = 1 << 24  # a probe batch's elements: the bisection's largest batch is cut here
# Leaves of a breach's fingerprint (15 pairs, 60 triplets, each under FINGERPRINT_ANCHORS anchors): enough to show
# the first levels and the top of a tree; the fingerprint command probes more.
FINGERPRINT_WINDOW = 6
FINGERPRINT_ANCHORS = 2
SHOW_DIMS = (128, 4096)
SHOW_DTYPES = ("float32", "bfloat16", "float16")


def diagnosed(rule: str) -> bool:
    return rule.startswith(DIAGNOSED_PREFIXES)


@dataclass
class Threshold:
    """Where the bits start to change: the parameter moved, the kind of dependence, its value and the words."""

    parameter: str
    kind: str  # threshold, alignment, period, every, nondeterministic, mode, first call, not bisected
    value: Any = None
    text: str = ""
    shows: str = ""

    def to_dict(self) -> dict:
        return {"parameter": self.parameter, "kind": self.kind, "value": self.value, "text": self.text,
                "shows": self.shows}


@dataclass
class Setting:
    """One side of a comparison, as a fingerprint replays it: a label and how the probes are called there."""

    label: str
    rows_per_call: int | None = None
    offset: int = 0
    mode: Callable[[], Any] | None = None
    backend: Any = None  # another backend (a parity pair's other side)


@dataclass
class Diagnosis:
    """The three parts, and the calls they cost."""

    rule: str
    threshold: Threshold
    stage: Stage
    fingerprint: list[dict] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    calls: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"threshold": self.threshold.to_dict(), "stage": self.stage.to_dict(),
                "fingerprint": {"settings": self.settings, "reductions": self.fingerprint},
                "calls": self.calls, "notes": self.notes}

    def text(self) -> str:
        lines = [f"diagnosis: threshold ({self.threshold.parameter}): {self.threshold.text}"]
        if self.threshold.shows:
            lines.append(f"  shows at: {self.threshold.shows}")
        lines.append(f"  stage: {self.stage.text}")
        for f in self.fingerprint:
            lines.append(f"  order ({f['reduction']}): {f['text']}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def summary(d: dict) -> str:
    """One line of a diagnosis's dict form, for tables: threshold, stage, first differing level."""
    t, s = d["threshold"], d["stage"]
    orders = [f"{f['reduction']}: {f['short']}" for f in d["fingerprint"]["reductions"] if f.get("short")]
    return "; ".join([t["text"], s["kind"] + (f" ({s['rounding_class']})" if s.get("rounding_class") else ""),
                      *orders])


# --- calling the backend ---------------------------------------------------------------------------------------


@dataclass
class Caller:
    """One entry point of one backend on one device, called raw (outside the checks: a diagnosis records nothing),
    counting its calls; ``output`` is the index of the output that differed."""

    backend: Any
    device: torch.device
    entry: str
    output: int = 0
    calls: int = 0

    def __call__(self, rows: Sequence[torch.Tensor], w: torch.Tensor | None, eps: float) -> torch.Tensor:
        self.calls += 1
        args = ENTRY_POINTS[self.entry].args(rows, w, eps)
        out = getattr(self.backend, self.entry)(*args)
        outs = tuple(out) if isinstance(out, tuple | list) else (out,)
        return outs[self.output].detach().clone()


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(bits(a.cpu()), bits(b.cpu())))


def _rows_of(t: torch.Tensor, dim: int) -> torch.Tensor:
    return t.reshape(-1, dim)


def _cycled(rows: torch.Tensor, first: torch.Tensor, count: int) -> torch.Tensor:
    """``count`` rows: the rows ``first`` (indices into ``rows``) at the front, then the others, cycled."""
    order = [*first.tolist(), *[i for i in range(rows.shape[0]) if i not in set(first.tolist())]]
    index = torch.tensor([order[k % len(order)] for k in range(count)], dtype=torch.long, device=rows.device)
    return rows.index_select(0, index)


# --- 1. the threshold, per variant ------------------------------------------------------------------------------


@dataclass
class Probe:
    """What a threshold explorer needs: the caller, the case's inputs and the rows that differed (batch indices)."""

    call: Caller
    case: Any
    rows: list[torch.Tensor]
    weight: torch.Tensor | None
    sensitive: torch.Tensor  # batch row indices whose bits differed
    what: str

    @property
    def eps(self) -> float:
        return self.case.batch.eps

    @property
    def dim(self) -> int:
        return self.case.batch.dim

    def batch_of(self, count: int, keep: int) -> list[torch.Tensor]:
        """Row inputs of ``count`` rows, the first ``keep`` sensitive rows at the front."""
        first = self.sensitive[:keep]
        return [_cycled(_rows_of(t, self.dim), first, count) for t in self.rows]

    def front(self, count: int, keep: int) -> torch.Tensor:
        return _rows_of(self.call(self.batch_of(count, keep), self.weight, self.eps), self.dim)[:keep]


def _bisect(changed: Callable[[int], bool], lo: int, hi: int) -> int:
    """The smallest n in (lo, hi] with ``changed(n)``, given not changed(lo) and changed(hi)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if changed(mid):
            hi = mid
        else:
            lo = mid
    return hi


def rows_threshold(p: Probe, small: int, large: int, *, parameter: str = "rows",
                   counted: Callable[[int], int] = lambda n: n) -> Threshold:
    """Bisect the batch size between ``small`` rows (one setting) and ``large`` (the other)."""
    large = min(large, max(small + 1, MAX_ELEMENTS // max(p.dim, 1)))
    keep = max(1, min(small, len(p.sensitive), PROBE_ROWS))
    base = p.front(small, keep)
    if _same(p.front(large, keep), base):
        return Threshold(parameter, "not bisected", None,
                         f"the rows that differed gave the same bits at {small} and {large} rows when called again")

    def changed(n: int) -> bool:
        return not _same(p.front(n, keep), base)

    first = _bisect(changed, small, large)
    one = 1 if small > 1 and _same(p.front(1, 1), base[:1]) else small
    b = p.case.batch
    low = f"{counted(one)}–{counted(first - 1)}" if counted(first - 1) > counted(one) else f"{counted(one)}"
    text = (f"equal for {low} {parameter} at dim {b.dim}, {b.dtype}; differ from {counted(first)} {parameter} "
            f"(bisected between {counted(small)} and {counted(large)})")
    return Threshold(parameter, "threshold", counted(first), text)


def _sensitive(actual: torch.Tensor, expected: torch.Tensor, dim: int) -> torch.Tensor:
    differ = (bits(_rows_of(actual, dim).cpu()) != bits(_rows_of(expected, dim).cpu())).any(dim=-1)
    return differ.nonzero().flatten()


def explore_batch_size(p: Probe) -> tuple[Threshold, tuple[Setting, Setting]]:
    c = p.case
    p.sensitive = p.sensitive + c.start
    t = rows_threshold(p, c.length, c.batch.rows)
    return t, _row_settings(t, c.length, c.batch.rows)


def _row_settings(t: Threshold, small: int, large: int) -> tuple[Setting, Setting]:
    if t.kind == "threshold":
        return Setting(f"{t.value - 1} rows", rows_per_call=t.value - 1), Setting(f"{t.value} rows",
                                                                                  rows_per_call=t.value)
    return Setting(f"{small} rows", rows_per_call=small), Setting(f"{large} rows", rows_per_call=large)


def explore_slice(p: Probe) -> tuple[Threshold, tuple[Setting, Setting]]:
    """A slice differs from the whole batch through the batch size (the slice is fewer rows) or the address its
    rows start at (a view starts wherever the slice does)."""
    c = p.case
    p.sensitive = p.sensitive + c.start
    keep = max(1, min(c.length, len(p.sensitive), PROBE_ROWS))
    if not _same(p.front(c.length, keep), p.front(c.batch.rows, keep)):
        t = rows_threshold(p, c.length, c.batch.rows)
        return t, _row_settings(t, c.length, c.batch.rows)
    return explore_alignment(p, keep)


def explore_alignment(p: Probe, keep: int) -> tuple[Threshold, tuple[Setting, Setting]]:
    rows = p.batch_of(keep, keep)
    size = rows[0].element_size()

    def at(offset: int) -> torch.Tensor:
        placed = []
        for t in rows:
            buffer = torch.zeros(t.numel() + offset, dtype=t.dtype, device=t.device)
            view = buffer[offset:].view(t.shape)
            view.copy_(t)
            placed.append(view)
        return _rows_of(p.call(placed, p.weight, p.eps), p.dim)

    base = at(0)
    offsets = [k for k in (1, 2, 4, 8, 16, 32) if k * size <= 128]
    equal = {k: _same(at(k), base) for k in offsets}
    if all(equal.values()):
        return (Threshold("address", "not bisected", None,
                          "the rows gave the same bits at every address tried (element offsets "
                          f"{', '.join(map(str, offsets))})"), (Setting("aligned"), Setting("aligned")))
    aligned = min((k * size for k, same in equal.items() if same), default=None)
    if aligned is None:
        text = f"differ at every element offset tried ({', '.join(map(str, offsets))}) from a 64-byte aligned address"
        return Threshold("address", "every", None, text), (Setting("offset 0"), Setting("offset 1", offset=1))
    misaligned = min(k for k, same in equal.items() if not same)
    text = (f"equal where the rows start at a multiple of {aligned} bytes; differ where they do not (from an element "
            f"offset of {misaligned}, {misaligned * size} bytes, at dim {p.dim}, {p.case.batch.dtype})")
    return (Threshold("address", "alignment", aligned, text),
            (Setting(f"{aligned}-byte aligned"), Setting(f"offset {misaligned * size} bytes", offset=misaligned)))


def explore_padding(p: Probe) -> tuple[Threshold, tuple[Setting, Setting]]:
    """Pad rows after the real ones, bisected by count: a threshold in the total rows, or a change with any."""
    c = p.case
    n = c.batch.rows
    pads = c.before + c.after
    from ..drawing.cases import make_pad

    keep = max(1, min(n, len(p.sensitive), PROBE_ROWS))
    real = p.batch_of(keep, keep)

    def padded(count: int) -> torch.Tensor:
        rows = [torch.cat([t, make_pad(c.content, count, p.dim, str(t.dtype).removeprefix("torch."),
                                       torch.Generator().manual_seed(7)).to(t.device)]) for t in real]
        return _rows_of(p.call(rows, p.weight, p.eps), p.dim)[:keep]

    base = padded(0)
    if _same(padded(pads), base):
        return (Threshold("pad rows", "not bisected", None,
                          f"the rows that differed gave the same bits with 0 and {pads} pad rows when called again"),
                (Setting(f"{keep} rows"), Setting(f"{keep + pads} rows")))
    if not _same(padded(1), base):
        text = (f"differ with any pad rows (one row of {c.content} already): a real row's bits depend on the other "
                "rows' values, at every batch size")
        return Threshold("pad rows", "every", 1, text), (Setting(f"{keep} rows", rows_per_call=keep),
                                                         Setting(f"{keep + 1} rows", rows_per_call=keep + 1))
    first = _bisect(lambda k: not _same(padded(k), base), 1, pads)
    text = (f"equal for {keep}–{keep + first - 1} rows in all at dim {p.dim}, {c.batch.dtype}; differ from "
            f"{keep + first} rows ({first} pad rows of {c.content})")
    return (Threshold("rows", "threshold", keep + first, text),
            (Setting(f"{keep + first - 1} rows", rows_per_call=keep + first - 1),
             Setting(f"{keep + first} rows", rows_per_call=keep + first)))


def explore_position(p: Probe) -> tuple[Threshold, tuple[Setting, Setting]]:
    """The same row at every index of one batch: which indices give other bits (one call). The row is one that
    differed (row 0 may round alike at every index)."""
    c = p.case
    count = min(c.batch.rows, 64)
    first = int(p.sensitive[0])
    row = [_rows_of(t, p.dim)[first: first + 1].expand(count, p.dim).contiguous() for t in p.rows]
    out = bits(_rows_of(p.call(row, p.weight, p.eps), p.dim).cpu())
    same = [bool(torch.equal(out[i], out[0])) for i in range(count)]
    if all(same):
        return Threshold("position", "not bisected", None, "one row at every index gave the same bits"), (
            Setting("index 0"), Setting("index 0"))
    for period in (2, 4, 8, 16, 32):
        if period < count and all(same[i] == same[i % period] for i in range(count)):
            odd = [i for i in range(period) if not same[i]]
            text = (f"equal at indices {sorted(i for i in range(period) if same[i])} mod {period}, differ at "
                    f"{odd} mod {period} (a batch of {count} copies of one row, dim {p.dim}, {c.batch.dtype})")
            return Threshold("position", "period", period, text), (Setting("index 0"), Setting(f"index {odd[0]}"))
    first = same.index(False)
    return (Threshold("position", "threshold", first, f"equal at indices 0–{first - 1}; differ from index {first}"),
            (Setting("index 0"), Setting(f"index {first}")))


def explore_leading_dims(p: Probe) -> tuple[Threshold, tuple[Setting, Setting]]:
    """[T, H, dim] views against flat rows, by head count H (two tokens a view)."""
    c = p.case
    budget = max(1, MAX_ELEMENTS // max(p.dim, 1))
    heads = [h for h in (1, 2, 4, 8, 16, 32, 64, 128) if 2 * h <= budget]

    def differs(h: int) -> bool:
        rows = p.batch_of(2 * h, min(len(p.sensitive), 2 * h, PROBE_ROWS) or 1)
        flat = _rows_of(p.call(rows, p.weight, p.eps), p.dim)
        shaped = _rows_of(p.call([t.view(2, h, p.dim) for t in rows], p.weight, p.eps), p.dim)
        return not _same(flat, shaped)

    results = {h: differs(h) for h in heads}
    if results.get(1):
        return (Threshold("view", "mode", "3-D", f"every 3-D view differs from the flat rows ([2, 1, {p.dim}] "
                          f"already): the rank of the input picks the path, at dim {p.dim}, {c.batch.dtype}"),
                (Setting("flat"), Setting("3-D")))
    over = [h for h in heads if results[h]]
    if not over:
        return Threshold("heads", "not bisected", None,
                         f"views of 1–{heads[-1]} heads gave the flat rows' bits when called again"), (
            Setting("flat"), Setting("3-D"))
    below = max(h for h in heads if h < over[0])
    first = _bisect(differs, below, over[0])
    return (Threshold("heads", "threshold", first, f"equal for views of 1–{first - 1} heads at dim {p.dim}, "
                      f"{c.batch.dtype}; differ from {first} heads"), (Setting("flat"), Setting(f"{first} heads")))


def explore_strided(p: Probe) -> tuple[Threshold, tuple[Setting, Setting]]:
    """Each layout of the rows and of the weight, against contiguous ones."""
    from ..drawing.cases import lay_out_weight

    keep = max(1, min(len(p.sensitive), PROBE_ROWS))
    rows = p.batch_of(max(keep + keep % 2, 2), keep)
    base = _rows_of(p.call(rows, p.weight, p.eps), p.dim)
    layouts: dict[str, Callable[[], torch.Tensor]] = {
        "rows inside a wider buffer": lambda: p.call([_wider(t) for t in rows], p.weight, p.eps),
        "column-major rows": lambda: p.call([t.t().contiguous().t() for t in rows], p.weight, p.eps),
        "3-D column-major rows": lambda: p.call([_transposed_3d(t) for t in rows], p.weight, p.eps)}
    if p.weight is not None:
        w = p.weight.contiguous()
        layouts["a strided weight"] = lambda: p.call(rows, lay_out_weight(w, "strided"), p.eps)
        layouts["a weight 2 bytes past alignment"] = lambda: p.call(rows, _misaligned(w, 1), p.eps)
        layouts["a weight 16 bytes past alignment"] = lambda: p.call(rows, _misaligned(w, 16 // w.element_size()),
                                                                      p.eps)
    differ = [name for name, run in layouts.items() if not _same(_rows_of(run(), p.dim), base)]
    if not differ:
        return Threshold("layout", "not bisected", None, "every layout gave the contiguous bits when called again"), (
            Setting("contiguous"), Setting("contiguous"))
    equal = [name for name in layouts if name not in differ]
    text = f"differ with {', '.join(differ)}" + (f"; equal with {', '.join(equal)}" if equal else "")
    if differ == ["a weight 2 bytes past alignment"]:
        return (Threshold("weight address", "alignment", 16, "equal with a weight at a 16-byte aligned address "
                          f"(contiguous, strided, 16 bytes in); differ with one 2 bytes past it ({text})"),
                (Setting("contiguous"), Setting(differ[0])))
    return Threshold("layout", "mode", ", ".join(differ), text), (Setting("contiguous"), Setting(differ[0]))


def _transposed_3d(t: torch.Tensor) -> torch.Tensor:
    """Rows ``t`` as [2, n/2, dim] (n even; else [1, n, dim]) with a strided last dim: a [B, dim, S] activation
    transposed."""
    batches = 2 if t.shape[0] % 2 == 0 else 1
    held = torch.empty(batches, t.shape[1], t.shape[0] // batches, dtype=t.dtype, device=t.device)
    view = held.transpose(1, 2)
    view.copy_(t.view(batches, -1, t.shape[1]))
    return view


def _wider(t: torch.Tensor) -> torch.Tensor:
    buffer = torch.zeros(t.shape[0], t.shape[1] + 1, dtype=t.dtype, device=t.device)
    buffer[:, : t.shape[1]] = t
    return buffer[:, : t.shape[1]]


def _misaligned(w: torch.Tensor, offset: int) -> torch.Tensor:
    buffer = torch.zeros(w.numel() + offset, dtype=w.dtype, device=w.device)
    buffer[offset:] = w
    return buffer[offset:]


def explore_repeat(p: Probe) -> tuple[Threshold, tuple[Setting, Setting]]:
    keep = max(1, min(len(p.sensitive), PROBE_ROWS))
    rows = p.batch_of(p.case.batch.rows, keep)
    seen: list[torch.Tensor] = []
    for _ in range(8):
        out = bits(_rows_of(p.call(rows, p.weight, p.eps), p.dim).cpu())
        if not any(torch.equal(out, s) for s in seen):
            seen.append(out)
    text = (f"nondeterministic: the same call gave {len(seen)} different results in 8 calls, at every size"
            if len(seen) > 1 else "the same call gave one result in 8 calls here: the state a call leaves decides")
    return Threshold("repeat", "nondeterministic" if len(seen) > 1 else "not bisected", len(seen), text), (
        Setting("call 1"), Setting("call 2"))


_MODES: dict[str, Callable[[], Any]] = {
    "torch.no_grad()": torch.no_grad, "torch.inference_mode()": torch.inference_mode,
    "torch.use_deterministic_algorithms(True)": deterministic_algorithms,
}


def explore_mode(p: Probe) -> tuple[Threshold, tuple[Setting, Setting]]:
    """Grad modes and execution modes: which of them gives other bits (read from the check's words, then each
    cheap mode tried again)."""
    what = p.what
    named = next((label for label in ("inputs that require grad", "x requiring grad and the weight frozen (LoRA)",
                                      "the weight requiring grad and x not", "the weight an nn.Parameter",
                                      "torch.no_grad()", "torch.inference_mode()", "torch.compile",
                                      "torch.use_deterministic_algorithms(True)",
                                      "CUDA-graph capture and replay", "intra-op threads") if label in what), None)
    if named is None:
        return Threshold("mode", "not bisected", None, f"no mode named in: {what}"), (Setting("eager"),
                                                                                     Setting("eager"))
    if named == "intra-op threads":
        return explore_threads(p)
    mode = _MODES.get(named) or (_requires_grad_mode if "grad" in named or "Parameter" in named else None)
    text = f"differ under {named} (eager calls give the other bits) at dim {p.dim}, {p.case.batch.dtype}"
    return Threshold("mode", "mode", named, text), (Setting("eager"), Setting(named, mode=mode))


def _requires_grad_mode() -> Any:
    return torch.enable_grad()


def explore_threads(p: Probe) -> tuple[Threshold, tuple[Setting, Setting]]:
    keep = max(1, min(len(p.sensitive), PROBE_ROWS))
    rows = p.batch_of(max(keep, 1), keep)
    before = torch.get_num_threads()
    outs = {}
    for n in sorted({1, 2, 4, before}):
        with intra_op_threads(n):
            outs[n] = bits(_rows_of(p.call(rows, p.weight, p.eps), p.dim).cpu())
    groups: dict[int, list[int]] = {}
    for n, out in outs.items():
        key = next((k for k, o in outs.items() if torch.equal(o, out)), n)
        groups.setdefault(key, []).append(n)
    if len(groups) == 1:
        return Threshold("threads", "not bisected", None, "every thread count gave the same bits"), (
            Setting("1 thread"), Setting(f"{before} threads"))
    text = "; ".join(f"threads {', '.join(map(str, ns))} give one result" for ns in groups.values())
    first_other = min(n for ns in list(groups.values())[1:] for n in ns)
    return Threshold("threads", "threshold", first_other, f"{text} (differ from {first_other} threads)"), (
        Setting("1 thread"), Setting(f"{first_other} threads", mode=lambda: intra_op_threads(first_other)))


def explore_first_call(p: Probe) -> tuple[Threshold, tuple[Setting, Setting]]:
    b = p.case.batch
    second = "its second call" in p.what
    text = (f"only the first call for (dim {b.dim}, {b.dtype}, {p.case.entry}) in a fresh process differs"
            + ("; its second call gives the warm bits" if second else " from the warm process's calls")
            + ": a cache (autotuner, JIT) keyed per shape, not a row count")
    return Threshold("call", "first call", 1, text), (Setting("first call"), Setting("later calls"))


def explore_fp8(call: Caller, case: Any) -> tuple[Threshold, tuple[Setting, Setting]]:
    """A dynamic fp8 entry point's scale: is a row's scale its own, or shared with its neighbours? One loud row
    (eight times the others) at index 0 of 16 copies of a quiet one: the rows whose scale follows the loud row's
    share it."""
    b = case.batch
    if not call.entry.endswith("_dynamic"):
        return Threshold("rows", "not bisected", None, f"{call.entry} takes its scale; only a dynamic scale is "
                         "probed"), (Setting("a"), Setting("b"))
    x = b.x(rows=1).to(call.device)
    rows = torch.cat([x * 8, x.expand(15, -1)])
    w = b.w().to(call.device)
    args: list[Any] = [rows]
    if call.entry.startswith("fused_add"):
        args.append(torch.zeros_like(rows, dtype=getattr(torch, b.residual_dtype)))
    call.calls += 1
    scale = getattr(call.backend, call.entry)(*args, w, b.eps)[1].reshape(-1).float().cpu()
    shared = [i for i in range(1, 16) if scale[i] == scale[0]]
    if not shared:
        return Threshold("rows", "not bisected", None, "each row's scale is its own here (16 rows, one loud)"), (
            Setting("a"), Setting("b"))
    block = max(shared) + 1
    text = (f"rows 0–{block - 1} share the loud row 0's scale, rows {block}–15 keep their own: the scale is the "
            f"largest |y| over blocks of {block} rows, so a row's fp8 bits change with its neighbours and where the "
            "batch starts")
    return Threshold("rows", "period", block, text), (Setting("a"), Setting("b"))


EXPLORERS: dict[str, Callable[[Probe], tuple[Threshold, tuple[Setting, Setting]]]] = {
    "BatchSizeCase": explore_batch_size, "SliceCase": explore_slice, "PaddingCase": explore_padding,
    "PositionCase": explore_position, "LeadingDimsCase": explore_leading_dims, "StridedCase": explore_strided,
    "RepeatCase": explore_repeat, "GradModeCase": explore_mode, "ExecutionModeCase": explore_mode,
    "FirstCallCase": explore_first_call,
}


# --- which dims and dtypes show it -----------------------------------------------------------------------------


_SHOWN: dict[tuple[Any, ...], str] = {}  # shows_at's answers in this process


def shows_at(call: Caller, case: Any, threshold: Threshold, dtypes: Sequence[str]) -> str:
    """:func:`_shows_at`, once per (backend, device, entry point, threshold, dims, dtypes) in a process."""
    key = (getattr(call.backend, "name", id(call.backend)), str(call.device), call.entry, threshold.value,
           case.batch.dim, tuple(dtypes))
    if key not in _SHOWN:
        _SHOWN[key] = _shows_at(call, case, threshold, dtypes)
    return _SHOWN[key]


def _shows_at(call: Caller, case: Any, threshold: Threshold, dtypes: Sequence[str]) -> str:
    """For a row threshold, the Axis-A check at the threshold at the target dims and the backend's dtypes: rows
    [0:t-1] alone against the same rows in a batch of t (fp32 shows any order change; 16-bit dtypes only where a
    row's rounding does)."""
    if threshold.kind != "threshold" or threshold.parameter != "rows":
        return ""
    t = int(threshold.value)
    b = case.batch
    found = []
    for dim in sorted({*SHOW_DIMS, b.dim}):
        if t * dim > MAX_ELEMENTS:
            found.append(f"dim {dim}: not tried ({t} rows exceed the probe budget)")
            continue
        hits = []
        for dtype in dtypes:
            batch = dataclasses.replace(b, dim=dim, rows=t, dtype=dtype, weight_dtype="", residual_dtype="",
                                        values="normal")
            rows, w = ENTRY_POINTS[case.entry].inputs(batch, call.device)
            try:
                whole = _rows_of(call(rows, w, b.eps), dim)
                alone = _rows_of(call([r[: t - 1].clone() for r in rows], w, b.eps), dim)
            except Exception as exc:
                hits.append(f"{dtype} raised {type(exc).__name__}")
                continue
            hits.append(f"{dtype} {'differs' if not _same(alone, whole[: t - 1]) else 'equal'}")
        found.append(f"dim {dim}: {', '.join(hits)}")
    return "; ".join(found)


# --- 3. the fingerprint at two settings --------------------------------------------------------------------------


def _prober(backend: Any, device: torch.device, dtype: str, setting: Setting) -> fp.Prober:
    target = setting.backend or backend
    torch_dtype = getattr(torch, dtype)
    declared = getattr(target, "has_forward_fp32", None)
    has_fp32 = bool(declared) if declared is not None else callable(getattr(target, "forward_fp32", None))
    # Not asked of the backend (its probe imports torch's compiler on a first call, seconds of a breach's budget):
    # a backend with no backward says so when the backward probe finds no gradient.
    backward = True
    return fp.Prober(target.forward, target.forward_fp32 if has_fp32 else None, device, torch_dtype,
                     backward=backward, rows_per_call=setting.rows_per_call, offset=setting.offset,
                     mode=setting.mode)


# Fingerprints already taken in this process, by (backend, device, dtype, dim, settings): a kernel that breaks
# several variants at one threshold is probed once, not once per failing test.
_TAKEN: dict[tuple[Any, ...], list[dict]] = {}


def fingerprints(backend: Any, device: torch.device, dtype: str, dim: int, settings: tuple[Setting, Setting],
                 *, window: int = FINGERPRINT_WINDOW, backward: bool = True) -> tuple[list[dict], int]:
    """The revealed trees of each reduction at both settings, side by side, with the first level where they differ;
    and the calls made (none where the same fingerprint was taken before in this process)."""
    key = (getattr(backend, "name", id(backend)), str(device), dtype, dim, window, backward,
           *((s.label, s.rows_per_call, s.offset, getattr(s.backend, "name", None)) for s in settings))
    if key in _TAKEN:
        return _TAKEN[key], 0
    found, calls = _fingerprints(backend, device, dtype, dim, settings, window=window, backward=backward)
    _TAKEN[key] = found
    return found, calls


def _fingerprints(backend: Any, device: torch.device, dtype: str, dim: int, settings: tuple[Setting, Setting],
                  *, window: int, backward: bool) -> tuple[list[dict], int]:
    leaves = fp.default_window(dim, window)
    calls = 0
    out = []
    # dw's leaves are rows: one window for both settings, inside the smaller batch (a setting without a batch size
    # probes a batch of ``window`` rows)
    rows = min(s.rows_per_call or window for s in settings)
    row_leaves = fp.default_window(max(rows, 2), window) if rows >= 2 else []
    reductions: list[tuple[str, Callable[[fp.Prober], fp.Revealed]]] = [
        ("forward sum of squares", lambda pr: fp.reveal_forward(pr, dim, leaves, anchor_count=FINGERPRINT_ANCHORS))]
    if backward:
        reductions.append(("backward row dot", lambda pr: fp.reveal_dot(pr, dim, leaves)))
        reductions.append(("dw over rows", lambda pr: fp.reveal_dw(pr, pr.rows_per_call or window, dim, row_leaves)))
    for name, reveal in reductions:
        sides = []
        for s in settings:
            prober = _prober(backend, device, dtype, s)
            if name != "forward sum of squares" and not prober.backward:
                sides.append(fp.Revealed(name, dim, leaves, reason="no backward here"))
                continue
            sides.append(reveal(prober))
            calls += prober.calls
        out.append(compare(name, settings, sides))
    return out, calls


def compare(name: str, settings: Sequence[Setting], sides: Sequence[fp.Revealed]) -> dict:
    """Two revealed trees of one reduction, side by side."""
    a, b = sides
    entry: dict[str, Any] = {"reduction": name, "settings": [s.label for s in settings],
                             "trees": [r.to_dict() for r in sides], "first_difference": None}
    if a.tree is None or b.tree is None:
        reason = a.reason or b.reason
        entry["text"] = entry["short"] = f"not revealed: {reason}"
        return entry
    if a.window != b.window:
        entry["text"] = (f"{settings[0].label}: {fp.newick(a.tree)}; {settings[1].label}: {fp.newick(b.tree)} "
                         "(windows differ)")
        entry["short"] = "windows differ"
        return entry
    level = fp.first_difference(a.tree, b.tree)
    entry["first_difference"] = level
    if level is None:
        entry["text"] = f"the same tree at {settings[0].label} and {settings[1].label}: {fp.newick(a.tree)}"
        entry["short"] = "same tree"
    else:
        entry["text"] = (f"{settings[0].label}: {fp.newick(a.tree)}; {settings[1].label}: {fp.newick(b.tree)}; "
                         f"first differ at level {level}")
        entry["short"] = f"trees differ from level {level}"
    return entry


# --- the whole diagnosis -----------------------------------------------------------------------------------------


def diagnose(backend: Any, device: torch.device, case: Any, rule: str, *, actual: torch.Tensor,
             expected: torch.Tensor, what: str, output: str = "y", dtypes: Sequence[str] = ("float32",),
             other: Any = None, classes: dict[str, torch.Tensor] | None = None,
             fingerprint: bool = True, upstream: Mapping[str, Sequence[torch.Tensor]] | None = None) -> Diagnosis:
    """The diagnosis of one breach of ``rule`` by ``backend`` on ``case``: ``actual`` and ``expected`` are the two
    outputs the check compared (``output`` names them), ``what`` its words. ``other``: the other backend of a
    parity pair; ``upstream``: the call's outputs ``output`` is computed from, as (actual, expected) by name."""
    entry = getattr(case, "entry", "forward")
    if rule == fp8.AXIS_A_FP8.id:  # the fp8 suite calls its own entry points, named in the check's words
        entry, output = [*what.split(":", 1)[0].split(), "", ""][:2]
    names = ENTRY_POINTS[entry].outputs if entry in ENTRY_POINTS else ("y",)
    call = Caller(backend, device, entry, names.index(output) if output in names else 0)
    stage = stage_of(actual, expected, output=output, classes=classes, upstream=upstream)
    notes: list[str] = []
    batch = getattr(case, "batch", None)
    dim = batch.dim if batch is not None else actual.shape[-1]
    dtype = batch.dtype if batch is not None else str(actual.dtype).removeprefix("torch.")
    try:
        threshold, settings = _threshold(call, case, rule, actual, expected, what, other)
    except Exception as exc:  # the backend raised during the probes: said, and the rest still reported
        threshold, settings = Threshold("?", "not bisected", None, f"the probes raised {type(exc).__name__}: {exc}"), (
            Setting("a"), Setting("b"))
    if threshold.kind == "threshold" and threshold.parameter == "rows" and batch is not None \
            and entry in ("forward", "forward_fp32"):
        try:
            threshold.shows = shows_at(call, case, threshold, dtypes)
        except Exception as exc:
            notes.append(f"which dims show it was not found: {type(exc).__name__}: {exc}")
    d = Diagnosis(rule, threshold, stage, settings=[s.label for s in settings], notes=notes)
    if fingerprint and entry in ("forward", "forward_fp32") and threshold.kind not in ("first call",
                                                                                        "nondeterministic"):
        try:
            d.fingerprint, calls = fingerprints(backend, device, dtype, dim, settings)
            d.calls += calls
        except Exception as exc:
            notes.append(f"the fingerprint raised {type(exc).__name__}: {exc}")
    elif fingerprint:
        why = ("a first call cannot be probed again in this process" if threshold.kind == "first call" else
               "a nondeterministic order has no one tree" if threshold.kind == "nondeterministic" else
               f"the fingerprint probes forward's entry points; {entry} is not probed")
        notes.append(f"no fingerprint: {why}")
    d.calls += call.calls
    return d


def _threshold(call: Caller, case: Any, rule: str, actual: torch.Tensor, expected: torch.Tensor, what: str,
               other: Any) -> tuple[Threshold, tuple[Setting, Setting]]:
    if rule == parity.BITWISE.id:
        return _parity_threshold(call, case, other)
    if rule == fp8.AXIS_A_FP8.id:
        return explore_fp8(call, case)
    explore = EXPLORERS.get(type(case).__name__)
    if explore is None or getattr(case, "batch", None) is None:
        return Threshold("?", "not bisected", None, f"no parameter to bisect for {type(case).__name__}"), (
            Setting("a"), Setting("b"))
    rows, w = ENTRY_POINTS[call.entry].inputs(case.batch, call.device)
    probe = Probe(call, case, rows, w, _sensitive(actual, expected, case.batch.dim), what)
    if not len(probe.sensitive):
        probe.sensitive = torch.tensor([0])
    return explore(probe)


def _parity_threshold(call: Caller, case: Any, other: Any) -> tuple[Threshold, tuple[Setting, Setting]]:
    """A parity pair: do the two backends differ at every batch size, or from one on?"""
    b = case.batch
    sizes = [n for n in (1, 2, 16, 64, 257, 1024) if n * b.dim <= MAX_ELEMENTS]
    differ = []
    for n in sizes:
        batch = dataclasses.replace(b, rows=n)
        x, w = batch.x().to(call.device), batch.w().to(call.device)
        left = call([x], w, b.eps)
        right = Caller(other, call.device, call.entry)([x], w, b.eps) if other is not None else left
        call.calls += 1
        differ.append(not _same(left.cpu(), right.cpu()))
    settings = (Setting(getattr(call.backend, "name", "left")), Setting(getattr(other, "name", "right"),
                                                                          backend=other))
    if all(differ):
        text = (f"differ at every batch size tried ({', '.join(map(str, sizes))} rows) at dim {b.dim}, {b.dtype}: "
                "the two kernels compute differently whatever the batch")
        return Threshold("rows", "every", None, text), settings
    if not any(differ):
        return Threshold("rows", "not bisected", None, f"equal at {', '.join(map(str, sizes))} rows of fresh "
                         "draws: the breach needs the case's own values"), settings
    first = sizes[differ.index(True)]
    return Threshold("rows", "threshold", first, f"equal below {first} rows, differ from {first} (of "
                     f"{', '.join(map(str, sizes))} tried) at dim {b.dim}, {b.dtype}"), settings


# --- on a breach, from a check ----------------------------------------------------------------------------------


def _named_output(what: str, entry: str) -> str:
    """The output a check's words name (``fused_add residual_out: ...``), else the entry point's first."""
    head = what.split(":", 1)[0].split()
    names = ENTRY_POINTS[entry].outputs if entry in ENTRY_POINTS else ("y",)
    return head[1] if len(head) > 1 and head[0] == entry and head[1] in names else names[0]


def _parity_entry(what: str) -> str:
    found = re.search(r" in (forward\w*) of ", what)
    return found.group(1) if found else "forward"


def for_breach(subject: Any, case: Any, rule: str, actual: torch.Tensor, expected: torch.Tensor,
               what: str, upstream: Mapping[str, Sequence[torch.Tensor]] | None = None) -> Diagnosis | None:
    """The diagnosis of a bitwise breach a check just found, made once per (rule, entry point, output) of a test and
    kept on the subject: Hypothesis's shrinking fails the same check many times, and the threshold it finds is the
    parameter's, not the example's. None where the rule carries none. ``upstream``: as for :func:`diagnose`."""
    if not diagnosed(rule) or getattr(case, "batch", None) is None:
        return None
    if rule == parity.BITWISE.id:
        case = dataclasses.replace(case, entry=_parity_entry(what)) if hasattr(case, "entry") else case
    entry = getattr(case, "entry", "forward")
    output = _named_output(what, entry)
    key = (rule, entry, output, what.split(":", 1)[0])
    kept = subject.diagnoses.get(key)
    if kept is not None:
        return kept
    other = subject.other.backend if rule == parity.BITWISE.id and subject.other is not None else None
    backend = subject.backend
    if rule == parity.BITWISE.id and subject.other is not None:
        backend, other = subject.backend, subject.other.backend
    dtypes = sorted({subject.dtype, "float32"} & {str(d).removeprefix("torch.") for d in backend.dtypes})
    classes = _classes(case, entry, actual)
    with torch.random.fork_rng(devices=[]):
        made = diagnose(backend, subject.device, case, rule, actual=actual, expected=expected, what=what,
                        output=output, dtypes=dtypes or [subject.dtype], other=other, classes=classes,
                        upstream=upstream)
    subject.diagnoses[key] = made
    return made


def _classes(case: Any, entry: str, actual: torch.Tensor) -> dict[str, torch.Tensor] | None:
    """The contract's rounding classes of forward on the case's whole batch, where ``actual`` is that batch."""
    from .rounding import forward_classes

    b = case.batch
    if entry != "forward" or actual.reshape(-1, b.dim).shape[0] != b.rows or b.dtype == "float32":
        return None
    return forward_classes(b.x(), b.w(), b.eps)


def mechanism_named(mechanism: tuple[str, Any, str], d: dict[str, Any]) -> tuple[bool, bool]:
    """Does a diagnosis (its dict form) name a planted mechanism ``(kind, value, stage)``: (the threshold part, the
    stage part). A threshold's value must be exact; a mode's declared value must appear in the mode named."""
    kind, value, stage = mechanism
    t = d["threshold"]
    if kind == "mode":
        threshold = t["kind"] == "mode" and str(value) in str(t["value"])
    else:
        threshold = t["kind"] == kind and (value is None or t["value"] == value)
    return threshold, d["stage"]["kind"] == stage
