"""The process above a conformance run: it starts the run as a child and exits with the run's verdict, whatever
the child's own exit status says.

Inside its own process a kernel can end the run with status 0 in ways no wrapper there can refuse: an
``os._exit`` bound before the harness wrapped it (``from os import _exit`` at import), an ``atexit`` hook that
exits 0 after the report said FAIL, a crash or an exit while its module is imported (before any report was
written). A CI job reads the exit status. So a conformance run started from the command line (``pytest ...``,
``python -m pytest ...``) runs one level down: this process imports neither torch nor any backend, waits, and
then

- where the run wrote its verdict's exit status (``STATUS_ENV`` names the file; the child writes it once the
  report is written), exits with that status, never with a 0 the child's end put in its place;
- where it did not (the child died or exited before its verdict), exits non-zero (2, INCOMPLETE, in place of a
  0), and writes an INCOMPLETE report over every ``--report`` path the child did not write, so that the previous
  run's report never reads as this one's;
- where the child wrote its verdict but has not exited ``EXIT_GRACE`` seconds later (a thread a backend started and
  left running, which the interpreter waits for at exit: the run had hung there with its report written), ends
  it and exits with the verdict's status, naming the threads that were still running.

Signals: a Ctrl-C at the terminal reaches the child as it reaches this process (one process group); a SIGINT or
SIGTERM another process sends to this one alone is passed on. ``pytest.main()`` in a process of one's own, and
pytest-xdist's workers, are not supervised; ``RMSNORM_CONFORMANCE_UNSUPERVISED=1`` runs a command-line run in
one process (a debugger's ``--pdb`` works either way: the child keeps the terminal).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from . import options
from .activation import explicit, targets_suites

# Set in the child: where it writes its exit status once its report is written. Its presence also marks a run as
# supervised already.
STATUS_ENV = "RMSNORM_CONFORMANCE_STATUS_FILE"
# Set by the user: run in one process, without the supervisor.
OPT_OUT_ENV = "RMSNORM_CONFORMANCE_UNSUPERVISED"
# The exit status in place of a 0 from a run that ended before its verdict: pytest's INTERRUPTED, the harness's
# INCOMPLETE.
INCOMPLETE_STATUS = int(pytest.ExitCode.INTERRUPTED)
_FORWARDED = (signal.SIGINT, signal.SIGTERM)
# Seconds a run's process has to exit once it has written its verdict's exit status (RMSNORM_CONFORMANCE_EXIT_GRACE).
EXIT_GRACE = float(os.environ.get("RMSNORM_CONFORMANCE_EXIT_GRACE", "30"))
# Seconds past --deadline after which this process sends the run SIGTERM (it then writes its report and ends), and
# after which, again, it ends it (RMSNORM_CONFORMANCE_DEADLINE_GRACE): the run ends itself at its deadline, and this
# is for a run that cannot (a kernel that stopped the clocks the run's own deadlines read).
DEADLINE_GRACE = float(os.environ.get("RMSNORM_CONFORMANCE_DEADLINE_GRACE", "30"))


# In a supervised run: where it writes its exit status. Taken out of the environment at once, so that the runs
# this run starts in turn (a test suite's own pytest subprocesses) are supervised runs of their own.
# The run it belongs to is the one whose config took it: a pytest run started in process inside it (pytester's)
# must not write its own status there.
_status_path: str | None = None
_owner: pytest.Config | None = None


def claimed(config: pytest.Config) -> bool:
    """Is this process a supervised run? (Then its status file is taken from the environment and kept here, for
    ``config``'s run.)"""
    global _status_path, _owner
    path = os.environ.pop(STATUS_ENV, None)
    if path is not None:
        _status_path, _owner = path, config
    return _status_path is not None


def wanted(config: pytest.Config) -> bool:
    """Is this a conformance run started from the command line, not supervised yet?"""
    if claimed(config) or os.environ.get(OPT_OUT_ENV) or hasattr(config, "workerinput"):
        return False
    if not hasattr(signal, "pthread_sigmask") or not hasattr(signal, "sigtimedwait"):
        return False  # the signals cannot be passed on as described above
    opts = options.read(config)  # before pytest-xdist's own pytest_cmdline_main: not the run's, kept at configure
    if opts.help_or_version:
        return False
    started_as = Path(sys.argv[0]).name if sys.argv else ""
    from_command_line = started_as in ("pytest", "py.test", "__main__.py") and \
        list(config.invocation_params.args) == sys.argv[1:]
    return from_command_line and (explicit(opts) or targets_suites(config))


def supervise(config: pytest.Config) -> int:
    """Run this command again as a child and return the exit status the run's verdict calls for."""
    opts = options.read(config)
    command = [sys.executable, *sys.orig_argv[1:]]
    with tempfile.TemporaryDirectory(prefix="rmsnorm-conformance-") as folder:
        status_file = Path(folder, "status.json")
        passed_on: list[int] = []
        env = {**os.environ, STATUS_ENV: str(status_file)}
        started = time.time()
        # Blocked here and waited for below; the child starts with the mask this process had.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
        try:
            child = subprocess.Popen(command, env=env, cwd=config.invocation_params.dir,
                                     preexec_fn=lambda: _in_child(previous))
            deadline = opts.deadline
            returncode = _wait_passing_signals_on(child, status_file, passed_on,
                                                  time.monotonic() + deadline if deadline > 0 else None)
        finally:
            # A SIGTERM still pending (the second of a process group's, come as the child ended) would otherwise end
            # this process once unblocked, before it exits with the run's status: taken here, it was passed on.
            while signal.sigtimedwait(_FORWARDED, 0) is not None:
                pass
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        written = _read_status(status_file)
        reports = [str(Path(config.invocation_params.dir, p)) for p in opts.report]
        status: int | None = written["exit"] if written is not None else None
        if written is not None and status is not None:
            status = _as_reports_say(status, written, reports)
        if returncode is None and status is not None:  # ended here, EXIT_GRACE after its verdict
            threads = (written or {}).get("threads") or []
            _say(f"the run's process had not exited {EXIT_GRACE:g} s after its verdict, held by threads still "
                 f"running ({', '.join(map(str, threads)) or 'none named'}: a backend's, left running after its "
                 f"call?): ended it, exiting with the verdict's status {status}")
            return status
    return settle(-signal.SIGKILL if returncode is None else returncode, status, reports, started,
                  passed_on=tuple(passed_on))


def _as_reports_say(status: int, written: dict[str, Any], reports: list[str]) -> int:
    """The verdict's exit status where each report on disk holds the verdict the run says it wrote there, and a 0
    only where each of them passed; otherwise non-zero, with each report that does not hold what the run wrote
    (not written: a full disk, its folder gone, a file-size limit; or changed since) replaced by an INCOMPLETE one
    that says so. Without reports, the status as written."""
    final = written.get("reports")
    final = final if isinstance(final, dict) else {}
    wrong = [p for p in reports if final.get(p) is None or final.get(p) != _headline(p)]
    if wrong:
        from ..reporting.render import replace_reports
        from ..vocabulary.records import Collector

        _say(f"the run's report was not written as the run says it wrote it ({', '.join(wrong)}): replaced by an "
             "INCOMPLETE report" + (f", exiting with {INCOMPLETE_STATUS} in place of 0" if status == 0 else ""))
        replace_reports(Collector(incomplete=f"the run's report at this path was not written, or was changed after "
                                             f"it was (the run's own exit status was {status})"), wrong)
        return status or INCOMPLETE_STATUS
    if status == 0 and not all(str(final.get(p)).startswith(("PASS", "XFAIL")) for p in reports):
        _say(f"the run asked for exit status 0 with reports that do not pass: exiting with {INCOMPLETE_STATUS}")
        return INCOMPLETE_STATUS
    return status


def _headline(path: str) -> str | None:
    """The verdict a report file holds (its JSON's ``verdict_label``, its markdown's first line), None where it
    cannot be read."""
    try:
        if Path(path).suffix == ".json":
            label = json.loads(Path(path).read_text()).get("verdict_label")
            return label if isinstance(label, str) else None
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline().rstrip("\n")
    except (OSError, ValueError, AttributeError):
        return None
    prefix = "# RMSNorm conformance report: "
    return first.removeprefix(prefix) if first.startswith(prefix) else None


def _in_child(mask: set[int | signal.Signals]) -> None:
    """In the child before it starts: this process's signal mask as it was, and a SIGTERM when this process dies
    (killed with SIGKILL, it can pass nothing on: the child then ends as a terminated run does, INCOMPLETE,
    instead of running on alone)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def _wait_passing_signals_on(child: subprocess.Popen, status_file: Path, passed_on: list[int],
                             ends_at: float | None = None) -> int | None:
    """Wait for ``child``; a signal another process sent to this one goes on to the child (and its number into
    ``passed_on``). One from the terminal (sent by the kernel to the whole foreground process group: no sending
    process) reached the child already. None: the child had not exited ``EXIT_GRACE`` seconds after writing its
    status, and was killed. ``ends_at`` (``time.monotonic()``): the run's --deadline; ``DEADLINE_GRACE`` past it
    the child gets SIGTERM, as from a CI job's timeout, and as long again after that, SIGKILL."""
    verdict_at: float | None = None
    terminated = False
    while child.poll() is None:
        if ends_at is not None and time.monotonic() > ends_at + DEADLINE_GRACE and child.poll() is None:
            if not terminated:
                _say(f"the run is still running {DEADLINE_GRACE:g} s after its --deadline: sent it SIGTERM")
                child.send_signal(signal.SIGTERM)
                passed_on.append(signal.SIGTERM)
                terminated, ends_at = True, ends_at + DEADLINE_GRACE
            else:
                _say(f"the run is still running {2 * DEADLINE_GRACE:g} s after its --deadline: ended it")
                child.kill()
                child.wait()
                return child.returncode
        info = signal.sigtimedwait(_FORWARDED, 0.2)
        if info is not None and info.si_pid != 0 and child.poll() is None:
            child.send_signal(info.si_signo)
            passed_on.append(info.si_signo)
        if verdict_at is None:  # the file appears whole (written aside, then renamed: write_status)
            verdict_at = time.monotonic() if status_file.exists() else None
        elif time.monotonic() - verdict_at > EXIT_GRACE and child.poll() is None:
            child.kill()
            child.wait()
            return None
    return child.returncode


def _read_status(path: Path) -> dict[str, Any] | None:
    """What the child wrote once its report was: its exit status ("exit", an int) and the threads it left running
    ("threads"); None where it wrote nothing readable."""
    try:
        written = json.loads(path.read_text())
        return {**written, "exit": int(written["exit"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def settle(returncode: int, status: int | None, reports: list[str], started: float, *,
           passed_on: tuple[int, ...] = ()) -> int:
    """The exit status of a supervised run: the verdict's (``status``) where the child wrote it, else the
    child's own, never 0; an ending before the verdict is said on stderr and in the reports the child left
    (``passed_on``: the signals this process passed on to it, which name who ended it)."""
    if status is not None:
        if returncode in (-signal.SIGTERM, -signal.SIGINT):
            return status  # stopped after its verdict (a SIGTERM to the process group came twice): the verdict's
        if returncode not in (0, status):
            return returncode  # it failed after its verdict too (a crash at exit): that stands
        if returncode != status:
            _say(f"the run's process exited with status {returncode} after its verdict asked for {status} (an "
                 f"exit hook of a backend?): exiting with {status}")
        return status
    why = (f"was killed by signal {-returncode}" if returncode < 0 else f"exited with status {returncode}")
    ended = returncode if returncode > 0 else INCOMPLETE_STATUS
    if ended != returncode:  # a non-zero status of its own (a usage error, pytest's internal error) speaks for itself
        _say(f"the run's process {why} before its verdict: INCOMPLETE (exit status {ended})")
    if returncode < 0 and -returncode in passed_on:  # the signal sent to this run, before its handler was in place
        name = signal.Signals(-returncode).name
        _replace_stale_reports(reports, started, f"terminated by {name} before the run could write a verdict")
    else:
        _replace_stale_reports(reports, started, f"the run's process {why} before its verdict (a backend ended the "
                                                 "process, at import or during a call): see the run's output")
    return ended


def _replace_stale_reports(reports: list[str], started: float, why: str) -> None:
    """An INCOMPLETE report at each path the child did not write since it started: the previous run's must not
    stand for this one."""
    from ..reporting.render import replace_reports
    from ..vocabulary.records import Collector

    stale = [p for p in reports if not Path(p).exists() or Path(p).stat().st_mtime < started]
    if stale:
        replace_reports(Collector(incomplete=why), stale)


def _say(message: str) -> None:
    print(f"rmsnorm-conformance: {message}", file=sys.stderr, flush=True)


def write_status(session: pytest.Session) -> None:
    """In a supervised run, the exit status its verdict asks for, once its report is written."""
    path = _status_path
    if not path or session.config is not _owner:
        return
    # The threads the interpreter will wait for at exit, named for the supervisor in case they never end.
    threads = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    # The verdict each report's last write holds (None: not written), for the supervisor to find on disk.
    reporter = session.config.pluginmanager.get_plugin("rmsnorm-conformance-reporter")
    final = {str(Path(session.config.invocation_params.dir, p)): v
             for p, v in (getattr(reporter, "final", None) or {}).items()}
    # Unwritten, the supervisor reads an ending before the verdict: no false pass. Where the whole status cannot be
    # written (a file-size limit a backend set and the process could not raise again), the exit status alone: the
    # supervisor then replaces each report, whose own last write failed the same way.
    for status in ({"exit": int(session.exitstatus), "threads": threads, "reports": final},
                   {"exit": int(session.exitstatus)}):
        with contextlib.suppress(OSError):
            temporary = Path(f"{path}.tmp")  # written whole, then renamed: the supervisor never reads half of it
            temporary.write_text(json.dumps(status))
            temporary.replace(path)
            return
