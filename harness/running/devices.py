"""Which devices a run covers: parsing ``--device``, what is present, and how to name a device in a report."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

import torch


def accelerators() -> list[torch.device]:
    """Every CUDA (or ROCm) device torch can see."""
    if not torch.cuda.is_available():
        return []
    return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]


def default_devices() -> list[torch.device]:
    """The CPU plus every accelerator present."""
    return [torch.device("cpu"), *accelerators()]


def parse_device_option(value: str | None) -> list[torch.device]:
    """``cpu``, ``cuda``, ``cuda:N``, ``all`` or a comma list of them; empty means the default."""
    if not value:
        return default_devices()
    devices: list[torch.device] = []
    for item in (part.strip() for part in value.split(",") if part.strip()):
        if item == "all":
            expanded = default_devices()
        elif item == "cuda":
            # "This process's GPU": under pytest-xdist each worker takes its own (see worker_device), and
            # test ids stay the same on every worker, as xdist requires.
            expanded = [torch.device("cuda")]
        else:
            try:
                expanded = [torch.device(item)]
            except RuntimeError:
                raise ValueError(f"--device={value!r}: {item!r} is not a device "
                                 f"(use cpu, cuda, cuda:N or all)") from None
        devices += [d for d in expanded if d not in devices]
    return devices


def worker_index(worker: str | None = None) -> int:
    """0 outside pytest-xdist; N for worker 'gwN'."""
    worker = worker if worker is not None else os.environ.get("PYTEST_XDIST_WORKER", "")
    digits = worker.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


def worker_device(device: torch.device, *, worker: str | None = None, count: int | None = None) -> torch.device:
    """The concrete device a test runs on: an index-less 'cuda' becomes this worker's own GPU.

    Worker gwN takes GPU N modulo the GPU count, so `pytest -n 8 --device=cuda` on an 8-GPU host puts one
    worker on each GPU; explicit `cuda:N` devices are left alone.
    """
    if device.type != "cuda" or device.index is not None:
        return device
    if count is None:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return torch.device("cuda", worker_index(worker) % count) if count else torch.device("cuda", 0)


def device_unavailable_reason(device: torch.device) -> str | None:
    """None if torch can run on ``device`` here, else why not."""
    if device.type == "cpu":
        return None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return "no CUDA device is available on this machine"
        if device.index is not None and device.index >= torch.cuda.device_count():
            return f"{device} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)"
        return None
    return f"device type {device.type!r} is not supported by the harness"


def device_name(device: torch.device) -> str:
    """A human name for the hardware behind ``device``, for the report's environment table."""
    if device.type == "cuda" and device_unavailable_reason(device) is None:
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return platform.processor() or platform.machine() or "cpu"
    return str(device)


def device_id(device: torch.device) -> str:
    """The short form used in test ids and report rows: 'cpu', 'cuda:0'."""
    return str(device)


def worker_cpu_threads(environ: Mapping[str, str] | None = None, cores: int | None = None) -> int | None:
    """The intra-op threads one pytest-xdist worker should give torch on the CPU: its share of the cores, so N
    workers do not each start a thread per core (on 2 cores, `-n 2` with 2 threads a worker ran the threshold
    checks twice as slowly, with three times the CPU time). None outside xdist, or where the user chose
    (``OMP_NUM_THREADS``)."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    if "PYTEST_XDIST_WORKER" not in env or env.get("OMP_NUM_THREADS"):
        return None
    workers = max(1, int(env.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    return max(1, (cores if cores is not None else (os.cpu_count() or 1)) // workers)
