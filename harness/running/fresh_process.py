"""First calls in a fresh Python process: where autotuning, compiled-kernel caches and warm-up paths live, and
where the long-running test process, whose caches are long warm, can no longer see them.

The test process writes a request (the backend's spec, the device and the cases), runs
``python -m rmsnorm_conformance.harness.running.fresh_process REQUEST RESULT``, and compares what came back. One fresh
process per (backend, device, dtype) makes every case's first call, then every case's second call. Which
entry point calls a dim first rotates from dim to dim, so each entry point meets a cold cache shared by all
of them on some dims, and its own cold cache on every dim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rmsnorm_conformance.contract.rmsnorm import THRESHOLD_DIMS
from rmsnorm_conformance.harness.drawing.cases import Batch, FirstCallCase
from rmsnorm_conformance.harness.drawing.thresholds import Plan
from rmsnorm_conformance.harness.running.entry_points import call, entry_point

# Every threshold dim and an odd one (tail masking), each once: each call below is the first for its dim.
FIRST_CALL_DIMS: tuple[int, ...] = (*THRESHOLD_DIMS, 1000)
# Rows of each first call: two rows per SM on an H200 plus one less than a warp, so the rows are many (a
# changed order shows in about half of them) and not a round number a kernel might special-case.
FIRST_CALL_ROWS = 264 + 31
SEED = 4099
# A fresh process imports torch and the backend, and may compile or autotune: generous, but finite.
TIMEOUT_S = 600


def first_call_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str]) -> Plan:
    """One first call per dim and entry point, as many rows as the budget allows up to FIRST_CALL_ROWS; the
    entry point that goes first rotates with the dim."""
    cases = []
    for i, dim in enumerate(FIRST_CALL_DIMS):
        batch = Batch(dim=dim, rows=max(1, min(FIRST_CALL_ROWS, budget // dim)), dtype=dtype, values="normal",
                      weight="around_one", seed=SEED + dim)
        rotated = [*entries[i % len(entries):], *entries[: i % len(entries)]]
        cases += [FirstCallCase(batch, entry=entry) for entry in rotated]
    return Plan(cases)


@dataclass(frozen=True)
class FreshCalls:
    """What a fresh process returned: per case the outputs of its first and of its second call (every output of
    the entry point, in its order), or why it failed."""

    outputs: dict[FirstCallCase, tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]]
    error: str | None = None


def run_fresh(spec: str, device: torch.device, cases: Sequence[FirstCallCase]) -> FreshCalls:
    """Load the backend from ``spec`` in a fresh process on ``device`` and make ``cases``' first calls there in
    order, then their second calls in the same order."""
    with tempfile.TemporaryDirectory(prefix="rmsnorm-first-call-") as tmp:
        request, result = Path(tmp, "request.json"), Path(tmp, "result.pt")
        request.write_text(json.dumps({"spec": spec, "device": str(device), "cases": [repr(c) for c in cases],
                                       "sys_path": sys.path}))
        try:
            proc = subprocess.run([sys.executable, "-m", __name__, str(request), str(result)],
                                  capture_output=True, text=True, timeout=TIMEOUT_S, env=dict(os.environ))
        except subprocess.TimeoutExpired:
            return FreshCalls({}, f"the fresh process did not finish in {TIMEOUT_S} s")
        if proc.returncode != 0 or not result.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
            return FreshCalls({}, f"the fresh process exited with status {proc.returncode}: " + " | ".join(tail))
        saved = torch.load(result)
    return FreshCalls({c: (first, second) for c, (first, second) in zip(cases, saved, strict=True)})


class _Caller:
    """What :func:`entry_points.call` needs of a subject, in the fresh process: the backend."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    request = json.loads(Path(request_path).read_text())
    sys.path[:0] = [p for p in request["sys_path"] if p not in sys.path]
    from rmsnorm_conformance.harness.drawing.replay import parse_case
    from rmsnorm_conformance.harness.running.registry import load_backend

    device = torch.device(request["device"])
    caller = _Caller(load_backend(request["spec"]))
    calls = []
    for text in request["cases"]:
        case = parse_case(text)
        rows, weight = entry_point(case.entry).inputs(case.batch, device)
        calls.append((case.entry, rows, weight, case.batch.eps))
    first = [tuple(t.cpu() for t in call(caller, *c)) for c in calls]
    second = [tuple(t.cpu() for t in call(caller, *c)) for c in calls]
    torch.save(list(zip(first, second, strict=True)), result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
