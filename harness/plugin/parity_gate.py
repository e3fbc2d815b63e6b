"""The RL parity gate's options: pairs of (backend, device) that must give bit-identical outputs for the same input
bits, and the execution modes (``torch.compile``, CUDA-graph replay) a backend is also run under.

``--require-parity=A:B`` names the pair by backend name, each side optionally with ``@device``
(``triton:cuda``, ``native@cpu:native@cuda``). ``--modes=compile,cudagraph`` adds, for every selected backend,
a pair (backend, backend under that mode): the trainer's eager kernel against the sampler's compiled or
graph-captured one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..running.backend import Backend
from ..running.modes import MODES


@dataclass(frozen=True)
class ParitySpec:
    """One required pair: backend names and the devices each side runs on (None: the run's devices)."""

    left: str
    right: str
    left_device: str | None = None
    right_device: str | None = None

    @property
    def label(self) -> str:
        def side(name: str, device: str | None) -> str:
            return name + (f"@{device}" if device else "")

        return f"{side(self.left, self.left_device)}={side(self.right, self.right_device)}"



@dataclass(frozen=True)
class ParityPair:
    """One required pair on concrete devices, as the parity gate's tests are parametrized."""

    spec: ParitySpec
    left_backend: Backend
    right_backend: Backend
    left_device: torch.device
    right_device: torch.device
    mode: str = ""

    @property
    def label(self) -> str:
        return f"{self.left_backend.name}={self.right_backend.name}"

    @property
    def device_label(self) -> str:
        if self.left_device == self.right_device:
            return str(self.left_device)
        return f"{self.left_device}/{self.right_device}"

def parse_parity(value: str) -> ParitySpec:
    """``A:B`` or ``A@dev:B@dev``; the error names what was wrong."""
    parts = value.split(":")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"--require-parity={value}: give two backend names as A:B (each may end in @device, "
                         "e.g. native@cpu:native@cuda); module paths go in --backend, then name them here")
    sides = []
    for part in parts:
        name, _, device = part.partition("@")
        if not name:
            raise ValueError(f"--require-parity={value}: {part!r} names no backend")
        if device:
            try:
                torch.device(device)
            except RuntimeError:
                raise ValueError(f"--require-parity={value}: {device!r} is not a device") from None
        sides.append((name, device or None))
    (left, left_device), (right, right_device) = sides
    if (left, left_device) == (right, right_device):
        raise ValueError(f"--require-parity={value}: a backend is trivially at parity with itself")
    return ParitySpec(left, right, left_device, right_device)


def parse_modes(value: str | None) -> tuple[str, ...]:
    """The modes ``--modes`` widens to the full sweep; ``none`` (alone) widens none and turns the default sample
    off (``sample_on``)."""
    if not value:
        return ()
    modes = tuple(m.strip() for m in value.split(",") if m.strip())
    if "none" in modes:
        if len(modes) > 1:
            raise ValueError(f"--modes={value}: 'none' turns the execution-mode sample off; give it alone")
        return ()
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"--modes={value}: unknown mode {unknown[0]!r}; known: {', '.join(MODES)}")
    return tuple(m for m in modes if m != "eager")


def sample_on(value: str | None) -> bool:
    """Does the default gate run its execution-mode sample (everything but ``--modes=none``)?"""
    return (value or "").strip() != "none"
