"""pytest-xdist's controller of a conformance run: what it hands each worker at its start, and when it resolves
the run's options.

xdist starts its workers at the session's start, after every plugin's configure. Resolving the options imports torch and
every backend named (a GPU's runtime, Triton, a third party's kernels) and asks each device: 1.5 s of the 2 s before the
workers started on two CPU cores, and 6.6 s on a slow GPU host's first run (an H200's), time that every worker then
spends again on its own imports. So the controller registers this plugin at configure and resolves at the end of the
session's start, once xdist has started the workers: the controller's imports overlap theirs, and the harness's lines of
the header follow the terminal's own. Every option is still resolved, and the reporter has written its first report,
before the workers have collected and a test is dealt; a usage error stops the workers and ends the run with pytest's
usage error, as at configure.

What a worker is handed at its start needs no torch: the hang ledger's file (``running/hangs.py``), shared by the
run, and the time the run's ``--deadline`` passes, taken at configure so that the deadline counts from the run's
start whenever the options are resolved. ``RMSNORM_CONFORMANCE_EARLY_WORKERS=0`` resolves at configure, as before.
A run without workers registers the plugin too, for what it does before the reporter starts: an interrupt then
(while torch imports, 1-2 s) leaves each report file reading INCOMPLETE rather than the previous run's verdict.
This module imports no torch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from . import options
from .state import (
    HANGS,
    LEDGER_PATH,
    RUN_ENDS_AT,
    WORKER_GIVEN,
    WORKER_HANGS,
    WORKER_RUN_ENDS_AT,
)

SWITCH = "RMSNORM_CONFORMANCE_EARLY_WORKERS"
NAME = "rmsnorm-conformance-controller"
REPORTER = "rmsnorm-conformance-reporter"


def is_controller(config: pytest.Config) -> bool:
    """pytest-xdist's controller: a run with workers (``-n``), seen from the process that starts them."""
    return not hasattr(config, "workerinput") and bool(options.of(config).workers)


def register(config: pytest.Config, activate: Callable[[pytest.Config], object]) -> Controller:
    """This plugin, registered at configure in the process that writes the reports (pytest-xdist's controller, or
    a run's only process): it defers the options in a controller, unless the switch says not to. ``activate``
    resolves them (``hooks.activate``), handed in so that this module need not import the hooks that register it."""
    plugin = Controller(config, activate, defer=is_controller(config) and os.environ.get(SWITCH) != "0")
    config.pluginmanager.register(plugin, NAME)
    return plugin


class Controller:
    """The reporting process's hooks: each worker's start (``pytest_configure_node``), the deferred resolution (at
    the end of the session's start), an interrupt before the reporter started, and the ledger's folder removed at
    the end."""

    def __init__(self, config: pytest.Config, activate: Callable[[pytest.Config], object], *, defer: bool) -> None:
        self.config = config
        self.activate = activate
        self.defer = defer
        self.resolved = False
        self.reporting = False  # the reporter has started: it writes the run's reports from here on
        deadline = options.of(config).deadline
        if deadline > 0:  # a negative one is the options' usage error
            config.stash[RUN_ENDS_AT] = time.time() + deadline

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """For each worker: the hang ledger's file and the run's end, shared by all; tests dealt to it after it
        died wait for its death to be handled (``tests_to_the_dead_wait``)."""
        config = self.config
        path = config.stash.get(LEDGER_PATH, None)
        if path is None:
            path = config.stash[LEDGER_PATH] = Path(tempfile.mkdtemp(prefix="rmsnorm-conformance-")) / "hangs.jsonl"
        ledger = config.stash.get(HANGS, None)
        if ledger is not None and ledger.path is None:  # resolved at configure (the switch off)
            ledger.path = path
        node.workerinput[WORKER_HANGS] = str(path)
        node.workerinput[WORKER_GIVEN] = sorted(options.of(config).given)
        tests_to_the_dead_wait(node)
        ends_at = config.stash.get(RUN_ENDS_AT, 0.0)
        if ends_at:
            node.workerinput[WORKER_RUN_ENDS_AT] = ends_at

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionstart(self, session: pytest.Session) -> Generator[None, None, None]:
        """Around every other plugin's session start: the terminal's prints the header, then xdist's starts the
        workers. After them, the options resolved, the harness's lines of the header printed where the terminal
        prints a header, and the reporter, registered during this hook, started (its first report written)."""
        result = yield
        if self.defer and not self.resolved:
            self._resolve()
            config = session.config
            reporter = config.pluginmanager.get_plugin(REPORTER)
            if reporter is not None:
                terminal = config.pluginmanager.get_plugin("terminalreporter")
                if terminal is not None and terminal.showheader and not terminal.no_header:
                    for line in reporter.pytest_report_header(config):
                        terminal.write_line(line)
                reporter.pytest_sessionstart(session)
        self.reporting = True
        return result

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        """Ctrl-C or SIGINT before the reporter started (the options resolving, torch importing, the workers
        starting): each report file reads INCOMPLETE, with why, rather than a previous run's verdict or nothing."""
        if self.reporting:
            return
        # The report's writer imports no torch (tests/plugin/test_plugin_import.py): a torch whose import the interrupt
        # cut short fails, or crashes the process, when it is imported again.
        from ..reporting.render import replace_reports
        from ..vocabulary.records import Collector

        replace_reports(Collector(incomplete="interrupted (Ctrl-C or a signal) as the run started: no test ran"),
                        options.of(self.config).report)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        path = config.stash.get(LEDGER_PATH, None)
        if path is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(path.parent)

    def _resolve(self) -> None:
        """The run's options resolved (``hooks.activate``); a usage error first stops the workers xdist started."""
        self.resolved = True
        try:
            self.activate(self.config)
        except pytest.UsageError:
            nodes = getattr(self.config.pluginmanager.get_plugin("dsession"), "nodemanager", None)
            if nodes is not None:
                with contextlib.suppress(Exception):
                    nodes.teardown_nodes()
            raise


def tests_to_the_dead_wait(node: Any) -> None:
    """Tests dealt to a worker that has died but whose death pytest-xdist has not yet handled stay with it, to be
    dealt again when it is. Two workers that crash at once (a kernel that segfaults, running on both) met a race in
    xdist 3.8's ``load`` scheduling: handling the first, it dealt that worker's tests to the second, whose channel
    was closed, and the OSError ended the whole run as an internal error (exit 3), every other backend's verdict
    INCOMPLETE. The tests it dealt are on the dead worker's list already; the first one is what it died in."""
    send = node.send_runtest_some

    def send_or_wait(indices: Any) -> None:
        try:
            send(indices)
        except OSError:
            if not node.channel.isclosed():
                raise

    node.send_runtest_some = send_or_wait
