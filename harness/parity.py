"""The RL parity gate: pairs of (backend, device) that must give bit-identical outputs for the same input bits,
and the execution modes (``torch.compile``, CUDA-graph replay) a backend is also run under.

``--require-parity=A:B`` names the pair by backend name, each side optionally with ``@device``
(``triton:cuda``, ``native@cpu:native@cuda``). ``--modes=compile,cudagraph`` adds, for every selected backend,
a pair (backend, backend under that mode): the trainer's eager kernel against the sampler's compiled or
graph-captured one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .backend import Backend

MODES = ("eager", "compile", "cudagraph")


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
    if not value:
        return ()
    modes = tuple(m.strip() for m in value.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"--modes={value}: unknown mode {unknown[0]!r}; known: {', '.join(MODES)}")
    return tuple(m for m in modes if m != "eager")


class ModeBackend:
    """A backend's forward run under ``torch.compile`` or captured in a CUDA graph and replayed.

    Both are how an engine runs a kernel at sampling time; both must give the eager call's bits.
    """

    def __init__(self, inner: Backend, mode: str) -> None:
        self.inner = inner
        self.mode = mode
        self.name = f"{inner.name}[{mode}]"
        self.dtypes = inner.dtypes
        self.devices = ("cuda",) if mode == "cudagraph" else inner.device_types
        self._compiled: Any = None

    def unavailable_reason(self, device: torch.device) -> str | None:
        reason = self.inner.unavailable_reason(device)
        if reason:
            return reason
        if self.mode == "compile" and not hasattr(torch, "compile"):
            return f"torch {torch.__version__} has no torch.compile"
        if self.mode == "cudagraph" and torch.device(device).type != "cuda":
            return "CUDA-graph capture needs a CUDA device"
        return None

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if self.mode == "compile":
            if self._compiled is None:
                self._compiled = torch.compile(self.inner.forward, fullgraph=False, dynamic=None)
            return self._compiled(x, weight, eps)
        return self._replayed(x, weight, eps)

    def _replayed(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """Capture the call on static copies of the inputs, replay the graph, return a copy of its output."""
        static_x, static_w = x.clone(), weight.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.inner.forward(static_x, static_w, eps)  # warm-up: first-call work must not be captured
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self.inner.forward(static_x, static_w, eps)
        static_x.copy_(x)
        static_w.copy_(weight)
        graph.replay()
        torch.cuda.synchronize()
        return static_out.clone()
