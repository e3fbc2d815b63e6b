"""Execution modes a backend also runs under: ``torch.compile`` and CUDA-graph capture and replay, the ways an
engine runs a kernel at sampling time, ``torch.use_deterministic_algorithms(True)``, which RL trainers turn on, and
other counts of intra-op threads. The parity gate (``--modes``) holds each mode's forward to eager's over the full
sweep; by default a small sample of every entry point is held to eager's bits (``axis_a.execution_mode``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .backend import Backend, same_layout_copy

MODES = ("eager", "compile", "cudagraph", "deterministic")
# Intra-op thread counts a CPU call is also made with, beside the machine's own count: a CPU kernel may split a row's
# reduction (or dw's sum over rows) over its threads, and under pytest-xdist each worker runs one thread a core it was
# dealt, so the paths of 4 threads and more never ran on a small CI machine.
THREAD_COUNTS = (1, 2, 4)
# The entry points a mode wraps, each under the backend's own method of that name.
WRAPPED = ("forward", "forward_fp32", "fused_add", "forward_offset", "forward_unweighted")
# Declarations a wrapped backend keeps: how its entry points are called and what they take.
KEPT = ("dtype_pairs", "fused_add_in_place", "fused_add_fp32_residual", "offset_dtype", "rounding_class",
        "layouts", "min_dim", "max_dim", "dim_multiple_of", "fixed_eps")
# The torch.compile backend per device type: Inductor generates the code an engine's compiled graph runs. On the
# CPU the default gate's sample traces with Dynamo and runs AOTAutograd's graph eagerly: the kernel's compiled
# path (torch.compiler.is_compiling(), graph breaks, fake kernels, functionalised in-place writes) without
# Inductor's C++ build, which costs 3 s a graph on the CPU and 30 s for the first (measured, torch 2.13, 2
# cores). --modes=compile compiles with Inductor everywhere.
SAMPLE_COMPILERS = {"cpu": "eager"}
DEFAULT_COMPILER = "inductor"
# Dynamo recompiles a function per dtype, stride pattern and rank; past its limit it runs the eager code silently,
# and the compiled path would go unchecked. Calls made here allow this many before that happens.
RECOMPILE_LIMIT = 64


def compile_settings() -> dict[str, Any]:
    """Dynamo's settings for the harness's compiled calls, whatever the process set before: the recompile limits
    above, errors raised (``suppress_errors`` would run the eager code in their place, and the compiled path would
    go unchecked) and Dynamo on (``disable``, or TORCH_COMPILE_DISABLE=1, made torch.compile return the function
    itself: the compiled path was never run, and its check compared eager with eager)."""
    import torch._dynamo.config as dynamo_config

    wanted = {"recompile_limit": RECOMPILE_LIMIT, "accumulated_recompile_limit": RECOMPILE_LIMIT * 16,
              "suppress_errors": False, "disable": False}
    return {name: value for name, value in wanted.items() if hasattr(dynamo_config, name)}


class ModeBackend:
    """A backend's entry points run under ``torch.compile``, captured in a CUDA graph and replayed, or under
    ``torch.use_deterministic_algorithms(True)``.

    The first two are how an engine runs a kernel at sampling time, the third how many RL trainers run it; each must
    give the eager call's bits. ``compiler`` is the torch.compile backend (default: Inductor).
    """

    def __init__(self, inner: Backend, mode: str, *, compiler: str = DEFAULT_COMPILER,
                 dynamic: bool | None = None) -> None:
        if mode not in MODES[1:]:
            raise ValueError(f"unknown execution mode {mode!r}; known: {', '.join(MODES[1:])}")
        self.inner = inner
        self.mode = mode
        self.compiler = compiler
        self.dynamic = dynamic
        self.name = f"{inner.name}[{mode}]"
        self.dtypes = inner.dtypes
        self.devices = ("cuda",) if mode == "cudagraph" else inner.device_types
        for attribute in KEPT:
            if getattr(inner.impl, attribute, None) is not None:
                setattr(self, attribute, getattr(inner.impl, attribute))
        for method in WRAPPED[1:]:
            if callable(getattr(inner.impl, method, None)):
                setattr(self, method, self._wrapped(method))
        self._compiled: dict[str, Any] = {}

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
        return self._run("forward", x, weight, eps)

    def _wrapped(self, method: str) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            return self._run(method, *args)

        call.__name__ = method
        return call

    def _run(self, method: str, *args: Any) -> Any:
        if self.mode == "compile":
            with torch._dynamo.config.patch(**compile_settings()):
                if method not in self._compiled:
                    self._compiled[method] = torch.compile(getattr(self.inner.impl, method), backend=self.compiler,
                                                           fullgraph=False, dynamic=self.dynamic)
                return self._compiled[method](*args)
        if self.mode == "deterministic":
            with deterministic_algorithms():
                return getattr(self.inner.impl, method)(*args)
        return self._replayed(method, args)

    def _replayed(self, method: str, args: tuple[Any, ...]) -> Any:
        """Capture the call on static copies of the inputs (their strides kept), replay the graph, return copies
        of its outputs; an in-place fused add's writes land in the caller's x and residual."""
        fn = getattr(self.inner.impl, method)
        static = [same_layout_copy(a) if isinstance(a, torch.Tensor) else a for a in args]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn(*static)  # warm-up: first-call work (allocation, autotuning, JIT) must not be captured
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn(*static)
        for s, a in zip(static, args, strict=True):
            if isinstance(a, torch.Tensor):
                s.copy_(a)
        graph.replay()
        torch.cuda.synchronize()
        in_place = method == "fused_add" and bool(getattr(self, "fused_add_in_place", False))
        if in_place:
            for s, a in zip(static[:2], args[:2], strict=True):
                a.copy_(s)
        if isinstance(out, tuple | list):
            return type(out)(o.clone() if isinstance(o, torch.Tensor) else o for o in out)
        return out.clone() if isinstance(out, torch.Tensor) else out


_SAMPLE_BACKENDS: dict[tuple[int, str, str], Backend] = {}


def sample_backend(inner: Backend, mode: str, device: torch.device) -> Backend:
    """``inner`` under ``mode`` for the default gate's sample, one per (backend, mode, device type) for the life
    of the process, so that what torch.compile built for one test is reused by the next."""
    compiler = SAMPLE_COMPILERS.get(device.type, DEFAULT_COMPILER)
    key = (id(inner), mode, compiler)
    if key not in _SAMPLE_BACKENDS:
        # Static shapes: the sample's few shapes trace faster one by one than as a dynamic graph (0.3 s against 0.5-1 s
        # a trace for the native backend on the CPU), and a full sweep is --modes' job. On an H200 Dynamo's automatic
        # dynamic shapes saved Inductor builds, but native's dynamic graph did not keep eager's bits
        # (axis_a.execution_mode, bf16): the sample holds the static graphs engines capture per batch size.
        _SAMPLE_BACKENDS[key] = Backend(ModeBackend(inner, mode, compiler=compiler, dynamic=False), spec=inner.spec)
    return _SAMPLE_BACKENDS[key]


def sample_modes(device: torch.device) -> tuple[str, ...]:
    """The modes the default gate's sample runs on ``device``: compile and deterministic algorithms everywhere,
    CUDA-graph replay on a GPU."""
    return ("compile", "cudagraph", "deterministic") if device.type == "cuda" else ("compile", "deterministic")


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """``torch.use_deterministic_algorithms(True)`` inside, the process's own setting (and warn_only) put back
    after."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def thread_counts() -> tuple[int, ...]:
    """The intra-op thread counts a CPU check runs with: THREAD_COUNTS and the machine's CPU count."""
    return tuple(sorted({*THREAD_COUNTS, os.cpu_count() or 1}))


@contextlib.contextmanager
def intra_op_threads(count: int) -> Iterator[None]:
    """``torch.set_num_threads(count)`` inside, the process's own count put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def describe_sample(device_types: tuple[str, ...]) -> str:
    """The sample's modes in words, for the report's environment."""
    parts = []
    for kind in dict.fromkeys(device_types):
        compiler = SAMPLE_COMPILERS.get(kind, DEFAULT_COMPILER)
        graphs = ", CUDA-graph replay" if kind == "cuda" else ""
        threads = ", ".join(map(str, thread_counts())) if kind == "cpu" else ""
        parts.append(f"{kind}: torch.compile ({compiler}){graphs}, deterministic algorithms, no_grad, inference_mode"
                     + (f", {threads} intra-op threads" if threads else ""))
    return "; ".join(parts)
