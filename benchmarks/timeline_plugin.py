"""A pytest plugin for ``harness_throughput.py``: when each process of a run (the controller and every pytest-xdist
worker) was started, imported its plugins, finished collecting, began and ended each test, and ended the session.
From those it tells start-up, the workers' idle time and the end of a run apart, which per-test timings (junit)
cannot: they count only the tests.

Loaded with ``-p timeline_plugin`` (benchmarks/ on PYTHONPATH) and active only where RMSNORM_TIMELINE names the
file that the processes append to, one JSON object a line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

_PATH = os.environ.get("RMSNORM_TIMELINE")


def _process_started() -> float:
    """The process's start (time.time() scale), from /proc where there is one; else the plugin's import."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def _note(config: pytest.Config | None, event: str, **fields) -> None:
    if not _PATH or config is None:
        return
    worker = getattr(config, "workerinput", {}).get("workerid", "controller")
    with open(_PATH, "a") as f:
        f.write(json.dumps({"worker": worker, "event": event, "t": time.time(), **fields}) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    _note(config, "process start", at=_process_started())
    _note(config, "configure")


def pytest_collection_finish(session: pytest.Session) -> None:
    _note(session.config, "collected", tests=len(session.items))


def _runs_tests(config: pytest.Config | None) -> bool:
    """A worker, or the only process: an xdist controller only relays its workers' reports."""
    return config is not None and (hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", 0))


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    if _runs_tests(_CONFIG):
        _note(_CONFIG, "test start", test=nodeid)


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    if _runs_tests(_CONFIG):
        _note(_CONFIG, "test end", test=nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _note(session.config, "session end")


_CONFIG: pytest.Config | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    global _CONFIG
    _CONFIG = session.config
