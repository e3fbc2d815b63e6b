"""The reduction order revealed: a kernel's summation tree read off its output bits, after FPRev (Xie et al.,
"Revealing Floating-Point Accumulation Orders in Software/Hardware Implementations", USENIX ATC '25).

A kernel's sums are black boxes, but floating-point addition swamps: a term far below half an ulp of a partial sum
is lost when added to it, and kept when it meets terms of its own size first. So crafted inputs make the output
say which terms met first. Three sums of an RMSNorm are probed, each over a *window* of K leaves (the other leaves
are zero, which every order adds exactly), many probes as rows (or columns) of one batch, so a fingerprint costs a
few calls:

- **the backward's row dot product** ``sum(g * w * x)``: its terms carry signs, so FPRev's probe applies. Leaves i
  and j get +M and -M, the rest of the window 1. The +-M cancel exactly where i and j meet; every 1 that met either
  of them before is swamped, every other survives. The dot is read from dx of a column outside the window
  (x = 1, w = 1, eps below fp32's resolution of 1: rms = inv = 1 and dx = -dot / D).
- **dw's reduction over rows**, the same probe with rows as leaves and a column per pair (dw = the column sums).
- **the forward's sum of squares**, whose terms are never negative, so nothing cancels. What does reveal it:
  three nonzero leaves, a with b^2 (b^2's last bit even) and i, j each with half an ulp of b^2. Either lone
  half-ulp is lost to b^2 (a tie, rounded to even), but i + j is a whole ulp, kept if i and j meet before either
  meets a. So each probe answers one triplet, "do i and j meet before a?"; all triplets of the window give the
  window's tree. The sum is read from ``forward_fp32`` (one ulp of S must reach the output: each probe is made
  with a few anchors b whose one-ulp change of S changes y, and a baseline row of b alone). Not revealable this
  way: a kernel without ``forward_fp32`` at a 16-bit dtype (its output cannot show one ulp of S), and which of
  two operands is on the left (addition commutes, so the tree is unordered).

From the probes come L(i, j), the number of window leaves under the node where i and j meet (the dot and dw probes
give it directly as K minus the surviving ones; the triplets give it as K minus the count of leaves a that i and j
meet before). FPRev's reconstruction then builds the tree: for the window's first leaf, group the others by L;
each group is the sibling subtree at one level of its path, rebuilt the same way. A measured L that no tree gives
(a nondeterministic order, or a sum wider than fp32) is reported, never drawn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ...contract.canonical_order import GROUP, padded_width

# A tree: a leaf index, or a pair of trees (unordered: children sorted by their smallest leaf).
Tree = int | tuple
WINDOW = 16  # leaves probed by default: 120 pairs (dot, dw) and 1,680 triplets (the forward) fit one call
SWAMP = 2.0**40  # +-M: far above 2^24 times any window's count of ones, and inside bf16's range
# eps far below half an ulp of 1 in fp32: mean + eps rounds to the mean, so rms = 1 for a row of ones.
PROBE_EPS = 1e-10


def normalized(tree: Tree) -> Tree:
    """``tree`` with every pair's children ordered by their smallest leaf (addition commutes)."""
    if isinstance(tree, int):
        return tree
    left, right = (normalized(t) for t in tree)
    return (left, right) if smallest(left) <= smallest(right) else (right, left)


def smallest(tree: Tree) -> int:
    return tree if isinstance(tree, int) else min(smallest(t) for t in tree)


def leaves(tree: Tree) -> list[int]:
    return [tree] if isinstance(tree, int) else [leaf for t in tree for leaf in leaves(t)]


def restricted(tree: Tree | None, keep: set[int]) -> Tree | None:
    """The tree induced on the leaves ``keep``: other leaves dropped, nodes left with one child collapsed."""
    if tree is None:
        return None
    if isinstance(tree, int):
        return tree if tree in keep else None
    parts = [t for t in (restricted(child, keep) for child in tree) if t is not None]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else normalized((parts[0], parts[1]))


def heights(tree: Tree) -> dict[int, list[frozenset[int]]]:
    """Internal nodes by height (a leaf is 0, a node 1 + its higher child): level 1 holds the first adds."""
    out: dict[int, list[frozenset[int]]] = {}

    def walk(t: Tree) -> int:
        if isinstance(t, int):
            return 0
        h = 1 + max(walk(c) for c in t)
        out.setdefault(h, []).append(frozenset(leaves(t)))
        return h

    walk(tree)
    return {h: sorted(nodes, key=lambda s: sorted(s)) for h, nodes in sorted(out.items())}


