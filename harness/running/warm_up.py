"""Backends' one-time preparation, started by pytest-xdist's controller while its workers start.

A backend's availability probe is where it builds or loads what it needs: the CUDA backend compiles its operator
library there on a machine's first run (12.8 s on an H200, ``reports/h200/kernels/run5/``). Under ``-n 8`` every
worker's first test of that backend waited on that build, and the build only began once a worker had imported
torch, collected the suites and reached such a test. The controller starts the probe at once in a process of its
own, so the build overlaps the workers' start and collection; a worker that gets there first waits on the same
build (``torch.utils.cpp_extension`` builds once behind a lock file) and does not build again.

Nothing here decides anything: the workers still ask every backend themselves and report what they find. A
warm-up that fails, hangs or is still running at the end of the run changes no verdict; it is stopped when the
run ends. CPU devices are left out: no backend of this project builds for them, and a CPU-only machine has no
core to spare. ``RMSNORM_CONFORMANCE_WARM_UP=0`` turns it off (``benchmarks/h200_verdict.sh`` times both).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

import torch

_MODULE = "rmsnorm_conformance.harness.running.warm_up"
SWITCH = "RMSNORM_CONFORMANCE_WARM_UP"


def start(backends: Iterable[Any], devices: Iterable[torch.device]) -> list[subprocess.Popen]:
    """One quiet process per (backend, non-CPU device type) that asks the backend whether it can run there."""
    if os.environ.get(SWITCH) == "0":
        return []
    firsts: dict[str, torch.device] = {}
    for device in devices:
        if device.type != "cpu":
            firsts.setdefault(device.type, device)
    processes = []
    for backend in backends:
        for device in firsts.values():
            # No process to spare (OSError): the workers prepare the backend themselves, as without this.
            with contextlib.suppress(OSError):
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", _MODULE, backend.spec, str(device)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return processes


def stop(processes: Iterable[subprocess.Popen]) -> None:
    """End what is still running (the run is over: nobody waits on it now)."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def main(argv: list[str]) -> int:
    from rmsnorm_conformance.harness.running.registry import load_backend

    spec, device = argv
    backend = load_backend(spec)
    return 0 if backend.unavailable_reason(torch.device(device)) is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
