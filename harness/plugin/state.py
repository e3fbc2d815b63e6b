"""The plugin's shared state: every key it keeps in pytest's ``config.stash`` and ``item.stash``, and the keys the
controller hands each pytest-xdist worker. One module, imported by the plugin's others and importing none of them,
so that sharing a value never makes two of its modules import each other.

It imports no torch: ``hooks`` imports it in every pytest run the plugin is loaded in. The values' types are named
for the type checker only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import subprocess

    from ..checking.checks import Subject
    from ..running.hangs import HangLedger
    from ..running.isolation import HarnessWatch
    from ..vocabulary.records import Collector
    from .options import Options
    from .run_options import RunOptions

# --- config.stash: the run's --------------------------------------------------------------------------------------
# The options as given, with their defaults, read once a process (options.of).
GIVEN_OPTIONS: pytest.StashKey[Options] = pytest.StashKey()
# The run's resolved options, in every process (active.run_options).
OPTIONS: pytest.StashKey[RunOptions] = pytest.StashKey()
# The harness's own functions as the run found them, before any backend was imported (isolation.HarnessWatch):
# checked after each backend's import, at the end of each conformance test and of the run.
HARNESS_WATCH: pytest.StashKey[HarnessWatch] = pytest.StashKey()
# pytest-xdist's controller: the backends' preparation it started while the workers start (running/warm_up.py).
WARM_UPS: pytest.StashKey[list[subprocess.Popen]] = pytest.StashKey()
# The controller's: the hang ledger's file once the first worker is configured, and the time.time() the run ends at.
LEDGER_PATH = pytest.StashKey[Path]()
RUN_ENDS_AT = pytest.StashKey[float]()
# The run's hang ledger, in every process once its options are resolved (active.run_options).
HANGS: pytest.StashKey[HangLedger] = pytest.StashKey()
# The report key ({"backend", "device"}) and subject of the test running now, for the watchdog.
RUNNING: pytest.StashKey[tuple[dict, Subject]] = pytest.StashKey()
INTERRUPTS = pytest.StashKey[Callable[[], None]]()  # puts SIGINT's handler back (isolation.watch_interrupts)
# The reporting process's: test id -> the rules its setup report declared (outcomes.RULES_PROPERTY).
DECLARED_RULES = pytest.StashKey[dict[str, tuple[str, ...]]]()

# --- item.stash: a test's ------------------------------------------------------------------------------------------
RECORDS: pytest.StashKey[Collector] = pytest.StashKey()
FAILURE = pytest.StashKey[dict]()
SUBJECT = pytest.StashKey[dict]()

# --- workerinput: what the controller hands each worker at its start (controller.py) ------------------------------
WORKER_HANGS = "rmsnorm_conformance_hangs"
WORKER_RUN_ENDS_AT = "rmsnorm_conformance_run_ends_at"
WORKER_GIVEN = "rmsnorm_conformance_given"  # the options given on the controller's command line
