"""The reduction orders of backends on one device (checking/fingerprint.py), each beside the contract's canonical
order, at several batch sizes: which follow the canonical order, and where each one's order changes with the batch
size. A measurement, not a test (tests/reporting/test_diagnosis.py holds native and Triton to the canonical on the CPU).

    python benchmarks/fingerprints.py --device cuda --backends native,triton,cuda,liger,fla,xformers \\
        --out reports/gpu/fingerprints.md [--dims 4096,128] [--rows 1,16,257,2048] [--dtype bfloat16]

Each batch size is a setting: the probe rows go in batches of exactly that many (one row per call at 1), and dw's
leaves are that many rows. A backend that cannot load or run on the device is listed with its reason; one whose
time runs out (--time-limit) is listed with what was not probed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
try:  # the installed package (a GPU machine installs this tree as a wheel), else this source tree
    import rmsnorm_conformance.contract  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

REDUCTIONS = ("forward sum of squares", "backward row dot", "dw over rows")


def probe(backend: Any, device: torch.device, dtype: torch.dtype, dim: int, rows: int, window: int) -> list:
    from rmsnorm_conformance.harness.reporting.fingerprint_command import reveal

    return reveal(backend, device, dtype, dim, rows, window)


def describe(found: Any, canonical: Any) -> str:
    from rmsnorm_conformance.harness.checking import fingerprint as fp

    if found.tree is None:
        return f"not revealed ({found.reason})"
    how = " (in float32: no forward_fp32)" if found.note else ""
    if found.tree == canonical:
        return "canonical" + how
    return f"other, from level {fp.first_difference(found.tree, canonical)}{how}"


def _load(name: str, device: torch.device) -> tuple[Any, str | None]:
    from rmsnorm_conformance.harness.running.registry import load_backend

    try:
        backend = load_backend(name)
        return backend, backend.unavailable_reason(device)
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _rows_of_table(name: str, dim: int, rows: list[int], found: dict[int, list]) -> tuple[list[list[Any]], list[str]]:
    """The table's rows for one backend and dim, and its trees that are not the canonical."""
    from rmsnorm_conformance.harness.checking import fingerprint as fp

    table, trees = [], []
    for k, reduction in enumerate(REDUCTIONS):
        sides = {r: found[r][k] for r in rows}
        canon = {r: fp.restricted(fp.canonical_tree(s.size), set(s.window)) if s.window else None
                 for r, s in sides.items()}
        cells = [describe(s, canon[r]) if s.window else "–" for r, s in sides.items()]
        table.append([name, dim, reduction, *cells, _changes(rows, sides)])
        trees += [f"- {name}, dim {dim}, {reduction}, {r} row{'s' * (r != 1)}: `{fp.newick(s.tree)}`"
                  for r, s in sides.items() if s.tree is not None and s.tree != canon[r]]
    return table, trees


def run(args: argparse.Namespace) -> tuple[list[list[Any]], list[str], list[str]]:
    from rmsnorm_conformance.harness.checking import fingerprint as fp

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    table: list[list[Any]] = []
    trees = [f"- canonical, dim {dim}, forward sum of squares and backward row dot: "
             f"`{fp.newick(fp.restricted(fp.canonical_tree(dim), set(fp.default_window(dim, args.window))))}`"
             for dim in args.dims]
    notes: list[str] = []
    ends = time.monotonic() + args.time_limit
    for name in args.backends.split(","):
        backend, reason = _load(name, device)
        if reason:
            notes.append(f"{name}: not probed: {' '.join(str(reason).split())[:300]}")
            continue
        for dim in args.dims:
            if time.monotonic() > ends:
                notes.append(f"{name} at dim {dim}: not probed, --time-limit={args.time_limit:g} s ran out")
                continue
            start = time.monotonic()
            try:
                found = {r: probe(backend, device, dtype, dim, r, args.window) for r in args.rows}
            except Exception as exc:
                notes.append(f"{name} at dim {dim}: the probes raised {type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:300]}")
                continue
            rows, more = _rows_of_table(name, dim, args.rows, found)
            table += rows
            trees += more
            notes.append(f"{name} at dim {dim}: probed in {time.monotonic() - start:.1f} s")
    return table, trees, notes


