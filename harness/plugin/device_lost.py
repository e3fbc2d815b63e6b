"""What a run does once a device fault has taken this process's device (``running/device_faults.py``): the
faulting test's report goes out with its ``semantics.device_fault`` record, then the process ends.

Under pytest-xdist the worker exits as soon as that test's reports are sent, and the controller replaces it: the
remaining tests run in a fresh process with a fresh context, and no other backend's check fails for a context
someone else broke. In a single process the run stops after that test; the report is INCOMPLETE, names the fault,
and lists the tests that did not run under "Did not run" ("not run: the device was lost").
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from ...contract.families import semantics
from .outcomes import ENDED_PROPERTY, FAILURE_PROPERTY, RECORDS_PROPERTY

if TYPE_CHECKING:
    from ..running.device_faults import Lost

# The guard is registered in every pytest run the plugin is loaded in, conformance run or not; the module that
# records device faults imports torch, and no fault can have been recorded before a check imported it.
DEVICE_FAULTS = "rmsnorm_conformance.harness.running.device_faults"

# Test ids a "Did not run" entry names before it says how many more there are.
LISTED_TESTS = 20
# Marks the report of the test after which its process ends (its device or its state lost): the controller then
# reads that worker's end as expected, not as a crash.
ENDS_PROCESS_PROPERTY = "rmsnorm_conformance_ends_process"
# The name the run's reporter is registered under, on the controller (or the only process).
REPORTER = "rmsnorm-conformance-reporter"


class DeviceLossGuard:
    """Registered in every process of a run: ends it after the test in which its device was lost."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.session: pytest.Session | None = None
        self.faulted: set[str] = set()  # tests whose device fault ended their worker

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    # --- a pytest-xdist controller: the worker that ended after a fault is replaced, not a second failure -------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if any(name == ENDS_PROCESS_PROPERTY for name, _ in report.user_properties) or (
                report.failed and report.when == "call" and any(
                    name == FAILURE_PROPERTY and isinstance(value, dict)
                    and value.get("rule") == semantics.DEVICE_FAULT.id for name, value in report.user_properties)):
            self.faulted.add(report.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        if crashitem in self.faulted:
            report.longrepr = (f"{crashitem}: its worker ended after the fault recorded above, as it must; a fresh "
                               "worker runs the remaining tests")
            report.user_properties.append((ENDED_PROPERTY, True))

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        # A collection error's report (a CollectReport) comes here too, and has no user_properties.
        if any(name == ENDED_PROPERTY for name, _ in getattr(report, "user_properties", ())):
            return "worker replaced", "R", "WORKER REPLACED"
        return None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Iterator[Any]:
        outcome: Any = yield
        report = outcome.get_result()
        error = call.excinfo.value if call.excinfo is not None else None
        device_faults = _device_faults()
        if device_faults is not None and isinstance(error, device_faults.DeviceFault):
            report.longrepr = f"{item.name}: {error}"
        elif device_faults is not None and error is not None and not report.skipped:
            _surfaced(device_faults, item, report, error)
        loss = device_faults.lost() if device_faults is not None else None
        ends = loss is not None and loss.nodeid in ("", item.nodeid) and (call.when == "call" or not report.passed)
        if loss is not None and ends and not any(name == ENDS_PROCESS_PROPERTY for name, _ in report.user_properties):
            report.user_properties.append((ENDS_PROCESS_PROPERTY, loss.said))

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        device_faults = _device_faults()
        loss = device_faults.lost() if device_faults is not None else None
        if device_faults is None or loss is None:
            return
        if hasattr(self.config, "workerinput"):
            from ..running import isolation

            # This test's reports, its records inside them, went to the controller as each phase ended (execnet
            # writes and flushes synchronously): end here, before the next test starts on a dead context.
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            isolation._REAL_EXIT(device_faults.WORKER_EXIT_STATUS)
        self._stop(nodeid, loss)

    def _stop(self, nodeid: str, loss: Lost) -> None:
        """One process: stop after this test; what did not run is listed against its own backend and device."""
        session = self.session
        if session is None:
            return
        items = list(session.items)
        index = next((i for i, item in enumerate(items) if item.nodeid == nodeid), len(items) - 1)
        remaining = items[index + 1:]
        where = f"{loss.backend}'s fault" if loss.backend else "a fault"
        reporter = self.config.pluginmanager.get_plugin(REPORTER)
        if reporter is not None:
            by_subject: dict[tuple[str, str], list[str]] = {}
            for item in remaining:
                by_subject.setdefault(_subject(item), []).append(item.nodeid.rsplit("/", 1)[-1])
            for (backend, device), ids in sorted(by_subject.items()):
                listed = ", ".join(ids[:LISTED_TESTS]) + (f" and {len(ids) - LISTED_TESTS} more"
                                                          if len(ids) > LISTED_TESTS else "")
                reporter.collector.add_not_run(backend, device, f"{loss.not_run_reason} after {where} in "
                                                                f"{nodeid}: {len(ids)} tests: {listed}")
            reporter.interrupted_by = (
                f"{loss.said} after {where} in {nodeid}: {loss.detail}; {len(remaining)} tests did not run "
                "(listed under 'Did not run'); run with pytest-xdist (-n 2 or more) to have a fresh worker run them")
        session.shouldstop = f"{loss.said} after {where} in {nodeid}"


def _surfaced(device_faults: ModuleType, item: pytest.Item, report: pytest.TestReport, error: BaseException) -> None:
    """A test that raised outside any watched call (a fixture, the state put-back, a comparison) on a device found
    lost: the loss is declared against the backend whose call was in flight or made last, and the process ends
    after this test. Where that backend is not this test's own, the test was only where the fault surfaced: it reads
    "not run: the device was lost", never a failure of a backend that did not break the context."""
    loss = device_faults.surfaced(error, item.nodeid)
    if loss is None or not loss.backend or loss.backend == _subject(item)[0]:
        return
    backend, device = _subject(item)
    reason = f"{loss.not_run_reason} after {loss.backend}'s call: {loss.detail}"
    report.outcome = "skipped"
    report.longrepr = (str(item.path), item.location[1] or 0, reason)
    if backend != "all":
        report.user_properties.append((RECORDS_PROPERTY, {"not_run": [
            {"backend": backend, "device": device, "reason": reason}]}))


def _device_faults() -> ModuleType | None:
    """The device-fault records' module if a check has imported it (else no fault can have been recorded)."""
    return sys.modules.get(DEVICE_FAULTS)


def _subject(item: pytest.Item) -> tuple[str, str]:
    """The (backend, device) a test runs against, from its parameters; ("all", "all") for other tests."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    subject = params.get("subject")
    if isinstance(subject, tuple) and len(subject) == 4:
        backend, device = subject[0], subject[1]
        return getattr(backend, "name", str(backend)), str(device)
    if isinstance(subject, tuple) and len(subject) == 2 and hasattr(subject[0], "label"):
        return subject[0].label, subject[0].device_label
    if "parity" in params:
        return "cross-backend parity", str(params["parity"][0])
    return "all", "all"
