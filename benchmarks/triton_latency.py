"""Per-call latency of the Triton backend's eager forward at small batches, against ``F.rms_norm`` and a copy, with
each launch-path option of the backend on and off in the same run (issue #23's latency target: Triton at most 1.0x
``F.rms_norm`` at 1 to 256 rows of 4096).

Not a test. On a GPU:

    python benchmarks/triton_latency.py [--calls 2000] [--rounds 7] [--out FILE.md]

Every subject runs back to back ``--calls`` times per round (host overhead included, as ``bench.py``'s latency
phase times it); rounds are interleaved so that a noisy moment of the host hits every subject; the table gives
the median round. It also checks that both launch paths give the same bits.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench import per_call_us  # noqa: E402

ROWS = (1, 8, 64, 256)
DIMS = (4096, 128)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to time")
        return 0
    import rmsnorm_conformance.backends.triton_rmsnorm as tr

    op = tr.TritonRMSNormOp()
    device = torch.device("cuda")
    dtype = getattr(torch, args.dtype)

    def with_pointers(as_integers: bool, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        tr.POINTERS_AS_INTEGERS = as_integers
        return op.forward(x, w, 1e-6)

    lines = [f"# Triton forward latency, {args.dtype}, µs a call (median of {args.rounds} rounds of {args.calls})",
             "", f"torch {torch.__version__}, {torch.cuda.get_device_name()}", "",
             "| rows x dim | copy | F.rms_norm | triton (tensors) | triton (integers) | tensors / F.rms_norm | "
             "integers / F.rms_norm | same bits |", "|---|---|---|---|---|---|---|---|"]
    for dim in DIMS:
        for rows in ROWS:
            gen = torch.Generator(device="cuda").manual_seed(rows * dim)
            x = torch.randn(rows, dim, device=device, generator=gen).to(dtype)
            w = torch.randn(dim, device=device, generator=gen).to(dtype)
            y = torch.empty_like(x)
            same = torch.equal(with_pointers(True, x, w), with_pointers(False, x, w))
            fns = {
                "copy": lambda x=x, y=y: y.copy_(x),
                "rms": lambda x=x, w=w, dim=dim: F.rms_norm(x, (dim,), w, 1e-6),
                "tensors": lambda x=x, w=w: op.forward(x, w, 1e-6),
                "integers": lambda x=x, w=w: op.forward(x, w, 1e-6),
            }
            times: dict[str, list[float]] = {name: [] for name in fns}
            for _ in range(args.rounds):
                for name, fn in fns.items():
                    tr.POINTERS_AS_INTEGERS = name != "tensors"
                    times[name].append(per_call_us(fn, device, args.calls))
            med = {name: statistics.median(t) for name, t in times.items()}
            lines.append(f"| {rows}x{dim} | {med['copy']:.2f} | {med['rms']:.2f} | {med['tensors']:.2f} | "
                         f"{med['integers']:.2f} | {med['tensors'] / med['rms']:.3f} | "
                         f"{med['integers'] / med['rms']:.3f} | {same} |")
            print(lines[-1], flush=True)
    tr.POINTERS_AS_INTEGERS = True
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
