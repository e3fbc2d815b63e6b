"""Backends' one-time preparation, started by pytest-xdist's controller while its workers start.

A backend's availability probe is where it builds or loads what it needs: the CUDA backend compiles its operator
library there on a machine's first run (12.8 s on an H200). Under ``-n 8`` every
worker's first test of that backend waited on that build, and the build only began once a worker had imported
torch, collected the suites and reached such a test. The controller starts the probe at once in a process of its
own, so the build overlaps the workers' start and collection; a worker that gets there first waits on the same
build (``torch.utils.cpp_extension`` builds once behind a lock file) and does not build again.

Nothing here decides anything: the workers still ask every backend themselves and report what they find. A
warm-up that fails, hangs or is still running at the end of the run changes no verdict; it is stopped when the
run ends, as Ctrl-C stops it, so that a build in progress removes its lock file (a kill would leave it for every
later run to wait on; the CUDA backend also removes a lock too old to be a live build's). CPU devices are left
out: no backend of this project builds for them, and a CPU-only machine has no core to spare.
``RMSNORM_CONFORMANCE_WARM_UP=0`` turns it off.

A backend may also prepare for the calls to come (its optional ``prepare``): the Triton backend compiles there, into
Triton's cache, the binaries that calls at the dims the suites draw most will launch (``prepared_dims``). A cold Triton
run under ``-n 8`` on an H200 built about 560 binaries, 180 worker-seconds of its 440-480, each in the first worker that
needed it, while the machine's other cores stood idle. Such a backend's preparation is spread over the cores that the
workers and the controller leave (``parts_for``): part ``i`` of ``n`` does every ``n``-th step of it. A worker that
needs a binary first still builds it itself, as before.

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
# This package's backends whose warm-up prepares something: the CUDA backend builds its operator library in its
# probe, the Triton backend compiles its kernels in its ``prepare``. Its other backends and shipped adapters only
# import (native, Liger-Kernel, ...; the workers import them anyway), and a warm-up of each would be one more process
# importing torch while the workers start. A user's backend (``module:attr``, a third party's entry point) may build
# in its probe or prepare: warmed up.
OWN_PREPARED = frozenset({"cuda", "triton"})
# This package's backends whose ``prepare`` is work for as many cores as are spare: Triton's compiles take one core
# each. Any other backend's warm-up is one process (a user's ``prepare`` is told it is part 0 of 1).
PREPARED_IN_PARTS = frozenset({"triton"})
# At most this many processes a backend: each imports torch and holds a CUDA context.
MAX_PARTS = 8
_PACKAGE = "rmsnorm_conformance."


def parts_for(workers: object, cores: int | None = None) -> int:
    """How many processes a backend's preparation is spread over: the cores left by ``workers`` (pytest-xdist's
    ``-n``, as its option holds it) and the controller, at least one and at most MAX_PARTS. A worker count that is
    not a number (``auto``: as many as there are cores) leaves none spare."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    busy = workers if isinstance(workers, int) and not isinstance(workers, bool) else cores
    return max(1, min(MAX_PARTS, cores - busy - 1))


def prepared_dims() -> list[int]:
    """The dims a backend's ``prepare`` is asked to get ready for, most drawn first: the contract's threshold dims
    (every threshold plan runs each), the target model's dims (a quarter of all drawn dims each), the first-call
    plan's odd dim, then the edge dims the strategies sample from."""
    from ...contract.rmsnorm import TARGET_DIMS, THRESHOLD_DIMS
    from ..drawing.strategies import EDGE_DIMS
    from .fresh_process import FIRST_CALL_DIMS

    return list(dict.fromkeys((*THRESHOLD_DIMS, *TARGET_DIMS.values(), *FIRST_CALL_DIMS, *EDGE_DIMS)))


def start(backends: Iterable[Any], devices: Iterable[Any], workers: object = None) -> list[subprocess.Popen]:
    """One quiet process per (backend whose probe may build, non-CPU device type) that asks the backend whether it
    can run there and lets it prepare; ``parts_for(workers)`` of them for a backend that prepares in parts."""
    firsts: dict[str, str] = {}
    for device in devices:
        if device.type != "cpu":
            firsts.setdefault(device.type, str(device))
    return _spawn([backend.spec for backend in backends], list(firsts.values()), workers)


def early_targets(backend_option: str | None, device_option: str | None, default_backends: Iterable[str],
                  gpu_nodes: Iterable[str] | None = None) -> tuple[list[str], list[str]]:
    """The backend specs and non-CPU devices a warm-up can be started for from the options as typed, before
    torch is imported: none where no GPU driver's device node exists (a CPU-only machine, or a GPU named on one:
    the run's own options check says so). The default devices and ``all`` mean this machine's GPU."""
    from .registry import parse_backend_option

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


def start_early(backend_option: str | None, device_option: str | None, default_backends: Iterable[str],
                workers: object = None) -> list[subprocess.Popen]:
    """``start`` from the options as typed (``early_targets``): the warm-up overlaps the controller's own start."""
    specs, devices = early_targets(backend_option, device_option, default_backends)
    return _spawn(specs, devices, workers)


def worth_warming(spec: str) -> bool:
    """Whether ``spec``'s warm-up may prepare something (``OWN_PREPARED``): not this package's import-only ones."""
    from .registry import BUILTIN_BACKENDS, entry_point_paths

    own = spec in BUILTIN_BACKENDS or entry_point_paths().get(spec, "").startswith(_PACKAGE)
    return spec in OWN_PREPARED or not own


def _spawn(specs: list[str], devices: list[str], workers: object = None) -> list[subprocess.Popen]:
    if os.environ.get(SWITCH) == "0":
        return []
    processes = []
    for spec in filter(worth_warming, specs):
        parts = parts_for(workers) if spec in PREPARED_IN_PARTS else 1
        for device in devices:
            for part in range(parts):
                # No process to spare (OSError): the workers prepare the backend themselves, as without this.
                with contextlib.suppress(OSError):
                    processes.append(subprocess.Popen(
                        [sys.executable, "-m", _MODULE, spec, device, f"{part}/{parts}"],
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
    """``SPEC DEVICE [PART/PARTS]``: 0 where the backend can run on the device (and its preparation ended), else 1."""
    interruptible()
    import torch

    from .registry import load_backend

    spec, device, *share = argv
    part, parts = (int(n) for n in share[0].split("/")) if share else (0, 1)
    backend = load_backend(spec)
    if backend.unavailable_reason(torch.device(device)) is not None:
        return 1
    backend.prepare(torch.device(device), prepared_dims(), part, parts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