def _changes(rows: list[int], sides: dict[int, Any]) -> str:
    """The first batch size whose tree is not the smallest revealed batch size's, over the leaves both windows hold
    (dw's windows are rows of each batch: they share the first ones)."""
    from rmsnorm_conformance.harness.checking import fingerprint as fp

    revealed = [(r, s) for r, s in sides.items() if s.tree is not None]
    if len(revealed) < 2:
        return "–"
    base_rows, base = revealed[0]
    for r, s in revealed[1:]:
        common = set(base.window) & set(s.window)
        a, b = fp.restricted(base.tree, common), fp.restricted(s.tree, common)
        level = fp.first_difference(a, b) if a is not None and b is not None else None
        if level is not None:
            return f"at {r} rows (from {base_rows}; level {level} over leaves {min(common)}–{max(common)})"
    return "never (in these batch sizes)"


def render(args: argparse.Namespace, table: list[list[Any]], trees: list[str], notes: list[str], command: str) -> str:
    from tabulate import tabulate

    from rmsnorm_conformance.harness.reporting.environment import fingerprint

    env = fingerprint([torch.device(args.device)])
    header = [f"- {k}: {v}" for k, v in env.items() if k in ("date", "torch", "triton", "cuda runtime", "python")
              or k.startswith("device")]
    return "\n".join([
        "# Reduction orders revealed, beside the canonical order", "",
        f"Command: `{command}`" + (f", run on the GPU machine by `{args.via}`" if args.via else ""), "", *header, "",
        "Each backend's summation trees (checking/fingerprint.py, after FPRev) over a window of "
        f"{args.window} leaves (the first half and as many from the middle of the row; for dw, of the rows), in "
        f"{args.dtype}, with the probe rows in batches of each batch size. *canonical*: the contract's canonical "
        "order (CONTRACT.md) drawn as a tree over the same leaves; *other, from level k*: the lowest level at which "
        "the trees differ. *Order changes*: the first batch size whose tree is not the smallest batch size's. The "
        "forward's sum of squares is read from `forward_fp32` (a 16-bit output cannot show one ulp of the sum); the "
        "dot and dw from the backward, where the backend has one.", "",
        tabulate(table, ["backend", "dim", "reduction", *(f"{r} row{'s' * (r != 1)}" for r in args.rows),
                        "order changes"],
                 tablefmt="github"), "",
        "Trees that are not the canonical (and the canonical itself, for reference):", "", *(trees or ["(none)"]), "",
        "Notes:", "", *(f"- {n}" for n in notes), ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backends", default="native,triton,cuda")
    parser.add_argument("--dims", default="4096,128", type=lambda v: [int(d) for d in v.split(",")])
    parser.add_argument("--rows", default="1,16,257,2048", type=lambda v: [int(r) for r in v.split(",")])
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--window", type=int, default=12)
    parser.add_argument("--time-limit", type=float, default=240.0, help="seconds for the probes (default 240)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--json", default=None, help="also write the table, trees and notes as JSON here")
    parser.add_argument("--via", default="", help="the script that ran this command on another machine, for the header")
    parser.add_argument("--extra", action="append", default=[], help="a line added to the notes (what was skipped)")
    args = parser.parse_args()
    table, trees, notes = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps({"table": table, "trees": trees, "notes": notes}, indent=1))
    notes += args.extra
    command = (f"python benchmarks/fingerprints.py --device {args.device} --backends {args.backends} --dims "
               f"{','.join(map(str, args.dims))} --rows {','.join(map(str, args.rows))} --dtype {args.dtype} "
               f"--window {args.window}" + (f" --out {args.out}" if args.out else ""))
    text = render(args, table, trees, notes, command)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
