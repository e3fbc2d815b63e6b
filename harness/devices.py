"""Which devices a run covers: parsing ``--device``, what is present, and how to name a device in a report."""

from __future__ import annotations

import platform

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
            # Without a GPU, keep the request so that it is reported as not run, with the reason.
            expanded = accelerators() or [torch.device("cuda", 0)]
        else:
            try:
                expanded = [torch.device(item)]
            except RuntimeError:
                raise ValueError(f"--device={value!r}: {item!r} is not a device "
                                 f"(use cpu, cuda, cuda:N or all)") from None
            if expanded[0].type == "cuda" and expanded[0].index is None:
                expanded = [torch.device("cuda", 0)]
        devices += [d for d in expanded if d not in devices]
    return devices


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