def first_difference(a: Tree, b: Tree) -> int | None:
    """The lowest level at which the two trees' nodes (as sets of leaves) differ; None if they are the same."""
    ha, hb = heights(a), heights(b)
    for level in sorted(set(ha) | set(hb)):
        if {*ha.get(level, [])} != {*hb.get(level, [])}:
            return level
    return None


def newick(tree: Tree) -> str:
    return str(tree) if isinstance(tree, int) else f"({newick(tree[0])},{newick(tree[1])})"


# --- the orders the project knows, as trees ---------------------------------------------------------------------


def canonical_tree(size: int) -> Tree:
    """The contract's canonical order (contract/canonical_order.py) over ``size`` leaves, drawn as a tree: pad to
    ``padded_width`` with zeros (dropped here: a zero changes no sum), groups of GROUP consecutive leaves halved,
    then the group sums halved."""
    width = padded_width(size)
    groups = width // GROUP
    nodes: list[Tree | None] = [i if i < size else None for i in range(width)]

    def halve(values: list[Tree | None]) -> Tree | None:
        while len(values) > 1:
            half = len(values) // 2
            values = [_join(values[k], values[k + half]) for k in range(half)]
        return values[0]

    sums = [halve(nodes[g * GROUP: (g + 1) * GROUP]) for g in range(groups)]
    tree = halve(sums)
    if tree is None:
        raise ValueError(f"size={size} must be at least 1")
    return normalized(tree)


def lane_tree(size: int, lanes: int = 64) -> Tree:
    """The order of a block reduction written as loops: lane l sums leaves l, l + lanes, ... left to right, then
    the lanes left to right (zoo.defects.sum_by_lanes)."""
    lane_sums = []
    for lane in range(min(lanes, size)):
        acc: Tree | None = None
        for leaf in range(lane, size, lanes):
            acc = _join(acc, leaf)
        lane_sums.append(acc)
    total: Tree | None = None
    for s in lane_sums:
        total = _join(total, s)
    assert total is not None
    return normalized(total)


def _join(a: Tree | None, b: Tree | None) -> Tree | None:
    if a is None:
        return b
    if b is None:
        return a
    return (a, b)


# --- from L(i, j) to a tree (FPRev's reconstruction) ------------------------------------------------------------


def lca_sizes(tree: Tree) -> dict[tuple[int, int], int]:
    """L(i, j) of a known tree: leaves under the node where i and j meet."""
    out: dict[tuple[int, int], int] = {}

    def walk(t: Tree) -> list[int]:
        if isinstance(t, int):
            return [t]
        left, right = walk(t[0]), walk(t[1])
        for i in left:
            for j in right:
                out[(min(i, j), max(i, j))] = len(left) + len(right)
        return left + right

    walk(tree)
    return out


def build_tree(window: Sequence[int], size_of: Callable[[int, int], int]) -> Tree:
    """The tree whose L(i, j) is ``size_of(i, j)``, by FPRev's recursion; a ValueError if no tree has them."""
    window = list(window)
    if len(window) == 1:
        return window[0]
    anchor, others = window[0], window[1:]
    by_size: dict[int, list[int]] = {}
    for j in others:
        by_size.setdefault(size_of(anchor, j), []).append(j)
    node: Tree = anchor
    held = 1
    for size in sorted(by_size):
        group = by_size[size]
        held += len(group)
        if size != held:
            raise ValueError(f"no summation tree has these probes: leaf {anchor} meets {len(group)} leaves in a "
                             f"subtree of {size}, where {held} were expected")
        node = (node, build_tree(group, size_of))
    return normalized(node)


def from_sizes(window: Sequence[int], sizes: dict[tuple[int, int], int]) -> Tree:
    """The tree of measured L's, checked: every L the tree implies is the measured one."""
    tree = build_tree(window, lambda i, j: sizes[(min(i, j), max(i, j))])
    implied = lca_sizes(tree)
    wrong = [pair for pair, size in sizes.items() if implied.get(pair) != size]
    if wrong:
        raise ValueError(f"no summation tree has these probes (first at leaves {wrong[0]})")
    return tree


# --- the probes --------------------------------------------------------------------------------------------------


