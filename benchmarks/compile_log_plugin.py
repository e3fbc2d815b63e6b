"""A pytest plugin for time-to-verdict runs: what each process of a run spent compiling, test by test.

Triton's compiles are seen through ``triton.knobs.compilation.listener`` (Triton 3.4 and later): each binary's
kernel, its constexprs, whether it came from the on-disk cache, and how long ``triton.compile`` took. torch.compile's
are read from Dynamo's own timers (``torch._dynamo.utils.compilation_time_metrics``) as each test ends. Together with
timeline_plugin.py they tell a cold run's compile time from its tests' own, per worker, which a cache census (how
many binaries) cannot.

Loaded with ``-p compile_log_plugin`` (benchmarks/ on PYTHONPATH) and active only where RMSNORM_COMPILE_LOG names
the file that the processes append to, one JSON object a line. ``summarise`` reads it back.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

_PATH = os.environ.get("RMSNORM_COMPILE_LOG")
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "controller")
_TEST: list[str] = [""]
_DYNAMO_SEEN: list[float] = [0.0]


def _write(record: dict[str, Any]) -> None:
    with open(_PATH, "a") as f:  # type: ignore[arg-type]
        f.write(json.dumps({"worker": _WORKER, "t": time.time(), **record}) + "\n")


def _listener(*, src: Any, metadata: dict, metadata_group: Any, times: Any, cache_hit: bool) -> None:
    micros = times.ir_initialization + sum(d for _, d in times.lowering_stages) + times.store_results
    constants = getattr(src, "constants", None) or getattr(src, "constexprs", None) or {}
    _write({"event": "triton", "test": _TEST[0], "kernel": getattr(getattr(src, "fn", None), "__name__", "?"),
            "constexprs": {str(k): v for k, v in dict(constants).items() if isinstance(v, (int, bool, float))},
            "signature": {str(k): str(v) for k, v in dict(getattr(src, "signature", None) or {}).items()
                          if str(v).startswith("*")},
            "num_warps": metadata.get("num_warps"), "cache_hit": bool(cache_hit), "seconds": micros / 1e6,
            "stages": {name: d / 1e6 for name, d in times.lowering_stages}})


def _dynamo_seconds() -> float:
    """Dynamo's whole-frame compile time so far in this process (0 before torch.compile was first used)."""
    utils = sys.modules.get("torch._dynamo.utils")
    metrics = getattr(utils, "compilation_time_metrics", None) or {}
    return float(sum(metrics.get("_compile.compile_inner", ()) or metrics.get("entire_frame_compile", ())))


def pytest_configure(config: pytest.Config) -> None:
    if not _PATH or (not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None)):
        return
    try:
        from triton import knobs
    except ImportError:
        return
    knobs.compilation.listener = _listener


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    _TEST[0] = nodeid


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    if not _PATH:
        return
    total = _dynamo_seconds()
    if total > _DYNAMO_SEEN[0]:
        _write({"event": "dynamo", "test": nodeid, "seconds": total - _DYNAMO_SEEN[0]})
        _DYNAMO_SEEN[0] = total


def summarise(path: Path) -> str:
    """Per worker and in all: Triton's compiles (binaries built, seconds) and cache hits, Dynamo's seconds, and the
    tests that compiled most."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    per_worker: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    per_test: dict[str, float] = defaultdict(float)
    per_kernel: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    keys: dict[tuple, int] = defaultdict(int)
    for r in rows:
        w = per_worker[r["worker"]]
        if r["event"] == "triton":
            kind = "hit" if r["cache_hit"] else "built"
            w[f"triton {kind}"] += 1
            w[f"triton {kind} s"] += r["seconds"]
            if not r["cache_hit"]:
                per_test[r["test"]] += r["seconds"]
                per_kernel[r["kernel"]][0] += 1
                per_kernel[r["kernel"]][1] += r["seconds"]
                keys[(r["kernel"], json.dumps(r["constexprs"], sort_keys=True), r["num_warps"],
                      json.dumps(r.get("signature"), sort_keys=True))] += 1
        elif r["event"] == "dynamo":
            w["dynamo s"] += r["seconds"]
            per_test[r["test"]] += r["seconds"]
    columns = ["triton built", "triton built s", "triton hit", "triton hit s", "dynamo s"]
    lines = ["| process | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    totals: dict[str, float] = defaultdict(float)
    for worker in sorted(per_worker):
        lines.append(f"| {worker} | " + " | ".join(f"{per_worker[worker][c]:.1f}" for c in columns) + " |")
        for c in columns:
            totals[c] += per_worker[worker][c]
    lines.append("| all | " + " | ".join(f"{totals[c]:.1f}" for c in columns) + " |")
    typed = all("signature" in r for r in rows if r["event"] == "triton")
    built_twice = sum(n - 1 for n in keys.values() if n > 1)
    lines += ["", (f"distinct binaries built: {len(keys)}; built again in another process: {built_twice}" if typed
                   else f"constexpr and warp combinations built: {len(keys)} (each for one or more pointer types: "
                        "this log predates their logging)"), "",
              "| kernel | built | seconds |", "|---|---|---|"]
    lines += [f"| {k} | {int(n)} | {s:.1f} |" for k, (n, s) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1])]
    stages: dict[str, float] = defaultdict(float)
    for r in rows:
        if r["event"] == "triton" and not r["cache_hit"]:
            for name, seconds in r["stages"].items():
                stages[name] += seconds
    lowered = sum(stages.values())
    lines += ["", "Triton's builds by stage (seconds, all processes): " + ", ".join(
        f"{name} {seconds:.1f}" for name, seconds in stages.items()) + f"; before and after them (Python's front end "
        f"to the first IR, the cache's writes) {totals['triton built s'] - lowered:.1f}"]
    lines += ["", "| test (most compile time) | seconds |", "|---|---|"]
    lines += [f"| `{t}` | {s:.1f} |" for t, s in sorted(per_test.items(), key=lambda kv: -kv[1])[:25]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1])))
