"""The environment fingerprint at the top of every report: enough to tell two runs' machines apart."""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
import sys
from collections.abc import Iterable
from typing import Any

import torch

from ...contract import VERSION
from ..running.devices import accelerators, device_name


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def fingerprint(devices: Iterable[torch.device], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Versions, hardware and settings, as an ordered dict of strings."""
    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "harness": package_version("rmsnorm-conformance"),
        "contract version": VERSION,
        "python": platform.python_version() + f" ({sys.implementation.name})",
        "platform": platform.platform(terse=True),
        "torch": torch.__version__,
        "cuda runtime": torch.version.cuda or "none",
        "triton": package_version("triton"),
        "hypothesis": package_version("hypothesis"),
    }
    for device in devices:
        concrete = accelerators() if (device.type == "cuda" and device.index is None) else [device]
        for d in concrete or [device]:
            env[f"device {d}"] = device_name(d)
    env.update(extra or {})
    return env
