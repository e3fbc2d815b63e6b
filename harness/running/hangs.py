"""Which backends hung, or crashed their process, in this run. A case that does not return within
``--case-timeout`` is the backend's verdict on that path: the first one fails its test, and the backend's later
tests on that device are not run, so one hanging kernel costs a run one case timeout, not one per test. A test in
which the backend killed its pytest-xdist worker (a segfault, an abort) is the same kind of verdict: the controller
puts it on the ledger, so one crashing kernel costs a run a worker or two, not every restart xdist allows (four a
worker, after which xdist stops the whole run and every other backend's verdict with it).

Under pytest-xdist every worker appends to and reads one file the controller names, so a hang seen by one
worker spares the others the wait. A test that calls several backends (the cross-backend table) names none in its
id; while it calls each, its worker keeps a note beside that file of which one is in flight, so that a crash there
is pinned on the backend that was running (``in_flight``, ``crashed_in``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

# Seconds a single case may run before it fails with a timeout: generous, since a first call may compile a kernel.
DEFAULT_CASE_TIMEOUT = 300.0
# Timeouts a backend may have on one device before its remaining tests there are not run: the first one is
# enough, a hang is a finding about the backend.
HANGS_BEFORE_GIVING_UP = 1


class HangLedger:
    """Given-up (backend, device) pairs, each with where it first hung or crashed and which of the two, kept in
    memory and, if given, in a shared file."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self._seen: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (where, what) in the order noted

    def note(self, backend: str, device: str, where: str, what: str = "hung") -> None:
        """Record that ``backend`` on ``device`` did not return from the case described by ``where`` (``what``: how
        it failed to, said of the backend: "hung", "crashed its process")."""
        self._seen.setdefault((backend, device), []).append((where, what))
        if self.path is not None:
            line = json.dumps({"backend": backend, "device": device, "where": where, "what": what}) + "\n"
            # One short append per hang: O_APPEND writes of this size land whole, so workers need no lock.
            with contextlib.suppress(OSError):
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)

    def hung(self, backend: str, device: str) -> str | None:
        """Where ``backend`` on ``device`` first hung (or crashed), once it has often enough to be given up on."""
        first = self._first(backend, device)
        return None if first is None else first[0]

    def given_up(self, backend: str, device: str) -> str | None:
        """Why ``backend``'s later tests on ``device`` are not run, in words ("hung on cpu at ..."), or None."""
        first = self._first(backend, device)
        return None if first is None else f"{first[1]} on {device} at {first[0]}"

    def _first(self, backend: str, device: str) -> tuple[str, str] | None:
        seen = self._read().get((backend, device), [])
        return seen[0] if len(seen) >= HANGS_BEFORE_GIVING_UP else None

    @contextlib.contextmanager
    def in_flight(self, backend: str, device: str, where: str) -> Iterator[None]:
        """While the block runs, a note beside the ledger's file (one a process) that ``backend`` on ``device`` is
        being called in the test ``where``: what the controller reads if the process dies there (``crashed_in``)."""
        note = self._in_flight_note()
        if note is None:
            yield
            return
        with contextlib.suppress(OSError):
            note.write_text(json.dumps({"backend": backend, "device": device, "where": where}))
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                note.unlink()

    def crashed_in(self, where: str) -> tuple[str, str] | None:
        """(backend, device) that a process was calling in the test ``where`` when it died, or None."""
        if self.path is None:
            return None
        for note in self.path.parent.glob(f"{self.path.stem}-in-flight-*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                entry = json.loads(note.read_text())
                if entry["where"] == where:
                    return entry["backend"], entry["device"]
        return None

    def _in_flight_note(self) -> Path | None:
        return None if self.path is None else self.path.with_name(f"{self.path.stem}-in-flight-{os.getpid()}.json")

    def _read(self) -> dict[tuple[str, str], list[tuple[str, str]]]:
        if self.path is None:
            return self._seen
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return self._seen
        seen: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for line in lines:
            try:
                entry = json.loads(line)
                seen.setdefault((entry["backend"], entry["device"]), []).append(
                    (entry["where"], entry.get("what", "hung")))
            except (ValueError, KeyError, TypeError):
                continue  # a line another worker is still writing
        return seen
