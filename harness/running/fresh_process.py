"""First calls in a fresh Python process: where autotuning, compiled-kernel caches and warm-up paths live, and
where the long-running test process, whose caches are long warm, can no longer see them.

The test process writes a request (the backend's spec, the device and the cases), runs this module's ``main`` on it
in a fresh process (harness/running/torch_server.py: forked from a server that imported torch and nothing else, or
``python -m rmsnorm_conformance.harness.running.fresh_process REQUEST RESULT``), and compares what came back. One fresh
process per (backend, device, dtype) makes the first call of every case of every entry point's plan (the plain
norm's and each variant's), then every case's second call: each (entry point, dim) call is the first of its
kind there. Which entry point calls a dim first rotates from dim to dim, so each entry point meets a cold cache
shared by all of them on some dims, and its own cold cache on every dim. A case whose call raises is recorded
with its error and the others go on; a process that dies is run again for the asking test's cases alone, so a
crash is blamed on the entry point that crashed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...contract.rmsnorm import THRESHOLD_DIMS
from ..drawing.budget import at_dim
from ..drawing.cases import Batch, FirstCallCase
from ..drawing.thresholds import Plan
from . import exception_text, torch_server
from .entry_points import call, entry_point

try:
    import fcntl  # workers share a first-call process through a locked file (POSIX)
except ImportError:  # elsewhere each worker makes its own
    fcntl = None  # type: ignore[assignment]

# Every threshold dim and an odd one (tail masking), each once: each call below is the first for its dim.
FIRST_CALL_DIMS: tuple[int, ...] = (*THRESHOLD_DIMS, 1000)
# Rows of each first call: two rows per SM on an H200 plus one less than a warp, so the rows are many (a
# changed order shows in about half of them) and not a round number a kernel might special-case.
FIRST_CALL_ROWS = 264 + 31
SEED = 4099
# A fresh process imports torch and the backend, and may compile or autotune: generous, but finite.
TIMEOUT_S = 600


def first_call_plan(dtype: str, device: torch.device, budget: int, source: str, entries: Sequence[str], *,
                    dims: Sequence[int] = THRESHOLD_DIMS) -> Plan:
    """One first call per dim (the threshold dims ``dims``, then an odd one) and entry point, as many rows as the
    budget allows up to FIRST_CALL_ROWS; the entry point that goes first rotates with the dim."""
    cases = []
    for i, dim in enumerate(dict.fromkeys((*dims, *FIRST_CALL_DIMS))):
        rows = max(1, min(FIRST_CALL_ROWS, at_dim(dim, budget, device) // dim))
        batch = Batch(dim=dim, rows=rows, dtype=dtype, values="normal", weight="around_one", seed=SEED + dim)
        rotated = [*entries[i % len(entries):], *entries[: i % len(entries)]]
        cases += [FirstCallCase(batch, entry=entry) for entry in rotated]
    return Plan(cases)


def interleaved(plans: Sequence[Sequence[FirstCallCase]]) -> list[FirstCallCase]:
    """The cases of several entry points' plans as one process makes them: dim after dim, in the order the
    plans list their dims, the plans taking turns at going first (plan i first at the i-th dim)."""
    dims: list[int] = []
    by_dim: list[dict[int, list[FirstCallCase]]] = []
    for plan in plans:
        mine: dict[int, list[FirstCallCase]] = {}
        for case in plan:
            if case.batch.dim not in dims:
                dims.append(case.batch.dim)
            mine.setdefault(case.batch.dim, []).append(case)
        by_dim.append(mine)
    ordered: list[FirstCallCase] = []
    for i, dim in enumerate(dims):
        turn = i % max(len(by_dim), 1)
        for mine in (*by_dim[turn:], *by_dim[:turn]):
            ordered += [c for c in mine.get(dim, ()) if c not in ordered]
    return ordered


@dataclass(frozen=True)
class FreshCalls:
    """What a fresh process returned: per case the outputs of its first and of its second call (every output of
    the entry point, in its order), or the error that case's call raised; ``error`` when the process failed."""

    outputs: dict[FirstCallCase, tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]]
    error: str | None = None
    case_errors: dict[FirstCallCase, str] = dataclasses.field(default_factory=dict)
    # The cases among ``case_errors`` whose call ran out of memory: worth a process of their own again.
    out_of_memory: set[FirstCallCase] = dataclasses.field(default_factory=set)

    def covers(self, cases: Sequence[FirstCallCase]) -> bool:
        return self.error is None and all(c in self.outputs or c in self.case_errors for c in cases)


# One process's calls per (spec, device, cases made): the first test of a (backend, device, dtype) that asks runs
# every entry point's plan; the others read it, in this process from here, in other xdist workers from a file.
_RUNS: dict[tuple[str, str, tuple[FirstCallCase, ...]], FreshCalls] = {}
# The folder a run's xdist workers share (the plugin sets it in each worker): one worker makes a process's calls,
# the others wait on its lock and read what it saved.
SHARED_DIR: Path | None = None


