"""A pytest-xdist worker of a conformance run ends without the interpreter's teardown once everything it had to
say has been said.

pytest-xdist's controller gives its verdict only after every worker's process has ended. A worker ends its session
and reports it at once, but then its interpreter tears down what it imported: every module's objects freed one by
one, torch's and a GPU runtime's destructors, the device context. None of that is the run's: each test's reports
went to the controller as the test ran (execnet writes synchronously), the worker's files are closed, and the exit
handlers of the libraries it loaded after this plugin (torch's, Inductor's compile pool, Dynamo's) have run. So the
worker's last exit handler, registered before those libraries were imported, flushes its streams and ends the
process there (``os._exit``). The time from a run's last test to its verdict went from 3.2-3.7 s to 2.3-2.5 s on an
H200 (Triton, ``-n 8``) and from 2.0-2.1 s to 1.1-1.2 s on two CPU cores.

Left as it was: a process that is not an xdist worker (the controller, a run without ``-n``: their exit status is
the verdict, and whoever embeds pytest may have work of their own at exit); a worker of a run that is not a
conformance run (the plugin stays inert there); a worker where coverage is loaded (its data file is written at
exit); and ``RMSNORM_CONFORMANCE_FAST_EXIT=0``. xdist never reads a worker's exit status: a worker's outcome
reaches the controller through its reports, and a worker that dies before its last report is seen as a crash
whether or not this handler exists (it never runs then).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys

SWITCH = "RMSNORM_CONFORMANCE_FAST_EXIT"
_WORKER = "PYTEST_XDIST_WORKER"
# The real os._exit, taken before any backend is imported (a backend under test may replace os's attributes).
_EXIT = os._exit
_state = {"armed": False, "conformance": False}


def arm() -> None:
    """In an xdist worker, register the exit handler now, before torch and the backends are imported, so that it
    runs after theirs (exit handlers run last registered, first run)."""
    if _state["armed"] or not os.environ.get(_WORKER):
        return
    atexit.register(_end)
    _state["armed"] = True


def conformance_run() -> None:
    """This worker runs conformance tests: its exit may skip the teardown."""
    _state["conformance"] = True


def skips_teardown() -> bool:
    """Whether this process's exit skips the interpreter's teardown (what the handler decides, also for tests)."""
    return (_state["armed"] and _state["conformance"] and os.environ.get(SWITCH) != "0"
            and "coverage" not in sys.modules)


def _end() -> None:
    if not skips_teardown():
        return
    logging.shutdown()  # a user's file handlers, flushed and closed as at a normal exit
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed, or a pipe whose reader is gone
            pass
    _EXIT(0)
