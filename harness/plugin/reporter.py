"""The run's reporter, registered on the controller only (as pytest's junitxml is): it folds every test's report
into the records, keeps the report files on disk current as the run goes (so a crash, a hang or SIGTERM still
leaves a report that says how far it got), and prints the terminal summary.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ...contract import VERSION
from ..checking.known_failures import Breach, baseline_toml, entry_status, manifest_rows
from ..reporting.environment import fingerprint
from ..reporting.render import render_terminal, replace_reports, write_report
from ..running import isolation
from ..vocabulary.records import Collector, Summary
from .outcomes import record_report, where
from .run_options import RunOptions
from .selection import selection
from .state import DECLARED_RULES, HARNESS_WATCH

# Seconds between a pytest-xdist controller's progress writes of the report (one process writes at every start).
CONTROLLER_WRITE_INTERVAL = 2.0
# Seconds a run has, once SIGTERM came, to end on its own before it is ended here with its report written. Python
# runs a signal's handler in the main thread, between bytecodes; a signal can land on another thread while the main
# thread waits in a kernel's call, and the handler then waits for the call (a sleeping kernel: 3 runs in 5 did not
# end on their own, tests/plugin/test_supervisor.py). A CI job that sent SIGTERM kills the run soon after.
SIGTERM_GRACE = 10.0
# A SIGINT this soon after the last one is the same interrupt again (the process group's, passed on by the
# supervisor as well), not a user pressing Ctrl-C again.
SIGNAL_ECHO_S = 1.0


def _no_skips_in_short_summary(terminalreporter: Any, verbose: bool) -> None:
    """pytest's short summary (-ra) comes after the harness's: on a quiet run its skips would repeat, a line a
    reason, what 'Did not run' sums up. Its failures, errors and xfails stay."""
    chars = getattr(terminalreporter, "reportchars", None)
    if isinstance(chars, str) and not verbose:
        terminalreporter.reportchars = chars.replace("s", "").replace("S", "")


def write_usage_error(paths: list[str], message: str) -> None:
    """Replace each report file it can with a NOT RUN report naming the usage error: a stale PASS must never
    look current."""
    replace_reports(Collector(usage_error=message), paths)


def exit_status(verdict: str, status: int | pytest.ExitCode, checks: bool) -> int | pytest.ExitCode:
    """The exit status follows the verdict: FAIL 1 (also when the run stopped early after the failure),
    INCOMPLETE 2, NOT RUN 1 or 5; pytest's own ``status`` stands where it already says as much, or more."""
    if verdict == "FAIL" and status in (pytest.ExitCode.OK, pytest.ExitCode.INTERRUPTED,
                                        pytest.ExitCode.NO_TESTS_COLLECTED):
        return pytest.ExitCode.TESTS_FAILED
    if verdict == "INCOMPLETE" and status in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        return pytest.ExitCode.INTERRUPTED
    if verdict == "NOT RUN" and status == pytest.ExitCode.OK:
        # A named backend ran no check, or nothing ran at all: nothing was shown to hold.
        return pytest.ExitCode.TESTS_FAILED if checks else pytest.ExitCode.NO_TESTS_COLLECTED
    return status


def write_baseline(c: Collector, path: str) -> str:
    """Every breach of the run, expected or not, written to ``path`` as a known-failures manifest, one entry per
    (backend, device, dtype, rule) with its smallest failing case; returns what the terminal says of it. Interface
    warnings fail no run, and are left out."""
    found: dict[tuple[str, str, str, str], list[Summary]] = {}
    for s in c.summaries.values():
        if s.failures or s.expected_failures:
            found.setdefault((s.backend, s.device, s.dtype, s.rule), []).append(s)
    breaches = []
    for (backend, device, dtype, rule), items in found.items():
        smallest = min(items, key=lambda s: s.failing_size)
        breaches.append(Breach(backend, device, dtype, rule, sum(s.failures + s.expected_failures for s in items),
                               smallest.failing_detail, smallest.replay))
    unlisted = [n for n, o in c.outcomes.items() if o["outcome"] in ("failed", "error") and not o.get("rule")]
    try:
        Path(path).write_text(baseline_toml(breaches, str(c.environment.get("command", ""))), encoding="utf-8")
    except OSError as exc:
        return f"known failures could NOT be written to {path}: {exc.strerror or exc}"
    note = f"; {len(unlisted)} failed tests named no rule and are not listed" if unlisted else ""
    return f"known failures written: {path} ({len(breaches)} entries{note})"