def _run_shared(spec: str, device: torch.device, cases: tuple[FirstCallCase, ...]) -> FreshCalls:
    """:func:`run_fresh` once for the whole run: under a lock in ``SHARED_DIR`` where workers share one."""
    if SHARED_DIR is None or fcntl is None:
        return run_fresh(spec, device, cases)
    name = hashlib.sha256(repr((spec, str(device), cases)).encode()).hexdigest()[:20]
    saved = SHARED_DIR / f"first-calls-{name}.pt"
    with open(SHARED_DIR / f"first-calls-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if saved.is_file():
            return _calls(cases, torch.load(saved))
        return run_fresh(spec, device, cases, keep=saved)


def _calls(cases: Sequence[FirstCallCase], saved: list[dict[str, Any]]) -> FreshCalls:
    """A process's result file (one dict per case, in order: "first" and "second", or "error") as FreshCalls."""
    outputs = {c: (got["first"], got["second"]) for c, got in zip(cases, saved, strict=True) if "error" not in got}
    errors = {c: got["error"] for c, got in zip(cases, saved, strict=True) if "error" in got}
    short = {c for c, got in zip(cases, saved, strict=True) if got.get("out_of_memory")}
    return FreshCalls(outputs, case_errors=errors, out_of_memory=short)


def fresh_calls(spec: str, device: torch.device, cases: Sequence[FirstCallCase],
                together: Sequence[FirstCallCase] = ()) -> FreshCalls:
    """The fresh first and second calls of ``cases``: from the one process that makes ``together`` (every entry
    point's plan for this backend, device and dtype; ``cases`` among them), run once; where that process failed
    as a whole, from a process of ``cases`` alone."""
    shared = tuple(together) if set(cases) <= set(together) else tuple(cases)
    key = (spec, str(device), shared)
    if key not in _RUNS:
        _RUNS[key] = _run_shared(spec, device, shared)
    calls = _RUNS[key]
    if calls.covers(cases) or shared == tuple(cases):
        return calls
    return run_fresh(spec, device, cases)


def run_fresh(spec: str, device: torch.device, cases: Sequence[FirstCallCase], keep: Path | None = None
              ) -> FreshCalls:
    """Load the backend from ``spec`` in a fresh process on ``device`` and make ``cases``' first calls there in
    order, then their second calls in the same order; ``keep``: where to copy the result file of a process that
    finished."""
    with tempfile.TemporaryDirectory(prefix="rmsnorm-first-call-") as tmp:
        request, result = Path(tmp, "request.json"), Path(tmp, "result.pt")
        request.write_text(json.dumps({"spec": spec, "device": str(device), "cases": [repr(c) for c in cases],
                                       "sys_path": sys.path, "threads": torch.get_num_threads()}))
        code, output = torch_server.run_main(__name__, [str(request), str(result)], Path(tmp, "output.log"),
                                             TIMEOUT_S)
        if code is None:
            return FreshCalls({}, f"the fresh process did not finish in {TIMEOUT_S} s")
        if code != 0 or not result.exists():
            tail = output.strip().splitlines()[-12:]
            return FreshCalls({}, f"the fresh process exited with status {code}: " + " | ".join(tail))
        if keep is not None:
            shutil.copyfile(result, keep)
        return _calls(cases, torch.load(result))


class _Caller:
    """What :func:`entry_points.call` needs of a subject, in the fresh process: the backend."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    request = json.loads(Path(request_path).read_text())
    sys.path[:0] = [p for p in request["sys_path"] if p not in sys.path]
    # The asking process's intra-op threads, so the first call is the only difference. Under xdist that is the
    # worker's share of the cores: a child with a thread per core beside the other workers ran 2-3 times slower.
    torch.set_num_threads(request["threads"])
    from ..drawing.replay import parse_case
    from .registry import load_backend

    device = torch.device(request["device"])
    caller = _Caller(load_backend(request["spec"]))
    calls = []
    for text in request["cases"]:
        case = parse_case(text)
        rows, weight = entry_point(case.entry).inputs(case.batch, device)
        calls.append((case.entry, rows, weight, case.batch.eps))
    got: list[dict[str, Any]] = [{} for _ in calls]
    for key in ("first", "second"):
        for i, c in enumerate(calls):
            if "error" in got[i]:
                continue
            try:
                got[i][key] = tuple(t.cpu() for t in call(caller, *c))
            except Exception as exc:  # this case's call failed; the other cases' calls go on
                got[i] = {"error": f"its {key} call raised {exception_text.described(exc)}",
                          "out_of_memory": isinstance(exc, torch.OutOfMemoryError)}
    torch.save(got, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
