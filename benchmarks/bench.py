"""Bandwidth and latency of every RMSNorm backend that can run here, against a device-to-device copy of the
same bytes, F.rms_norm and torch.compile of the seed formula, all in one run.

    python benchmarks/bench.py                      # the full run on a GPU: reports/gpu/bench.json, .md
    python benchmarks/bench.py --quick --out /tmp/b.json
    python benchmarks/bench.py --device cpu --quick # a smoke run of this script on a machine without a GPU

GB/s counts the bytes a kernel must move: forward x read + y written + weight read; fused add (variant
``fused_add``) x and residual read, y and residual_out written, weight read; backward x and dy read, dx
written, weight read, dw written; the in-place fused add (variant ``fused_add_``) the fused add's bytes. Every
``ratio_to_copy`` is against ``y.copy_(x)`` over the same x timed in the same run (``copy_gbps``).
Forward and backward times are medians of device-event timings after warm-up (triton.testing.do_bench
where Triton is installed); the forward and the fused add take ``--rounds`` of them (5 on a GPU) of the copy and
every subject in turns and report the medians over rounds, each round's ratio beside them; latency is the median
per-call time of back-to-back calls, host overhead included, since at a few rows that overhead is what a caller
waits for. ``batch_invariant`` is a probe:
rows [0:b] computed alone, b in 1, 2, 3, 8, 15, against the same rows of the measured batch, bitwise.
Parity records (kind ``parity``) give the share of bitwise-equal elements between the native reference on
the CPU, the native reference on the device and each of the project's backends, on the same random rows, for
every entry point (forward, forward_fp32, dx, dw, fused add, weight offset, no weight). The markdown ends with
the kernels' targets against the run's figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

# The installed package is what runs (pip install -e . in a clone, the wheel on a GPU machine): this tree's
# rmsnorm_conformance/ folder alone is not the package, so the tree is not put on sys.path.
ROOT = Path(__file__).resolve().parents[1]

EPS = 1e-6
BACKENDS = ("native", "triton", "cuda")
# Qwen3-8B: the hidden-size norm over 64k tokens, and QK-norm (head_dim 128) over 16k tokens x 128 heads; a
# wider hidden size, and a batch small enough (32 MB) for launch and tail effects to show.
FULL_SHAPES = ((65536, 4096), (2097152, 128), (16384, 8192), (4096, 4096))
QUICK_SHAPES = ((8192, 4096), (262144, 128))
CPU_SHAPES = ((64, 4096), (2048, 128))
# The backward is timed at the first two shapes of a run, and on a GPU also at a training microbatch's shapes (a
# few thousand tokens of a 4096 hidden size), where dw's reduction over few rows decides the speed.
BACKWARD_SHAPE_COUNT = 2
TRAINING_SHAPES = ((4096, 4096), (16384, 4096))
# The backward's targets: fraction of a copy at least, by backend, at the two large shapes and at the training ones;
# CUDA is also to be ahead of quack at the large shapes.
BACKWARD_BOUNDS = {"cuda": 0.95, "triton": 0.90}
TRAINING_BOUND = 0.85
# The project's own backends: held to bitwise parity with each other in the parity phase.
OWN_BACKENDS = ("native", "triton", "cuda")
LATENCY_ROWS = (1, 8, 64, 256)
LATENCY_DIMS = (4096, 128)
PROBE_ROWS = (1, 2, 3, 8, 15)
DEFAULT_OUT = "reports/gpu/bench.json"


@dataclass
class Subject:
    """One thing to time: a backend under test or a peer. ``forward(x, w)`` returns y in x.dtype."""

    name: str
    kind: str  # "backend" or "peer"
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    backward: bool = True
    # (x, residual, w) -> (y, residual_out), where the subject has the fused residual add
    fused_add: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple] | None = None
    # (x, residual, w) -> None, y into x and residual_out into residual, where the subject has it in place
    fused_add_: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Any] | None = None
    impl: Any = None  # the backend object, for the parity phase


def _seed_formula(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    from rmsnorm_conformance.contract.reference import seed_formula_fp32

    return seed_formula_fp32(x, w, eps).to(x.dtype)


def _eager_fused_add(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> tuple:
    """The fused add as two eager ops: what a model without a fused kernel runs."""
    residual = x + r
    return F.rms_norm(residual, (x.shape[-1],), w, EPS), residual


def subjects(
    device: torch.device, *, backends: tuple[str, ...] = BACKENDS, compile_peer: bool
) -> list[Subject]:
    """The backends that load and can run on ``device`` (the others are printed with their reason), then
    the peers."""
    from rmsnorm_conformance.harness.running.registry import load_backend

    found: list[Subject] = []
    for spec in backends:
        try:
            backend = load_backend(spec)
        except Exception as exc:  # any backend may fail to load; the benchmark goes on without it
            print(f"skip {spec}: cannot be loaded ({type(exc).__name__}: {exc})")
            continue
        reason = backend.unavailable_reason(device)
        if reason is not None:
            print(f"skip {spec}: {reason}")
            continue
        fused = getattr(backend.impl, "fused_add", None)
        in_place = getattr(backend.impl, "fused_add_", None)
        found.append(Subject(spec, "backend", lambda x, w, b=backend: b.forward(x, w, EPS),
                             backward=backend.supports_backward(device),
                             fused_add=fused and (lambda x, r, w, f=fused: f(x, r, w, EPS)),
                             fused_add_=in_place and (lambda x, r, w, f=in_place: f(x, r, w, EPS)),
                             impl=backend.impl))
    found.append(Subject("F.rms_norm", "peer", lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS),
                         fused_add=_eager_fused_add))
    if compile_peer:
        import torch._dynamo

        # Every shape and dtype of the run is a new guard; do not let dynamo fall back to eager midway.
        for knob in ("cache_size_limit", "recompile_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 256)
        try:  # the backward is timed by repeating it over one graph, which donated buffers forbid
            import torch._functorch.config

            torch._functorch.config.donated_buffer = False
        except (ImportError, AttributeError):
            pass
        found.append(Subject("torch.compile(seed)", "peer", torch.compile(_seed_formula)))
    return found


# ------------------------------------------------------------------------------------------------------
# Timing.


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_us(fn: Callable[[], Any], device: torch.device, quick: bool) -> float:
    """Median time of one call on the device, after warm-up."""
    if device.type == "cuda":
        try:
            from triton.testing import do_bench
        except ImportError:
            do_bench = None
        if do_bench is not None:
            warmup, rep = (5, 20) if quick else (25, 100)
            return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median")) * 1e3
        times = []
        for i in range(10 + (20 if quick else 100)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            if i >= 10:
                times.append(start.elapsed_time(end) * 1e3)
        return statistics.median(times)
    fn()
    times = []
    for _ in range(3 if quick else 10):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def per_call_us(fn: Callable[[], Any], device: torch.device, calls: int) -> float:
    """Back-to-back calls timed as one span, host overhead included: what a small batch costs a caller."""
    for _ in range(max(calls // 20, 2)):
        fn()
    _sync(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / calls
    start_s = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start_s) * 1e6 / calls


def graph_replay_us(fn: Callable[[], Any], device: torch.device, quick: bool) -> float:
    """Median time of one replay of ``fn`` captured in a CUDA graph: the device's time alone, without the host's
    work between launches (the autograd engine, Python launchers), which a call of a few tens of microseconds can
    leave the GPU waiting on even behind median_us's cache flush."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up outside the capture: compiles, caches and the allocator's pool
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return median_us(graph.replay, device, quick)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def probe_batch_invariance(subject: Subject, x: torch.Tensor, w: torch.Tensor, full: torch.Tensor) -> bool:
    return all(
        torch.equal(_bits(subject.forward(x[:b].clone(), w)), _bits(full[:b]))
        for b in PROBE_ROWS if b <= len(x)
    )