def default_window(size: int, count: int = WINDOW) -> list[int]:
    """Leaves probed over a sum of ``size``: the first ``count // 2`` and as many from the middle, so that both the
    first levels (neighbours) and the top of the tree (the halves) show; all of them where ``size`` is small."""
    if size <= count:
        return list(range(size))
    half = count // 2
    middle = size // 2
    return sorted({*range(half), *range(middle, min(size, middle + count - half))})


@dataclass
class Revealed:
    """One sum's revealed tree over a window, or why it could not be revealed."""

    reduction: str  # "forward sum of squares", "backward row dot", "dw over rows"
    size: int  # leaves of the whole sum (the dim, or the rows for dw)
    window: list[int]
    tree: Tree | None = None
    reason: str = ""
    calls: int = 0
    note: str = ""  # how it was revealed, where not as asked (another dtype)

    def to_dict(self) -> dict:
        return {"reduction": self.reduction, "size": self.size, "window": self.window,
                "tree": newick(self.tree) if self.tree is not None else None, "reason": self.reason,
                "calls": self.calls, "note": self.note}


Forward = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]


@dataclass
class Prober:
    """Calls into one backend on one device and dtype, at one setting: its ``forward_fp32`` (or ``forward``) and
    its backward (through ``forward`` with inputs that require grad). The setting: ``rows_per_call`` (probe rows go
    in batches of exactly that many, zero rows filling the last; None: all in one call), ``offset`` (x starts that
    many elements past a 64-byte aligned address) and ``mode`` (a context every call runs in). ``calls`` counts
    the calls made."""

    forward: Forward
    forward_fp32: Forward | None
    device: torch.device
    dtype: torch.dtype
    weight_dtype: torch.dtype | None = None
    backward: bool = True
    rows_per_call: int | None = None
    offset: int = 0
    mode: Callable[[], Any] | None = None
    calls: int = field(default=0)

    def ones(self, rows: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.ones(rows, dim, dtype=self.dtype, device=self.device)
        w = torch.ones(dim, dtype=self.weight_dtype or self.dtype, device=self.device)
        return x, w

    def _placed(self, x: torch.Tensor) -> torch.Tensor:
        if not self.offset:
            return x
        buffer = torch.zeros(x.numel() + self.offset, dtype=x.dtype, device=x.device)
        view = buffer[self.offset:].view(x.shape)
        view.copy_(x)
        return view

    def _chunks(self, total: int) -> list[tuple[int, int]]:
        n = self.rows_per_call or max(total, 1)
        return [(start, min(n, total - start)) for start in range(0, total, n)]

    def _context(self) -> Any:
        return self.mode() if self.mode is not None else contextlib.nullcontext()

    def read(self, fn: Forward, x: torch.Tensor, w: torch.Tensor, eps: float = PROBE_EPS) -> torch.Tensor:
        """``fn`` over the probe rows ``x``, in batches of the setting's size, as fp32 on the CPU."""
        outs = []
        n = self.rows_per_call
        for start, count in self._chunks(x.shape[0]):
            part = x[start: start + count]
            if n is not None and count < n:
                part = torch.cat([part, part.new_zeros(n - count, x.shape[1])])
            self.calls += 1
            with torch.no_grad(), self._context():
                y = fn(self._placed(part.contiguous()), w, eps)
            outs.append(y.float().cpu()[:count])
        return torch.cat(outs)

    def grads(self, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """dx (all rows) and dw (of the last batch: the dw probe makes one) of ``g`` through the backward."""
        dxs, dw = [], None
        n = self.rows_per_call
        for start, count in self._chunks(g.shape[0]):
            part = g[start: start + count]
            if n is not None and count < n:
                part = torch.cat([part, part.new_zeros(n - count, g.shape[1])])
            x, w = self.ones(part.shape[0], g.shape[1])
            x = self._placed(x).detach().requires_grad_(True)
            w.requires_grad_(True)
            self.calls += 1
            with torch.enable_grad(), self._context():
                y = self.forward(x, w, PROBE_EPS)
                if not y.requires_grad:
                    raise RuntimeError("the backend has no backward here (its output does not require grad)")
                y.backward(part.to(y.dtype))
            if x.grad is None or w.grad is None:
                raise RuntimeError("the backward gave no dx or dw")
            dxs.append(x.grad.float().cpu()[:count])
            dw = w.grad.float().cpu()
        assert dw is not None
        return torch.cat(dxs), dw


def reveal_dot(prober: Prober, dim: int, window: Sequence[int] | None = None) -> Revealed:
    """The backward's row dot product over ``dim``: one probe row per pair of window leaves."""
    window = list(window or default_window(dim))
    found = Revealed("backward row dot", dim, window)
    outside = next((c for c in range(dim) if c not in set(window)), None)
    if not prober.backward:
        found.reason = "the backend has no backward here"
        return found
    if outside is None or len(window) < 2:
        found.reason = f"dim {dim} leaves no column outside the window to read the dot from"
        return found
    if not _holds_swamp(prober.dtype):
        found.reason = f"{_name(prober.dtype)} cannot hold the swamping terms (+-2^40)"
        return found
    pairs = list(itertools.combinations(window, 2))
    g = torch.zeros(len(pairs), dim, dtype=torch.float32)
    g[:, window] = 1.0
    for r, (i, j) in enumerate(pairs):
        g[r, i], g[r, j] = SWAMP, -SWAMP
    try:
        dx, _ = prober.grads(g.to(prober.device))
    except Exception as exc:  # a backend that cannot take the probe: said, never drawn
        found.reason = f"the probe raised {type(exc).__name__}: {exc}"
        return found
    # dx of a column with g = 0 is -coef * inv = -dot / D (rms = inv = 1).
    survived = (-dx[:, outside].double().cpu() * dim).tolist()
    return _finish(found, pairs, survived)


def reveal_dw(prober: Prober, rows: int, dim: int, window: Sequence[int] | None = None) -> Revealed:
    """dw's reduction over ``rows`` rows: one probe column per pair of window rows."""
    window = list(window or default_window(rows))
    found = Revealed("dw over rows", rows, window)
    pairs = list(itertools.combinations(window, 2))
    if not prober.backward:
        found.reason = "the backend has no backward here"
        return found
    if len(window) < 2:
        found.reason = "one row has no order"
        return found
    if len(pairs) > dim:
        found.reason = f"{len(pairs)} pairs of rows do not fit in dim {dim} probe columns"
        return found
    if not _holds_swamp(prober.dtype):
        found.reason = f"{_name(prober.dtype)} cannot hold the swamping terms (+-2^40)"
        return found
    g = torch.zeros(rows, dim, dtype=torch.float32)
    for c, (i, j) in enumerate(pairs):
        g[window, c] = 1.0
        g[i, c], g[j, c] = SWAMP, -SWAMP
    try:
        _, dw = dataclasses.replace(prober, rows_per_call=None).grads(g.to(prober.device))
    except Exception as exc:
        found.reason = f"the probe raised {type(exc).__name__}: {exc}"
        return found
    survived = dw[: len(pairs)].double().cpu().tolist()
    return _finish(found, pairs, survived)


def _finish(found: Revealed, pairs: list[tuple[int, int]], survived: list[float]) -> Revealed:
    k = len(found.window)
    sizes = {}
    for (i, j), value in zip(pairs, survived, strict=True):
        count = round(value)
        if not math.isfinite(value) or abs(value - count) > 0.25 or not 0 <= count <= k - 2:
            found.reason = (f"the probe of leaves {i} and {j} read {value!r}, not a count of surviving terms: the "
                            "sum is not a fixed tree of fp32 adds (wider accumulation, or another formula)")
            return found
        sizes[(i, j)] = k - count
    try:
        found.tree = from_sizes(found.window, sizes)
    except ValueError as exc:
        found.reason = f"{exc}: the order is not one fixed tree (nondeterministic, or not fp32 adds)"
    return found


def _holds_swamp(dtype: torch.dtype) -> bool:
    return torch.finfo(dtype).max > SWAMP


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# Anchors b of the forward's triplets: b^2 in [1, 2) with its last bit even (b has at most 8 significant bits, so
# b^2 is exact in fp32 and b exact in bf16 and fp16); the half-ulp leaves are 2^-12 (squares 2^-24).
_ANCHORS = tuple(1.0 + k / 128 for k in range(0, 53))
HALF_ULP_LEAF = 2.0**-12


def forward_eps(dim: int) -> float:
    """The forward probes' eps: 2^-20 of one ulp-sized step of the mean, enough that ``S / D + eps`` is no perfect
    square (at dims 4^k, ``sqrt(b^2 / D)`` is exact, and a one-ulp change of S would vanish in its rounding)."""
    return 2.0**-20 / dim


def _shows(b: float, dim: int) -> bool:
    """Does one ulp more in S = b^2 change y = b / rms under the common normalize formulas (1/sqrt then a multiply,
    rsqrt, a division by the correctly rounded sqrt or by torch's fp32 one)?"""
    s0 = torch.tensor(b * b, dtype=torch.float32)
    s1 = torch.nextafter(s0, torch.tensor(4.0))
    bt = torch.tensor(b, dtype=torch.float32)
    d = torch.tensor(float(dim), dtype=torch.float32)
    eps = torch.tensor(forward_eps(dim), dtype=torch.float32)

    def forms(s: torch.Tensor) -> list[float]:
        rms = torch.sqrt((s / d + eps).double()).float()
        # torch's own fp32 sqrt too: on a CPU it is not correctly rounded, and where it is an ulp off, one ulp of
        # S can vanish in it (which anchors do so follows the CPU's vector capability).
        return [float(bt * (1 / rms)), float(bt * torch.rsqrt(s / d + eps)), float(bt / rms),
                float(bt / torch.sqrt(s / d + eps))]

    return all(a != c for a, c in zip(forms(s0), forms(s1), strict=True))


def anchors(dim: int, count: int = 3) -> list[float]:
    """``count`` anchors b at which a one-ulp change of the sum shows in y for every common formula at ``dim``."""
    good = [b for b in _ANCHORS if _shows(b, dim)]
    return (good or list(_ANCHORS))[:count]


def _triplet_rows(window: list[int], dim: int, bs: list[float]) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
    """The forward's probe rows: per anchor b, a baseline (b alone) then one row per triplet (a; i, j)."""
    triplets = [(a, i, j) for i, j in itertools.combinations(window, 2) for a in window if a not in (i, j)]
    x = torch.zeros(len(bs) * (len(triplets) + 1), dim, dtype=torch.float32)
    r = 0
    for b in bs:
        x[r, window[0]] = b  # the baseline: b alone (S = b^2 exactly, in any order)
        r += 1
        for a, i, j in triplets:
            x[r, a], x[r, i], x[r, j] = b, HALF_ULP_LEAF, HALF_ULP_LEAF
            r += 1
    return x, triplets


def reveal_forward(prober: Prober, dim: int, window: Sequence[int] | None = None, *, anchor_count: int = 3) -> Revealed:
    """The forward's sum of squares over ``dim``: a probe row per (anchor, a, {i, j}) of the window; ``anchor_count``
    anchors (each one more chance that a one-ulp change of the sum shows in y)."""
    window = list(window or default_window(dim))
    found = Revealed("forward sum of squares", dim, window)
    read = prober.forward_fp32 if prober.forward_fp32 is not None else prober.forward
    if prober.forward_fp32 is None and prober.dtype != torch.float32:
        # A 16-bit output cannot show one ulp of the fp32 sum: the kernel's float32 instantiation is probed instead.
        again = reveal_forward(dataclasses.replace(prober, dtype=torch.float32, weight_dtype=None), dim, window,
                               anchor_count=anchor_count)
        again.note = (f"revealed in float32: no forward_fp32, and a {_name(prober.dtype)} output cannot show one "
                      "ulp of the fp32 sum of squares")
        if again.tree is None:
            again.reason = f"{again.note.replace('revealed in float32', 'not revealed')} ({again.reason})"
        return again
    if len(window) < 3:
        found.reason = "fewer than three leaves have no order to reveal"
        return found
    bs = anchors(dim, anchor_count)
    x, triplets = _triplet_rows(window, dim, bs)
    w = torch.ones(dim, dtype=prober.weight_dtype or prober.dtype, device=prober.device)
    try:
        y = prober.read(read, x.to(prober.dtype).to(prober.device), w, forward_eps(dim))
    except Exception as exc:
        found.reason = f"the probe raised {type(exc).__name__}: {exc}"
        return found
    # A triplet's answer: i and j met before a under any anchor (a one-ulp larger sum changed y).
    step = len(triplets) + 1
    y = y.reshape(len(bs), step, dim)
    columns = torch.tensor([a for a, _, _ in triplets])
    moved = (y[:, 1:, :].gather(2, columns.view(1, -1, 1).expand(len(bs), -1, 1)).squeeze(2)
             != y[:, :1, window[0]]).any(dim=0)
    first = {t for t, m in zip(triplets, moved.tolist(), strict=True) if m}
    sizes = {(i, j): len(window) - sum((a, i, j) in first for a in window if a not in (i, j))
             for i, j in itertools.combinations(window, 2)}
    try:
        found.tree = from_sizes(window, sizes)
    except ValueError as exc:
        found.reason = f"{exc}: the order is not one fixed tree of fp32 adds (or sums more exactly)"
    return found
