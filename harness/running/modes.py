"""Execution modes a backend also runs under: ``torch.compile`` and CUDA-graph capture and replay, the ways an
engine runs a kernel at sampling time. The parity gate holds each mode's bits to eager's.
"""

from __future__ import annotations

from typing import Any

import torch

from rmsnorm_conformance.harness.running.backend import Backend

MODES = ("eager", "compile", "cudagraph")


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
