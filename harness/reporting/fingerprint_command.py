"""``rmsnorm-conformance fingerprint``: a backend's reduction orders revealed (checking/fingerprint.py) at one or two
batch sizes, side by side with the first level where they differ, beside the contract's canonical order.

    rmsnorm-conformance fingerprint --backend=triton --dim=4096 --rows=1,257 --dtype=bfloat16 [--device=cpu]
        [--window=16] [--picture=orders.png] [--json=orders.json]

Each batch size is a setting: the probe rows are called in batches of exactly that many (one row per call at 1,
the control where batch invariance is in question); dw's leaves are that many rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from ..checking import fingerprint as fp

REDUCTIONS = ("forward sum of squares", "backward row dot", "dw over rows")


def _rows(value: str) -> list[int]:
    try:
        rows = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rows={value}: give batch sizes as integers, e.g. 1,257") from None
    if not rows or len(rows) > 2 or any(r < 1 for r in rows):
        raise argparse.ArgumentTypeError(f"--rows={value}: give one or two batch sizes of at least 1, e.g. 1,257")
    return rows


def reveal(backend: Any, device: torch.device, dtype: torch.dtype, dim: int, rows: int,
           window: int) -> list[fp.Revealed]:
    """The three reductions of ``backend`` at batch size ``rows``."""
    declared = getattr(backend, "has_forward_fp32", None)
    prober = fp.Prober(backend.forward, backend.forward_fp32 if declared else None, device, dtype,
                       backward=_backward(backend, device, dtype), rows_per_call=rows)
    leaves = fp.default_window(dim, window)
    row_leaves = fp.default_window(rows, window)
    found = [fp.reveal_forward(prober, dim, leaves), fp.reveal_dot(prober, dim, leaves)]
    if rows >= 2:
        found.append(fp.reveal_dw(prober, rows, dim, row_leaves))
    else:
        found.append(fp.Revealed("dw over rows", rows, row_leaves, reason="one row has no order over rows"))
    return found


def _backward(backend: Any, device: torch.device, dtype: torch.dtype) -> bool:
    try:
        return bool(backend.supports_backward(device, dtype))
    except Exception:
        return False


def canonical(found: fp.Revealed) -> Any:
    """The contract's canonical order over the same leaves."""
    return fp.restricted(fp.canonical_tree(found.size), set(found.window))


def render(name: str, dim: int, dtype: str, device: str, rows: list[int],
           found: dict[int, list[fp.Revealed]]) -> list[str]:
    lines = [f"fingerprint of {name} on {device}, dim {dim}, {dtype}, at {' and '.join(f'{r} rows' for r in rows)}"]
    for k, reduction in enumerate(REDUCTIONS):
        sides = [found[r][k] for r in rows]
        lines.append("")
        lines.append(f"{reduction} (leaves {sides[0].window[0]}..{sides[0].window[-1]} of {sides[0].size}: "
                     f"{', '.join(map(str, sides[0].window))})")
        for r, side in zip(rows, sides, strict=True):
            if side.tree is None:
                lines.append(f"  {r} rows: not revealed: {side.reason}")
                continue
            canon = canonical(side)
            same = "the canonical order" if side.tree == canon else \
                f"differs from the canonical order from level {fp.first_difference(side.tree, canon)}"
            lines.append(f"  {r} rows: {fp.newick(side.tree)} ({same})" + (f"; {side.note}" if side.note else ""))
        trees = [s.tree for s in sides if s.tree is not None]
        if len(trees) == 2 and sides[0].window == sides[1].window:
            level = fp.first_difference(trees[0], trees[1])
            same = "the same tree at both batch sizes"
            lines.append(f"  {same if level is None else f'first differ at level {level}'}")
        if sides[0].tree is not None:
            lines.append(f"  canonical: {fp.newick(canonical(sides[0]))}")
        if sides[0].tree is not None:
            for level, nodes in fp.heights(sides[0].tree).items():
                lines.append(f"    level {level}: " + " ".join("{" + ",".join(map(str, sorted(n))) + "}"
                                                          for n in nodes))
    return lines


def picture(path: str, rows: list[int], found: dict[int, list[fp.Revealed]]) -> str:
    """Draw the trees (each batch size, then the canonical) per reduction; the note says what was not drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        return "no picture: matplotlib is not installed (pip install 'rmsnorm-conformance[plots]')"
    from .diagnoses import draw_trees

    drawn = []
    for k, reduction in enumerate(REDUCTIONS):
        sides = [(f"{r} rows", found[r][k].tree) for r in rows]
        first = found[rows[0]][k]
        sides.append(("canonical", canonical(first) if first.size >= 1 and first.window else None))
        level = None
        trees = [t for _, t in sides[:-1] if t is not None]
        if len(trees) == 2:
            level = fp.first_difference(trees[0], trees[1])
        drawn.append((reduction, sides, level))
    fig = draw_trees(plt, drawn)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return f"picture written: {path}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rmsnorm-conformance fingerprint", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", required=True, help="a backend name or module.path:attr, as --backend takes")
    parser.add_argument("--dim", type=int, default=4096, help="the row's length (default 4096)")
    parser.add_argument("--rows", type=_rows, default=[1, 257], help="one or two batch sizes (default 1,257)")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--device", default="cpu", help="a torch device (default cpu)")
    parser.add_argument("--window", type=int, default=fp.WINDOW, help=f"leaves probed (default {fp.WINDOW})")
    parser.add_argument("--picture", default=None, help="draw the trees into this PNG")
    parser.add_argument("--json", default=None, help="write the revealed trees as JSON here")
    args = parser.parse_args(argv)
    if args.dim < 2 or args.window < 3:
        parser.error(f"--dim={args.dim} must be at least 2 and --window={args.window} at least 3")
    from ..running.registry import load_backend

    try:
        backend = load_backend(args.backend)
        device = torch.device(args.device)
    except (ValueError, RuntimeError, ImportError) as exc:
        print(f"rmsnorm-conformance fingerprint: {exc}", file=sys.stderr)
        return 2
    reason = backend.unavailable_reason(device)
    if reason:
        print(f"rmsnorm-conformance fingerprint: {reason}", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    found = {r: reveal(backend, device, dtype, args.dim, r, args.window) for r in args.rows}
    print("\n".join(render(backend.name, args.dim, args.dtype, str(device), args.rows, found)))
    if args.picture:
        print(picture(args.picture, args.rows, found))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"backend": backend.name, "device": str(device), "dim": args.dim, "dtype": args.dtype,
                       "rows": {str(r): [f.to_dict() for f in found[r]] for r in args.rows},
                       "canonical": {f.reduction: fp.newick(canonical(f)) for f in found[args.rows[0]]
                                     if f.window}}, handle, indent=1)
    revealed = any(f.tree is not None for fs in found.values() for f in fs)
    return 0 if revealed else 1


if __name__ == "__main__":
    sys.exit(main())