# ------------------------------------------------------------------------------------------------------
# Measurements.


def _record(subject: str, kind: str, rows: int, dim: int, dtype: torch.dtype, nbytes: int, us: float,
            copy_us: float, variant: str = "rms_norm", **extra: Any) -> dict[str, Any]:
    gbps = nbytes / us / 1e3
    copy_gbps = nbytes / copy_us / 1e3 if copy_us else None
    return {
        "backend": subject, "kind": kind, "variant": variant, "rows": rows, "dim": dim,
        "dtype": str(dtype).removeprefix("torch."),
        "gbps": round(gbps, 1), "copy_gbps": copy_gbps and round(copy_gbps, 1),
        "ratio_to_copy": copy_gbps and round(gbps / copy_gbps, 3), "median_us": round(us, 2), **extra,
    }


def _inputs(rows: int, dim: int, dtype: torch.dtype, device: torch.device, grad: bool = False):
    gen = torch.Generator(device=device).manual_seed(rows * 31 + dim)
    x = torch.randn(rows, dim, device=device, generator=gen).to(dtype)
    w = torch.randn(dim, device=device, generator=gen).to(dtype)
    g = torch.randn(rows, dim, device=device, generator=gen).to(dtype) if grad else None
    return x, w, g


def _attempt(label: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    try:
        return fn()
    except Exception as exc:  # one peer failing (an inductor without a compiler, say) spoils no other number
        print(f"  {label}: failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
        return None


def _rounds(copy: Callable[[], Any], timed: dict[str, Callable[[], Any]], device: torch.device, quick: bool,
            rounds: int) -> tuple[list[float], dict[str, list[float]]]:
    """The copy and each of ``timed`` measured ``rounds`` times in turns (copy, then each subject, again and again):
    a launch of 20 µs reads a few percent apart between measurements of one process, so one measurement a subject
    leaves its ratio to the copy at the mercy of that spread (seen on an H200). A subject that fails in a round is
    dropped from the later ones."""
    copy_us: list[float] = []
    times: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(rounds):
        copy_us.append(median_us(copy, device, quick))
        for name, fn in timed.items():
            if len(times[name]) < len(copy_us) - 1:
                continue
            try:
                times[name].append(median_us(fn, device, quick))
            except Exception as exc:
                print(f"  {name}: failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
    return copy_us, times


def _with_rounds(rec: dict[str, Any], copy_us: list[float], us: list[float]) -> dict[str, Any]:
    """``rec`` with its rounds: each round's ratio to that round's copy, and how many rounds there were. Its
    ``median_us`` and ``ratio_to_copy`` are the medians' (the subject's median over the copy's median)."""
    if len(us) > 1:
        rec["rounds"] = len(us)
        rec["round_ratios"] = [round(c / u, 3) for c, u in zip(copy_us, us, strict=False)]
    return rec


def _spread(rec: dict[str, Any]) -> str:
    """", rounds LO-HI": the range of ``rec``'s per-round ratios, for a printed line (empty with one round)."""
    ratios = rec.get("round_ratios")
    return f", rounds {min(ratios):.3f}-{max(ratios):.3f}" if ratios else ""


def bench_forward(subjects_: list[Subject], shapes, dtypes, device, quick, rounds: int = 1) -> list[dict[str, Any]]:
    records = []
    for dtype in dtypes:
        for rows, dim in shapes:
            x, w, _ = _inputs(rows, dim, dtype, device)
            y = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
            invariant: dict[str, bool] = {}
            for s in subjects_:
                def probe(s=s, x=x, w=w) -> dict[str, Any]:
                    full = s.forward(x, w)
                    return {"invariant": probe_batch_invariance(s, x, w, full)}
                got = _attempt(f"forward {s.name} {rows}x{dim} {dtype}", probe)
                if got is not None:
                    invariant[s.name] = got["invariant"]
            timed = {s.name: (lambda s=s, x=x, w=w: s.forward(x, w)) for s in subjects_ if s.name in invariant}
            copy_rounds, times = _rounds(lambda x=x, y=y: y.copy_(x), timed, device, quick, rounds)
            copy_us = statistics.median(copy_rounds)
            records.append(_record("copy", "forward", rows, dim, dtype, nbytes, copy_us, copy_us))
            for name, us in times.items():
                if not us:
                    continue
                rec = _with_rounds(_record(name, "forward", rows, dim, dtype, nbytes, statistics.median(us),
                                           copy_us, batch_invariant=invariant[name]), copy_rounds, us)
                records.append(rec)
                print(f"  forward {name:>20} {rows}x{dim} {rec['dtype']:>8}: {rec['gbps']:8.0f} GB/s "
                      f"({rec['ratio_to_copy']:.3f} of copy{_spread(rec)}) invariant={rec['batch_invariant']}")
            del x, w, y
            _free(device)
    return records


def bench_backward(subjects_: list[Subject], shapes, dtypes, device, quick) -> list[dict[str, Any]]:
    records = []
    for dtype in dtypes:
        for rows, dim in shapes:
            x, w, g = _inputs(rows, dim, dtype, device, grad=True)
            big = torch.empty_like(x)
            # x and dy read, dx written, weight read, dw written.
            nbytes = 3 * x.numel() * x.element_size() + 2 * w.numel() * w.element_size()
            copy_us = median_us(lambda x=x, big=big: big.copy_(x), device, quick)
            copy_bytes = 2 * x.numel() * x.element_size()
            copy_gbps = copy_bytes / copy_us / 1e3
            del big
            for s in (s for s in subjects_ if s.backward and (s.kind == "backend" or s.name == "F.rms_norm"
                                                             or dtype == dtypes[0])):
                def one(s=s, x=x, w=w, g=g, nbytes=nbytes, rows=rows, dim=dim, dtype=dtype,
                        copy_gbps=copy_gbps):
                    xr, wr = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
                    y = s.forward(xr, wr)
                    grads = lambda: torch.autograd.grad(y, (xr, wr), g, retain_graph=True)  # noqa: E731
                    us = median_us(grads, device, quick)
                    rec = _record(s.name, "backward", rows, dim, dtype, nbytes, us, 0)
                    rec["copy_gbps"] = round(copy_gbps, 1)
                    rec["ratio_to_copy"] = round(rec["gbps"] / copy_gbps, 3)
                    if device.type == "cuda" and (s.name in OWN_BACKENDS or s.name == "F.rms_norm"):
                        # The project's kernels and torch's only: a third-party kernel that breaks a capture
                        # would cost the run its other figures.
                        try:
                            graph_us = graph_replay_us(grads, device, quick)
                        except Exception as exc:
                            print(f"  backward {s.name} {rows}x{dim}: no graph replay ({type(exc).__name__})")
                        else:
                            rec["graph_us"] = round(graph_us, 2)
                            rec["graph_ratio_to_copy"] = round(nbytes / graph_us / 1e3 / copy_gbps, 3)
                    return rec
                rec = _attempt(f"backward {s.name} {rows}x{dim} {dtype}", one)
                if rec:
                    records.append(rec)
                    graph = (f", graph replay {rec['graph_ratio_to_copy']:.3f}" if "graph_ratio_to_copy" in rec
                             else "")
                    print(f"  backward {s.name:>19} {rows}x{dim} {rec['dtype']:>8}: {rec['gbps']:8.0f} GB/s "
                          f"({rec['ratio_to_copy']:.3f} of copy{graph})")
                _free(device)
            del x, w, g
            _free(device)
    return records


def bench_fused_add(subjects_: list[Subject], shapes, dtype, device, quick, rounds: int = 1) -> list[dict[str, Any]]:
    """The fused residual add: x and residual read, y and residual_out written, weight read. Out of place in rounds
    with the copy (``_rounds``); in place once a subject, after them."""
    records = []
    for rows, dim in shapes:
        x, w, r = _inputs(rows, dim, dtype, device, grad=True)
        y = torch.empty_like(x)
        nbytes = 4 * x.numel() * x.element_size() + w.numel() * w.element_size()
        with_add = [s for s in subjects_ if s.fused_add is not None]
        timed = {s.name: (lambda s=s, x=x, r=r, w=w: s.fused_add(x, r, w)) for s in with_add}
        copy_rounds, times = _rounds(lambda x=x, y=y: y.copy_(x), timed, device, quick, rounds)
        copy_us = statistics.median(copy_rounds)
        copy_gbps = 2 * x.numel() * x.element_size() / copy_us / 1e3  # the copy's own bytes: x read, y written
        del y
        for s in with_add:
            if times[s.name]:
                rec = _record(s.name, "forward", rows, dim, dtype, nbytes, statistics.median(times[s.name]), 0,
                              variant="fused_add")
                rec["copy_gbps"] = round(copy_gbps, 1)
                rec["ratio_to_copy"] = round(rec["gbps"] / copy_gbps, 3)
                # Per round: the same bytes' ratio, the fused add moving twice the copy's.
                rec = _with_rounds(rec, [2 * c for c in copy_rounds], times[s.name])
                records.append(rec)
                print(f"  fused_add {s.name:>18} {rows}x{dim} {rec['dtype']:>8}: {rec['gbps']:8.0f} GB/s "
                      f"({rec['ratio_to_copy']:.3f} of copy{_spread(rec)})")
            if s.fused_add_ is not None:
                def in_place(s=s, x=x, w=w, r=r, rows=rows, dim=dim, nbytes=nbytes, copy_gbps=copy_gbps):
                    # x and residual change call to call, as through a model's layers; the bytes do not.
                    xi, ri = x.clone(), r.clone()
                    us = median_us(lambda: s.fused_add_(xi, ri, w), device, quick)
                    rec = _record(s.name, "forward", rows, dim, dtype, nbytes, us, 0, variant="fused_add_")
                    rec["copy_gbps"] = round(copy_gbps, 1)
                    rec["ratio_to_copy"] = round(rec["gbps"] / copy_gbps, 3)
                    return rec
                rec = _attempt(f"fused_add_ {s.name} {rows}x{dim} {dtype}", in_place)
                if rec:
                    records.append(rec)
                    print(f"  fused_add_ {s.name:>17} {rows}x{dim} {rec['dtype']:>8}: {rec['gbps']:8.0f} GB/s "
                          f"({rec['ratio_to_copy']:.3f} of copy, in place)")
            _free(device)
        del x, w, r
        _free(device)
    return records


PARITY_DIMS = (128, 4096, 4097, 8192, 20000)
PARITY_ROWS = 1000
PARITY_OUTPUTS = ("y", "y_fp32", "dx", "dw", "fused_y", "fused_residual", "offset_y", "unweighted_y")


def _parity_outputs(impl: Any, x: torch.Tensor, w: torch.Tensor, g: torch.Tensor,
                    r: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every entry point's outputs on the CPU: forward (and its dx, dw), forward_fp32, fused add, weight offset,
    no weight; an entry the backend lacks is left out."""
    out: dict[str, torch.Tensor] = {}
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = impl.forward(xr, wr, EPS)
    y.backward(g)
    out.update(y=y.detach(), dx=xr.grad, dw=wr.grad)
    calls = {"y_fp32": ("forward_fp32", (x, w, EPS)), "fused_y": ("fused_add", (x, r, w, EPS)),
             "offset_y": ("forward_offset", (x, w, EPS)), "unweighted_y": ("forward_unweighted", (x, EPS))}
    for name, (method, args) in calls.items():
        call = getattr(impl, method, None)
        if call is None:
            continue
        result = call(*args)
        if name == "fused_y":
            out["fused_y"], out["fused_residual"] = result
        else:
            out[name] = result
    return {k: v.detach().cpu() for k, v in out.items()}


def bench_parity(subjects_: list[Subject], device: torch.device) -> list[dict[str, Any]]:
    """Share of bitwise-equal outputs between the native reference on the CPU and on ``device`` and each of the
    project's backends on ``device``, on the same rows drawn on the CPU (rows scaled over six decades), for every
    entry point."""
    from rmsnorm_conformance.backends.native import NativeRMSNormOp

    native = NativeRMSNormOp()
    backends = [s for s in subjects_ if s.kind == "backend" and s.name in OWN_BACKENDS and s.name != "native"]
    records = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for dim in PARITY_DIMS:
            rows = PARITY_ROWS if dim <= 8192 else 64
            gen = torch.Generator().manual_seed(dim)
            x = (torch.randn(rows, dim, generator=gen) * torch.logspace(-3, 3, rows).unsqueeze(1)).to(dtype)
            w, g = torch.randn(dim, generator=gen).to(dtype), torch.randn(rows, dim, generator=gen).to(dtype)
            r = torch.randn(rows, dim, generator=gen).to(dtype)
            cpu = _parity_outputs(native, x, w, g, r)
            on_device = [t.to(device) for t in (x, w, g, r)]
            peers = {"native": _parity_outputs(native, *on_device)}
            for s in backends:
                try:
                    peers[s.name] = _parity_outputs(s.impl, *on_device)
                except Exception as exc:  # one backend failing spoils no other comparison
                    print(f"  parity {s.name}: {type(exc).__name__}: {exc}")
            pairs = [("native cpu", cpu, f"{name} {device.type}", out) for name, out in peers.items()]
            names = list(peers)
            pairs += [(f"{a} {device.type}", peers[a], f"{b} {device.type}", peers[b])
                      for i, a in enumerate(names) for b in names[i + 1 :]]
            for left, lhs, right, rhs in pairs:
                shares = {what: round(float((_bits(lhs[what]) == _bits(rhs[what])).double().mean()), 6)
                          for what in PARITY_OUTPUTS if what in lhs and what in rhs}
                records.append({"backend": f"{left} | {right}", "kind": "parity", "variant": "rms_norm",
                                "rows": rows, "dim": dim, "dtype": str(dtype).removeprefix("torch."),
                                **{f"equal_{k}": v for k, v in shares.items()}})
                print(f"  parity {dtype} {dim:>5} {left:>12} | {right:<14} " +
                      " ".join(f"{k} {v:.6f}" for k, v in shares.items()))
            _free(device)
    return records


def bench_latency(subjects_: list[Subject], dtype, device, quick) -> list[dict[str, Any]]:
    """Per-call time at small batches, rounds interleaved so that a noisy moment of the host hits all."""
    records = []
    calls = 50 if device.type == "cpu" else (200 if quick else 1000)
    rounds = 3 if quick else 7
    for dim in LATENCY_DIMS:
        for rows in LATENCY_ROWS:
            x, w, _ = _inputs(rows, dim, dtype, device)
            y = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
            fns: dict[str, Callable[[], Any]] = {"copy": lambda x=x, y=y: y.copy_(x)}
            for s in subjects_:
                fns[s.name] = lambda s=s, x=x, w=w: s.forward(x, w)
            times: dict[str, list[float]] = {name: [] for name in fns}
            failed: set[str] = set()
            for _ in range(rounds):
                for name, fn in fns.items():
                    if name in failed:
                        continue
                    try:
                        times[name].append(per_call_us(fn, device, calls))
                    except Exception as exc:
                        print(f"  latency {name} {rows}x{dim}: failed ({type(exc).__name__}: {exc})")
                        failed.add(name)
            medians = {name: statistics.median(t) for name, t in times.items() if t}
            base = medians.get("F.rms_norm")
            for name, us in medians.items():
                rec = _record(name, "latency", rows, dim, dtype, nbytes, us, medians["copy"])
                rec["us"] = rec["median_us"]
                rec["rms_norm_us"] = base and round(base, 2)
                rec["ratio_to_rms_norm"] = base and round(us / base, 3)  # below 1: faster than F.rms_norm
                records.append(rec)
            print(f"  latency {rows:>4}x{dim:<5} " + "  ".join(f"{n} {u:.1f}us" for n, u in medians.items()))
            _free(device)
    return records


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------------
# Output.


def write_markdown(path: Path, records: list[dict[str, Any]], env: dict[str, Any]) -> None:
    from tabulate import tabulate

    lines = ["# RMSNorm benchmark", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    titles = {
        ("forward", "rms_norm"): "Forward: GB/s (x read + y written + weight read) and ratio to a copy of the same x",
        ("forward", "fused_add"): "Fused residual add: GB/s (x, residual read; y, residual_out written; weight "
                                  "read) and ratio to a copy's own GB/s",
        ("forward", "fused_add_"): "Fused residual add in place (x and residual overwritten): GB/s and ratio to a "
                                   "copy's own GB/s",
        ("backward", "rms_norm"): "Backward (dx + dw): GB/s (x, dy read; dx written; weight read; dw written); "
                                  "torch.autograd.grad timed as called, and its CUDA-graph replay (the device's "
                                  "time alone) for the project's backends and F.rms_norm",
        ("latency", "rms_norm"): "Latency: microseconds per call, back to back, host overhead included",
        ("parity", "rms_norm"): "Parity: share of bitwise-equal elements (1000 random rows, 64 at 20000 columns; "
                                "y in x's dtype, y_fp32, dx, dw, fused add's y and residual, offset, no weight)",
    }
    for (kind, variant), title in titles.items():
        rows = [r for r in records if r["kind"] == kind and r.get("variant", "rms_norm") == variant]
        if not rows:
            continue
        if kind == "latency":
            table = [(r["backend"], r["dtype"], f"{r['rows']}x{r['dim']}", r["median_us"],
                      r["ratio_to_rms_norm"]) for r in rows]
            headers = ["backend", "dtype", "shape", "us/call", "vs F.rms_norm"]
        elif kind == "parity":
            table = [(r["backend"], r["dtype"], f"{r['rows']}x{r['dim']}",
                      *(r.get(f"equal_{k}", "") for k in PARITY_OUTPUTS)) for r in rows]
            headers = ["pair", "dtype", "shape", *PARITY_OUTPUTS]
        else:
            table = [(r["backend"], r["dtype"], f"{r['rows']}x{r['dim']}", r["median_us"], r["gbps"],
                      r["copy_gbps"], r["ratio_to_copy"]) for r in rows]
            headers = ["backend", "dtype", "shape", "median us", "GB/s", "copy GB/s", "of copy"]
            if any("round_ratios" in r for r in rows):
                table = [(*row, f"{min(r['round_ratios']):.3f}-{max(r['round_ratios']):.3f}"
                          if "round_ratios" in r else "") for row, r in zip(table, rows, strict=True)]
                headers.append("of copy, per round")
            if any("graph_us" in r for r in rows):
                table = [(*row, r.get("graph_us", ""), r.get("graph_ratio_to_copy", ""))
                         for row, r in zip(table, rows, strict=True)]
                headers += ["graph replay us", "graph replay of copy"]
            if "batch_invariant" in rows[-1]:
                table = [(*row, r.get("batch_invariant", "")) for row, r in zip(table, rows, strict=True)]
                headers.append("batch-invariant (probe)")
        lines += ["", f"## {title}", "", tabulate(table, headers=headers, tablefmt="github"), ""]
    targets = target_rows(records)
    if targets:
        lines += ["", "## Targets against this run", "",
                  tabulate(targets, headers=["target", "backend", "case", "figure", "bound", "met"],
                           tablefmt="github"), ""]
    path.write_text("\n".join(lines) + "\n")


def _find(records: list[dict[str, Any]], **keys: Any) -> list[dict[str, Any]]:
    return [r for r in records if all(r.get(k) == v for k, v in keys.items())]


def _case(r: dict[str, Any]) -> str:
    return f"{r['rows']}x{r['dim']} {r['dtype']}"


def _peer_ratio(records: list[dict[str, Any]], r: dict[str, Any]) -> tuple[str, float] | None:
    """The first peer (Liger, else F.rms_norm) measured on r's case, and its fraction of copy."""
    for peer in ("liger", "F.rms_norm"):
        rec = _find(records, kind=r["kind"], variant=r["variant"], rows=r["rows"], dim=r["dim"], dtype=r["dtype"],
                    backend=peer)
        if rec:
            return peer, rec[0]["ratio_to_copy"]
    return None


def _forward_targets(records: list[dict[str, Any]]) -> list[tuple]:
    """The 16-bit forward at 0.97 of copy or more, and ahead of its peer on the same case."""
    out: list[tuple] = []
    for r in _find(records, kind="forward", variant="rms_norm"):
        if r["backend"] in ("triton", "cuda") and r["dtype"] in ("bfloat16", "float16"):
            case = _case(r)
            out.append(("forward >= 0.97 of copy", r["backend"], case, r["ratio_to_copy"], 0.97,
                        r["ratio_to_copy"] >= 0.97))
            peer = _peer_ratio(records, r)
            if peer:
                out.append((f"forward ahead of {peer[0]}", r["backend"], case, r["ratio_to_copy"], peer[1],
                            r["ratio_to_copy"] > peer[1]))
    return out


def _backward_targets(records: list[dict[str, Any]]) -> list[tuple]:
    out: list[tuple] = []
    for r in _find(records, kind="backward", variant="rms_norm"):
        if r["backend"] not in BACKWARD_BOUNDS:
            continue
        shape = (r["rows"], r["dim"])
        bound = BACKWARD_BOUNDS[r["backend"]] if shape in FULL_SHAPES[:BACKWARD_SHAPE_COUNT] else (
            TRAINING_BOUND if shape in TRAINING_SHAPES else None)
        if bound is None:
            continue
        out.append((f"backward >= {bound} of copy", r["backend"], _case(r), r["ratio_to_copy"], bound,
                    r["ratio_to_copy"] >= bound))
        quack = _find(records, kind="backward", variant="rms_norm", rows=r["rows"], dim=r["dim"], dtype=r["dtype"],
                      backend="quack")
        if r["backend"] == "cuda" and quack and shape in FULL_SHAPES[:BACKWARD_SHAPE_COUNT]:
            out.append(("backward ahead of quack", "cuda", _case(r), r["ratio_to_copy"], quack[0]["ratio_to_copy"],
                        r["ratio_to_copy"] > quack[0]["ratio_to_copy"]))
    return out


def _fused_add_targets(records: list[dict[str, Any]]) -> list[tuple]:
    out: list[tuple] = []
    for r in _find(records, kind="forward", variant="fused_add"):
        if r["backend"] in ("triton", "cuda") and (r["rows"], r["dim"]) in FULL_SHAPES[:2]:
            out.append(("fused add >= 0.97 of copy", r["backend"], _case(r),
                        r["ratio_to_copy"], 0.97, r["ratio_to_copy"] >= 0.97))
    for r in _find(records, kind="forward", variant="fused_add_"):
        if r["backend"] in ("triton", "cuda"):
            out.append(("fused add in place >= 0.95 of copy", r["backend"], _case(r),
                        r["ratio_to_copy"], 0.95, r["ratio_to_copy"] >= 0.95))
    return out


def _latency_targets(records: list[dict[str, Any]]) -> list[tuple]:
    out: list[tuple] = []
    for r in _find(records, kind="latency", dim=4096):
        bound = {"cuda": 0.7, "triton": 1.0}.get(r["backend"])
        if bound and r.get("ratio_to_rms_norm"):
            out.append((f"latency <= {bound} x F.rms_norm", r["backend"], _case(r),
                        r["ratio_to_rms_norm"], bound, r["ratio_to_rms_norm"] <= bound))
    return out


def _parity_targets(records: list[dict[str, Any]]) -> list[tuple]:
    """One row: the worst share of bitwise-equal elements over the project's own pairs (Liger's left out)."""
    parity = [r for r in _find(records, kind="parity") if "liger" not in r["backend"]]
    if not parity:
        return []
    worst = min((min(v for k, v in r.items() if k.startswith("equal_")), r["backend"], r["dtype"], r["dim"])
                for r in parity)
    return [("parity: every output bitwise equal", "native cpu/cuda, triton, cuda",
             f"worst: {worst[1]} {worst[2]} dim {worst[3]}", worst[0], 1.0, worst[0] == 1.0)]


# In the order the markdown lists them.
_TARGETS: tuple[Callable[[list[dict[str, Any]]], list[tuple]], ...] = (
    _forward_targets, _backward_targets, _fused_add_targets, _latency_targets, _parity_targets,
)


def target_rows(records: list[dict[str, Any]]) -> list[tuple]:
    """Each of the kernels' targets that this run measured: (target, backend, case, figure, bound, met)."""
    return [row for targets in _TARGETS for row in targets(records)]


def _device(asked: str | None) -> torch.device | None:
    """The device to time on: --device, else the GPU; None, after saying why, where that GPU is not visible."""
    if asked is None and not torch.cuda.is_available():
        print("bench.py: no CUDA GPU is visible, and the timings this benchmark exists for need one. "
              "`--device cpu --quick` runs a smoke pass of the script on the CPU instead.")
        return None
    device = torch.device(asked or "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench.py: --device cuda asked for, but no CUDA GPU is visible.")
        return None
    return device


def _apply_triton_tuning(path: Path) -> None:
    """Replace the Triton backend's GPU tunings by the best of a benchmarks/triton_tuning.py run."""
    from rmsnorm_conformance.backends import triton_rmsnorm

    best = json.loads(path.read_text())["best"]
    for kind, name in (("forward", "_GPU_FWD"), ("backward", "_GPU_BWD")):
        if kind in best:
            base = getattr(triton_rmsnorm, name)
            tuned = base._replace(**{k: v for k, v in best[kind].items() if k in base._fields})
            setattr(triton_rmsnorm, name, tuned)
    triton_rmsnorm.launch_config.cache_clear()


def _tuning_and_device_environment(device: torch.device, found: list[Subject]) -> dict[str, Any]:
    """What the run's figures also depend on: the CUDA kernels' tuning from the environment, the Triton
    backend's tuning and the GPU's size."""
    env: dict[str, Any] = {}
    tuning_env = {k: v for k, v in os.environ.items() if k.startswith("RMSNORM_CUDA_") and k.endswith("_CONFIG")}
    if tuning_env:
        env["cuda tuning (environment)"] = tuning_env
    if any(s.name == "triton" for s in found):
        from rmsnorm_conformance.backends import triton_rmsnorm

        env["triton tuning"] = {"forward": triton_rmsnorm._GPU_FWD._asdict(),
                                "backward": triton_rmsnorm._GPU_BWD._asdict()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["multiprocessors"] = props.multi_processor_count
        env["memory GiB"] = round(props.total_memory / 2**30, 1)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help=f"JSON output; bench.md goes beside it (default: "
                        f"{DEFAULT_OUT} on a GPU, reports/cpu/bench.json on the CPU)")
    parser.add_argument("--quick", action="store_true", help="smaller shapes and fewer repetitions")
    parser.add_argument("--device", default=None, help="cuda (default where a GPU is visible) or cpu")
    parser.add_argument("--rounds", type=int, default=None, metavar="N",
                        help="forward and fused add: the copy and every subject measured N times in turns, medians "
                             "reported (default: 5 on a GPU, 1 with --quick or on the CPU)")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32",
                        help="comma list; latency uses the first (default: %(default)s)")
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile peer")
    parser.add_argument("--no-parity", action="store_true", help="leave out the CPU/device parity phase")
    parser.add_argument("--triton-tuning", default=None, metavar="JSON",
                        help="apply the best tuning of a benchmarks/triton_tuning.py run to the Triton backend")
    parser.add_argument(
        "--backends", default=",".join(BACKENDS),
        help="backends to load, by registry name or module:attr (default: %(default)s; "
             "the cuda backend builds its extension on first use, which can take minutes)")
    args = parser.parse_args(argv)

    device = _device(args.device)
    if device is None:
        return 0
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the Triton backend defines its kernels
    dtypes = [getattr(torch, name.strip()) for name in args.dtypes.split(",") if name.strip()]
    rounds = max(1, args.rounds if args.rounds is not None else 1 if args.quick or device.type == "cpu" else 5)
    shapes = CPU_SHAPES if device.type == "cpu" else QUICK_SHAPES if args.quick else FULL_SHAPES
    backward_shapes = shapes[:BACKWARD_SHAPE_COUNT] + (TRAINING_SHAPES if shapes is FULL_SHAPES else ())
    out = Path(args.out or (DEFAULT_OUT if device.type == "cuda" else "reports/cpu/bench.json"))
    if not out.is_absolute():
        out = ROOT / out if args.out is None else Path.cwd() / out

    from rmsnorm_conformance.harness.reporting.environment import fingerprint

    if args.triton_tuning:
        _apply_triton_tuning(Path(args.triton_tuning))
    specs = tuple(spec.strip() for spec in args.backends.split(",") if spec.strip())
    found = subjects(device, backends=specs, compile_peer=not args.no_compile)
    print(f"timing {', '.join(s.name for s in found)} on {device}; shapes {shapes}; dtypes {args.dtypes}")
    start = time.perf_counter()
    env = fingerprint([device], {
        "command": " ".join(["python", "benchmarks/bench.py", *(argv if argv is not None else sys.argv[1:])]),
        "quick": args.quick,
        "timing": ("triton.testing.do_bench medians (L2 flushed between calls)" if device.type == "cuda"
                   else "perf_counter medians") + "; latency: back-to-back calls, host overhead included"
                  + (f"; forward and fused add: {rounds} rounds of the copy and every subject in turns, the "
                     "medians over rounds" if rounds > 1 else ""),
        "subjects": [s.name for s in found],
    })
    env.update(_tuning_and_device_environment(device, found))
    out.parent.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    # Forward first: it is what the backends exist for. The files are rewritten after every phase, so a run
    # cut short still leaves what it measured.
    phases = (
        (f"forward {dtypes[0]}", lambda: bench_forward(found, shapes, dtypes[:1], device, args.quick, rounds)),
        (f"fused_add {dtypes[0]}", lambda: bench_fused_add(found, shapes, dtypes[0], device, args.quick, rounds)),
        ("latency", lambda: bench_latency(found, dtypes[0], device, args.quick)),
        ("parity", lambda: bench_parity(found, device) if device.type == "cuda" and not args.no_parity else []),
        ("forward", lambda: bench_forward(found, shapes, dtypes[1:], device, args.quick, rounds)),
        # torch.compile's backward costs a compile per dtype: it joins for the first dtype only.
        ("backward", lambda: bench_backward(found, backward_shapes, dtypes, device, args.quick)),
    )
    done: list[str] = []
    for phase, run in phases:
        records += run()
        done.append(f"{phase} ({time.perf_counter() - start:.0f} s)")
        env["phases done"] = ", ".join(done)
        out.write_text(json.dumps({"records": records, "environment": env}, indent=1) + "\n")
        write_markdown(out.with_name("bench.md"), records, env)
    print(f"wrote {out} and {out.with_name('bench.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
