"""A pytest plugin for time-to-verdict runs: where each process of a run (each pytest-xdist worker, or the one
process) spends its time, under load.

A test that takes 2 s alone can take 9 s as one of eight workers on one GPU (measured on an H200). Two
records tell why:

- per test, its wall time beside the CPU time of the thread that ran it and of the whole process: a test whose
  wall time is far above its own thread's CPU time waited (on the GPU, a lock, the disk, another process); one
  whose process CPU time is far above its thread's ran torch's intra-op threads;
- per process, a cProfile of the session (``<folder>/<worker>.prof``), whose wall-clock times show what it waited
  in.

Loaded with ``-p worker_profile_plugin`` (benchmarks/ on PYTHONPATH), active only where RMSNORM_WORKER_PROFILE names
the folder. ``python benchmarks/worker_profile_plugin.py FOLDER`` summarises it.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import pytest

_DIR = os.environ.get("RMSNORM_WORKER_PROFILE")
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_PROFILE: list[cProfile.Profile] = []
_START: dict[str, tuple[float, float, float]] = {}


def _controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def pytest_configure(config: pytest.Config) -> None:
    if not _DIR or _controller(config):
        return
    Path(_DIR).mkdir(parents=True, exist_ok=True)
    profile = cProfile.Profile()
    profile.enable()
    _PROFILE.append(profile)


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    if _PROFILE:
        _START[nodeid] = (time.perf_counter(), time.thread_time(), time.process_time())


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    if not _PROFILE or nodeid not in _START:
        return
    wall, thread, process = _START.pop(nodeid)
    record = {"worker": _WORKER, "test": nodeid, "wall": time.perf_counter() - wall,
              "thread_cpu": time.thread_time() - thread, "process_cpu": time.process_time() - process}
    with open(Path(_DIR, f"{_WORKER}.jsonl"), "a") as f:  # type: ignore[arg-type]
        f.write(json.dumps(record) + "\n")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _PROFILE:
        profile = _PROFILE.pop()
        profile.disable()
        profile.dump_stats(str(Path(_DIR, f"{_WORKER}.prof")))  # type: ignore[arg-type]


def summarise(folder: Path, top: int = 40) -> str:
    """Per-test wall against CPU times summed over the run's processes, then the merged profiles' functions with the
    most time of their own and the most cumulative time."""
    rows = [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines()]
    lines = [f"# Where the processes' time went ({folder.name})", ""]
    if rows:
        wall = sum(r["wall"] for r in rows)
        thread = sum(r["thread_cpu"] for r in rows)
        process = sum(r["process_cpu"] for r in rows)
        lines += [f"{len(rows)} tests in {len({r['worker'] for r in rows})} processes: {wall:.1f} s of wall time in "
                  f"tests, {thread:.1f} s CPU of the threads that ran them, {process:.1f} s CPU of their processes",
                  "", "| test | worker | wall s | thread CPU s | process CPU s |", "|---|---|---|---|---|"]
        lines += [f"| `{r['test']}` | {r['worker']} | {r['wall']:.2f} | {r['thread_cpu']:.2f} | "
                  f"{r['process_cpu']:.2f} |" for r in sorted(rows, key=lambda r: -r["wall"])[:top]]
        lines.append("")
    profiles = sorted(str(p) for p in folder.glob("*.prof"))
    if profiles:
        stats = pstats.Stats(*profiles, stream=sys.stdout)
        for key in ("tottime", "cumulative"):
            lines += [f"## The merged profiles by {key}", "", "```"]
            buffer = _capture(stats, key, top)
            lines += [buffer, "```", ""]
    return "\n".join(lines)


def _capture(stats: pstats.Stats, key: str, top: int) -> str:
    import io

    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats(key).print_stats(top)
    return out.getvalue()


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1])))
