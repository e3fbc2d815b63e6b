"""Backends' one-time preparation, started by pytest-xdist's controller while its workers start.

A backend's availability probe is where it builds or loads what it needs: the CUDA backend compiles its operator
library there on a machine's first run (12.8 s on an H200, ``reports/h200/kernels/run5/``). Under ``-n 8`` every
worker's first test of that backend waited on that build, and the build only began once a worker had imported
torch, collected the suites and reached such a test. The controller starts the probe at once in a process of its
own, so the build overlaps the workers' start and collection; a worker that gets there first waits on the same
build (``torch.utils.cpp_extension`` builds once behind a lock file) and does not build again.

Nothing here decides anything: the workers still ask every backend themselves and report what they find. A
warm-up that fails, hangs or is still running at the end of the run changes no verdict; it is stopped when the
run ends, as Ctrl-C stops it, so that a build in progress removes its lock file (a kill would leave it for every
later run to wait on; the CUDA backend also removes a lock too old to be a live build's). CPU devices are left
out: no backend of this project builds for them, and a CPU-only machine has no core to spare.
``RMSNORM_CONFORMANCE_WARM_UP=0`` turns it off (``benchmarks/h200_verdict.sh`` times both).

It starts as early as it can: at the controller's configure, before the controller imports torch (2-4 s), from
the options as typed (``start_early``), where they name the backends' devices or this machine has a GPU's device
node. Otherwise the controller starts it once its options are resolved (``start``). This module imports no torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

_MODULE = "rmsnorm_conformance.harness.running.warm_up"
SWITCH = "RMSNORM_CONFORMANCE_WARM_UP"
# The device nodes of a GPU driver (NVIDIA's, and ROCm's, whose GPUs torch calls cuda): without one, no
# accelerator can be there, and a warm-up would only spend a core.
GPU_NODES = ("/dev/nvidiactl", "/dev/kfd")
# This package's backends whose probe prepares something: the CUDA backend builds its operator library there. Its
# other backends and shipped adapters only import (native, Triton, Liger-Kernel, ...; the workers import them
# anyway), and a warm-up of each would be one more process importing torch while the workers start: under the RL
# command, four. A user's backend (``module:attr``, a third party's entry point) may build in its probe: warmed up.
OWN_PREPARED = frozenset({"cuda"})
_PACKAGE = "rmsnorm_conformance."


def start(backends: Iterable[Any], devices: Iterable[Any]) -> list[subprocess.Popen]:
    """One quiet process per (backend whose probe may build, non-CPU device type) that asks the backend whether it
    can run there."""
    firsts: dict[str, str] = {}
    for device in devices:
        if device.type != "cpu":
            firsts.setdefault(device.type, str(device))
    return _spawn([backend.spec for backend in backends], list(firsts.values()))


def early_targets(backend_option: str | None, device_option: str | None, default_backends: Iterable[str],
                  gpu_nodes: Iterable[str] | None = None) -> tuple[list[str], list[str]]:
    """The backend specs and non-CPU devices a warm-up can be started for from the options as typed, before
    torch is imported: none where no GPU driver's device node exists (a CPU-only machine, or a GPU named on one:
    the run's own options check says so). The default devices and ``all`` mean this machine's GPU."""
    from rmsnorm_conformance.harness.running.registry import parse_backend_option

    if not any(os.path.exists(node) for node in (GPU_NODES if gpu_nodes is None else gpu_nodes)):
        return [], []
    items = [part.strip() for part in (device_option or "").split(",") if part.strip()]
    devices: dict[str, str] = {}
    for item in items or ["all"]:
        item = "cuda" if item == "all" else item
        kind = item.split(":", 1)[0]
        if kind != "cpu":
            devices.setdefault(kind, item)
    specs = parse_backend_option(backend_option) if backend_option else list(default_backends)
    return (specs, list(devices.values())) if devices else ([], [])


def start_early(backend_option: str | None, device_option: str | None,
                default_backends: Iterable[str]) -> list[subprocess.Popen]:
    """``start`` from the options as typed (``early_targets``): the warm-up overlaps the controller's own start."""
    specs, devices = early_targets(backend_option, device_option, default_backends)
    return _spawn(specs, devices)


def worth_warming(spec: str) -> bool:
    """Whether ``spec``'s probe may prepare something (``OWN_PREPARED``): not this package's import-only ones."""
    from rmsnorm_conformance.harness.running.registry import BUILTIN_BACKENDS, entry_point_paths

    own = spec in BUILTIN_BACKENDS or entry_point_paths().get(spec, "").startswith(_PACKAGE)
    return spec in OWN_PREPARED or not own


def _spawn(specs: list[str], devices: list[str]) -> list[subprocess.Popen]:
    if os.environ.get(SWITCH) == "0":
        return []
    processes = []
    for spec in filter(worth_warming, specs):
        for device in devices:
            # No process to spare (OSError): the workers prepare the backend themselves, as without this.
            with contextlib.suppress(OSError):
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", _MODULE, spec, device],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return processes


def stop(processes: Iterable[subprocess.Popen], grace: float = 5.0) -> None:
    """End what is still running (the run is over: nobody waits on it now), as Ctrl-C would: a build in progress
    then removes its lock file on the way out, which a kill would leave behind for every later run to wait on.
    Whatever has not ended within ``grace`` seconds is killed."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        with contextlib.suppress(OSError):
            process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def interruptible() -> None:
    """A termination or an interrupt ends this process as Ctrl-C does, even where its parent ignores SIGINT (a shell
    does, for a background job's children), so that a build's cleanup, its lock file's removal, still runs."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str]) -> int:
    interruptible()
    import torch

    from rmsnorm_conformance.harness.running.registry import load_backend

    spec, device = argv
    backend = load_backend(spec)
    return 0 if backend.unavailable_reason(torch.device(device)) is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