def unmet_entries(c: Collector) -> list[tuple[str, bool]]:
    """A line for each known-failure entry no check breached, and whether it fails the run (--strict-known-failures:
    an entry checked and never breached)."""
    failing = c.stale_entries()
    return [(f"{'FAIL (--strict-known-failures)' if e in failing else 'warning'}: known-failure entry for "
             f"{e['backend']} on {e['device']}, {e.get('dtype') or '*'}, {e['rule']}: "
             f"{entry_status(e['breached'], e['passed'])}", e in failing) for e in c.expected if not e["breached"]]


class Reporter:
    """The records of the run so far, and the hooks that feed, write and print them."""

    def __init__(self, config: pytest.Config, options: RunOptions) -> None:
        self.config = config
        self.options = options
        self.collector = Collector()
        c = self.collector
        if options.manifest is not None:
            c.expected = manifest_rows(options.manifest)
        c.strict_known_failures = options.options.strict_known_failures
        c.named_backends = list(options.named_backends)
        for backend, device, reason in options.not_run:
            c.add_not_run(backend, device, reason)
        c.environment = fingerprint(list(options.devices), options.environment(config))
        self.written: list[str] = []
        self.baseline_note = ""  # what --write-known-failures wrote, as the terminal says it
        self.final: dict[str, str | None] = {}  # each report's path: the verdict its last write holds, None: unwritten
        self.running: list[str] = []
        self.interrupted_by = ""
        self._previous_sigterm: Any = None
        self._term_timer: threading.Timer | None = None  # ends the run if SIGTERM did not (_end_after_sigterm)
        self._previous_sigint: Any = None
        self._sigint = False  # a SIGINT came (_interrupt)
        self._raised_again = False  # its KeyboardInterrupt raised again at a test's start
        self._finishing = False  # the session's end: the report is being written, a SIGTERM raises nothing
        self._last_sigint = float("-inf")  # time.monotonic() of the last SIGINT (_interrupt)
        self._last_write = float("-inf")  # time.monotonic() of the last progress write
        self._write_pending = False  # a start not yet written (a pytest-xdist controller throttles its writes)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        o = self.options
        names = ", ".join(b.name for b in o.backends) or "none"
        lines = [f"rmsnorm-conformance: contract {VERSION}, profile {o.contract_profile}, sweep {o.sweep}",
                 f"rmsnorm-conformance: backends {names}; devices {', '.join(map(str, o.devices))}; "
                 f"dtypes {', '.join(o.dtypes)}"]
        if o.rules:
            lines.append(f"rmsnorm-conformance: rules {', '.join(o.rules)}")
        if o.replay_case is not None:
            lines.append(f"rmsnorm-conformance: replaying {o.replay_case!r}")
        return lines

    # --- progress: the report on disk always says how far the run got --------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.collector.incomplete = "the run started and has not finished"
        self._write_reports()  # replaces a previous run's report at once: nothing stale looks current
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._terminate)
            if callable(signal.getsignal(signal.SIGINT)):  # not where SIGINT is ignored (a background job)
                self._previous_sigint = signal.signal(signal.SIGINT, self._interrupt)

    def _terminate(self, signum: int, frame: Any) -> None:
        """SIGTERM (a CI timeout, `timeout`): stop as Ctrl-C does, so the report is written and the exit is not 0;
        and if the run has not ended ``SIGTERM_GRACE`` seconds later, end it then (``_end_after_sigterm``).

        Raised once: a SIGTERM sent to the process group (``timeout``, a CI runner's cancel) reaches this process
        and its supervisor, which passes it on, so two or more come milliseconds apart. Raised again, the next one
        landed in pytest's own handling of the first, and the run ended without its last report (the report on disk
        still said "the run started and has not finished"). Once the run is writing its report, none is raised."""
        first = self._term_timer is None
        if first:
            self.interrupted_by = self.interrupted_by or "terminated by SIGTERM"
            isolation.note_interrupt()
            self._term_timer = threading.Timer(SIGTERM_GRACE, self._end_after_sigterm)
            self._term_timer.daemon = True
            self._term_timer.start()
        if first and not self._finishing and not self._sigint:  # a SIGINT's stop is under way already
            raise KeyboardInterrupt("SIGTERM")

    def _end_after_sigterm(self) -> None:
        """The run did not end after SIGTERM (its interrupt lost, or a kernel that does not return): the report is
        written INCOMPLETE with the tests under way, and the process exits with status 2."""
        with contextlib.suppress(Exception):
            self.collector.incomplete = (f"terminated by SIGTERM; the run had not ended {SIGTERM_GRACE:g} s later "
                                         "and was ended then")
            self.collector.unfinished = list(self.running)
            self._write_reports()
        isolation._REAL_EXIT(int(pytest.ExitCode.INTERRUPTED))  # os._exit may be a backend call's refusal

    def _interrupt(self, signum: int, frame: Any) -> Any:
        """SIGINT (Ctrl-C): noted, then handled as before (KeyboardInterrupt). Noted, because Python loses an
        exception raised where a garbage collector's callback runs (Hypothesis registers one), and torch's import
        turns one raised while it imports numpy into a warning: a Ctrl-C that landed there let the run go on to
        PASS with exit status 0. Now the verdict is INCOMPLETE whatever became of the exception, and the next test
        to start raises it again (``pytest_runtest_logstart``)."""
        now = time.monotonic()
        echo = now - self._last_sigint < SIGNAL_ECHO_S
        self._last_sigint = now
        self.interrupted_by = self.interrupted_by or "interrupted by SIGINT (Ctrl-C)"
        self._sigint = True
        if echo or self._finishing:
            # The same interrupt again (a process group's SIGINT reaches this process and its supervisor, which
            # passes it on), or one while the report is written: raised, it landed in pytest's handling of the
            # first and the run ended with exit status 1. A Ctrl-C pressed again later raises as before.
            return None
        previous = self._previous_sigint
        if callable(previous):
            return previous(signum, frame)
        raise KeyboardInterrupt

    def ended(self, message: str, failure: dict[str, str] | None) -> None:
        """The last words of a process about to be ended during a case (by the watchdog, stuck in native code,
        or by a test timeout's thread): the case's failure, with its rule and replay, and what never finished."""
        self.collector.incomplete = f"a case {message}"
        self.collector.unfinished = list(self.running)
        if failure is not None:
            self.collector.outcomes[failure["nodeid"]] = {
                "outcome": "failed", "where": where(failure["nodeid"]),
                **{k: v for k, v in failure.items() if k != "nodeid"}}
        self._write_reports()

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        if self._sigint and not self._raised_again:  # an interrupt lost where it was raised (_interrupt)
            self._raised_again = True
            raise KeyboardInterrupt(self.interrupted_by)
        self.running.append(nodeid)
        self.collector.unfinished = list(self.running)
        # In one process every start is written: a crash that kills the process (a segfault, os._exit, SIGKILL)
        # leaves a report that says INCOMPLETE and names the test it died in. A pytest-xdist controller outlives
        # its workers' crashes and records them itself, so it writes at most every CONTROLLER_WRITE_INTERVAL
        # seconds: rendering the whole report at each of a thousand starts takes CPU from the workers.
        if self._distributed() and time.monotonic() - self._last_write < CONTROLLER_WRITE_INTERVAL:
            self._write_pending = True
            return
        self._write_reports()

    def _distributed(self) -> bool:
        return self.options.options.dist != "no"

    def _write_reports(self) -> None:
        self._last_write = time.monotonic()
        self._write_pending = False
        for path in self.options.reports:
            with contextlib.suppress(OSError):  # checked writable at the start; a full disk must not stop the run
                write_report(self.collector, path, bench=self.options.bench, progress=True)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # A test's last report: its teardown's, or the one pytest-xdist makes for a test whose worker died in it
        # (when "???"), which is that test's outcome (failed), not a test the run left unfinished.
        if report.when not in ("setup", "call") and report.nodeid in self.running:
            self.running.remove(report.nodeid)
            self.collector.unfinished = list(self.running)
            if self._write_pending and time.monotonic() - self._last_write >= CONTROLLER_WRITE_INTERVAL:
                self._write_reports()
        record_report(self.collector, report, self.options.backends, self.config.stash.setdefault(DECLARED_RULES, {}))

    # --- the end of the run ----------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # The signal handlers stay until the report is written (a SIGTERM or SIGINT now is noted, not raised), so
        # that one arriving while it is written does not end the process with the report half done.
        self._finishing = True
        try:
            self._finish(session)
        finally:
            if self._term_timer is not None:  # ended after SIGTERM with its report written: nothing left to force
                self._term_timer.cancel()
            if threading.current_thread() is threading.main_thread():
                if self._previous_sigterm is not None:
                    signal.signal(signal.SIGTERM, self._previous_sigterm)
                if self._previous_sigint is not None:
                    signal.signal(signal.SIGINT, self._previous_sigint)

    def _finish(self, session: pytest.Session) -> None:
        """The verdict, the exit status and the last write of every report."""
        c = self.collector
        # What no test's end saw (a backend's thread, or code between tests): put back before the report is written.
        watch = self.config.stash.get(HARNESS_WATCH, None)
        replaced = watch.replaced() if watch is not None else []
        finished = len(c.outcomes) + c.passed_tests
        c.not_started = max(0, session.testscollected - finished - len(self.running))
        c.unfinished = list(self.running)
        c.incomplete = self._why_incomplete(session)
        if replaced and not c.incomplete and watch is not None:
            c.incomplete = (f"the harness's own functions were found replaced at the run's end, outside any test "
                            f"({watch.shown(replaced)}; put back before this report was written): the run cannot "
                            "vouch for its checks")
        c.selection = selection(self.config, self.options, c)  # before the verdict: it holds the target dims
        session.exitstatus = exit_status(c.verdict(), session.exitstatus, bool(c.checks))
        for name in c.named_but_not_run():
            c.add_not_run(name, "all", "named with --backend, but every one of its tests was skipped (see the "
                                       "reasons above): nothing about it was shown to hold")
        seed = self.options.options.hypothesis_seed
        c.environment["hypothesis seed"] = (
            seed or ("derandomized" if self.options.settings.derandomize
                     else "random: printed by Hypothesis on failure"))
        c.environment["exit status"] = int(session.exitstatus)
        if self.options.options.write_known_failures:
            self.baseline_note = write_baseline(c, self.options.options.write_known_failures)
        unwritten = self._last_writes(plots=True)
        if unwritten and not c.incomplete:
            # A report the run was asked for and could not write (a full disk, its folder gone, a file-size limit a
            # backend set): the run cannot end as if it had; those it could write say why and are written again.
            c.incomplete = f"the report {'; '.join(unwritten)}"
            session.exitstatus = exit_status(c.verdict(), session.exitstatus, bool(c.checks))
            c.environment["exit status"] = int(session.exitstatus)
            self.written.clear()
            self._last_writes(plots=False)

    def _last_writes(self, *, plots: bool) -> list[str]:
        """Each report's last write; ``final`` says for each path the verdict written, or None. Returns what could
        not be written, and why."""
        c, unwritten = self.collector, []
        for path in self.options.reports:
            try:
                # The last write: now the pictures are drawn beside a markdown report (never an error).
                self.written.append(str(write_report(c, path, bench=self.options.bench, plots=plots)))
                self.final[path] = c.verdict_label()
            except OSError as exc:  # one unwritable report must not lose the others
                self.written.append(f"{path} could NOT be written: {exc.strerror or exc}")
                self.final[path] = None
                unwritten.append(f"{path} could not be written ({exc.strerror or exc})")
        return unwritten

    def _why_incomplete(self, session: pytest.Session) -> str:
        """Why the run did not finish, "" where it did: a signal, the run's deadline (--deadline) with tests
        cut short or left, pytest stopped (-x, Ctrl-C), or tests that never started or never ended."""
        c, o = self.collector, self.options
        status = session.exitstatus
        cut = sum(x["outcome"] == "skipped" and x["reason"].startswith("not finished:") for x in c.outcomes.values())
        left = f"{c.not_started} of {session.testscollected} collected tests never ran"
        stopped_by = session.shouldstop if isinstance(session.shouldstop, str) else ""
        if self.interrupted_by:
            return self.interrupted_by
        if o.run_ends_at and time.time() >= o.run_ends_at and (c.unfinished or c.not_started or cut):
            return f"the run's deadline (--deadline={o.deadline:g}) passed: {cut} tests were cut short, " + left
        if status == pytest.ExitCode.INTERRUPTED:
            return f"stopped: {stopped_by}; {left}" if stopped_by else "interrupted (Ctrl-C or a signal)"
        if c.unfinished or c.not_started:
            return f"stopped early (exit status {int(status)}): {left}"
        return ""

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        c = self.collector
        if not (c.conformance_tests or c.checks or c.parity):
            return
        verbose = self.options.options.verbose > 0
        _no_skips_in_short_summary(terminalreporter, verbose)
        terminalreporter.write_sep("=", "rmsnorm conformance report")
        width = getattr(terminalreporter, "_tw", None)
        for line in render_terminal(c, verbose=verbose, width=width.fullwidth if width is not None else 120):
            terminalreporter.write_line(line)
        for line, fails in unmet_entries(c):
            terminalreporter.write_line(line, red=fails, yellow=not fails)
        if c.verdict() == "NOT RUN":
            terminalreporter.write_line("")
            terminalreporter.write_line("no conformance check ran (see 'Did not run'): exit status 5", red=True)
        if c.incomplete and not c.usage_error:
            terminalreporter.write_line("")
            terminalreporter.write_line(f"the run is {c.verdict()} and did not finish: {c.incomplete}", red=True)
        for name in c.named_but_not_run():
            terminalreporter.write_line(f"backend {name!r} was named with --backend but ran no check: NOT RUN",
                                        red=True)
        for path in self.written:
            terminalreporter.write_line(f"report written: {path}")
        if self.baseline_note:
            terminalreporter.write_line(self.baseline_note)
        if not verbose and not self.written:
            terminalreporter.write_line("full tolerance tables: -v, or --report=PATH.md / PATH.json")
