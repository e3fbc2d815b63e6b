"""Per-call latency of the Triton and CUDA backends' eager forward at small batches, against ``F.rms_norm`` and a
copy, with an earlier launch path (``r6`` below) and the current one timed in the same run (issue #23's latency
targets: Triton at most 1.0x and CUDA at most 0.7x ``F.rms_norm`` at 1 to 256 rows of 4096).

Not a test. On a GPU, with the package installed (not from this tree's source folder):

    python benchmarks/triton_latency.py [--calls 2000] [--rounds 15] [--out FILE.md]

Every subject is called as ``bench.py``'s latency phase calls it (a lambda, the harness's ``Backend.forward``, the
backend's ``forward``) and runs back to back ``--calls`` times per round, host overhead included; rounds are
interleaved so that a noisy moment of the host hits every subject; the table gives the median round. Subjects:

- ``triton r6``: the earlier planned path, kept here as it was (``Run6TritonOp``): the key built in ``_plan_key``, the
  launch in ``_launch_plan``, ``_launch_hooks_installed()``, and Triton's launcher ``CudaLauncher.__call__``.
- ``triton via run``: the current ``_run``, its plans pointed back at ``CudaLauncher.__call__``.
- ``triton empty``: the current ``_run``, the output allocated with ``torch.empty`` instead of ``empty_like``.
- ``triton``: the current path (one frame, the binary's C launch function where Triton 3.6 allows it).
- ``cuda r6``: the CUDA backend's eager forward through the earlier ``_fast`` helper; ``cuda``: the current one.

It also checks that every Triton and CUDA subject gives the same bits, and times a few host-only operations
(``timeit``, ns) that the planned path is made of.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any, NamedTuple

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench import EPS, per_call_us  # noqa: E402

ROWS = (1, 8, 64, 256)
DIMS = (4096, 128)


class _Plan6(NamedTuple):
    run: Any
    function: Any
    packed: Any
    grid: int
    shape: tuple[int, int]
    out_dtype: torch.dtype
    device: torch.device
    tail: tuple


def _plan_key6(x: torch.Tensor, weight: torch.Tensor, eps: float, fp32_out: bool) -> tuple:
    return (x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.stride(), weight.dtype, weight.device,
            type(eps), eps, fp32_out)


_hooks_installed: Any = None  # the module's _launch_hooks_installed (run6_classes sets it)


def _launch_plan6(plan: _Plan6, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor | None:
    index = plan.device.index
    xp, wp = x.data_ptr(), weight.data_ptr()
    if (xp | wp) & 15 or torch._C._cuda_getDevice() != index or _hooks_installed():
        return None
    y = torch.empty_like(x) if plan.out_dtype == x.dtype else torch.empty(plan.shape, dtype=plan.out_dtype,
                                                                          device=plan.device)
    yp = y.data_ptr()
    plan.run(plan.grid, 1, 1, torch._C._cuda_getCurrentRawStream(index), plan.function, plan.packed,
             None, None, None, xp, xp, wp, yp, yp, *plan.tail)
    return y


def run6_classes(tr: Any, compiled: dict) -> type:
    """Run 6's planned forward (commit 828af60) as a subclass of the current op, its plans derived from the current
    ones and from ``compiled`` (Triton's compiled kernels by function handle)."""
    global _hooks_installed
    _hooks_installed = tr._launch_hooks_installed
    plan_key, launch_plan = _plan_key6, _launch_plan6
    plans: dict[tuple, _Plan6] = {}

    class Run6TritonOp(tr.TritonRMSNormOp):
        def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
            return self._run(x, weight, eps, fp32_out=False)

        def _run(self, x: torch.Tensor, weight: torch.Tensor, eps: float, fp32_out: bool) -> torch.Tensor:
            if torch.compiler.is_compiling():
                raise RuntimeError("eager only")
            try:
                key = plan_key(x, weight, eps, fp32_out)
                plan = plans.get(key)
                grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
            except (AttributeError, TypeError):
                key = plan = None
                grad = False
            if plan is not None and not grad:
                y = launch_plan(plan, x, weight)
                if y is not None:
                    return y
            y = super()._run(x, weight, eps, fp32_out)  # the full path (and the current plan)
            now = tr._PLANS.get(tr._plan_key(x, weight, eps, fp32_out))
            if now is not None and now.head[0] in compiled:
                c = compiled[now.head[0]]
                plans[key] = _Plan6(c.run, c.function, c.packed_metadata, now.grid, now.shape, now.out_dtype,
                                    now.device, now.tail)
            return y

    return Run6TritonOp


def run6_cuda_class(cr: Any, ops: Any) -> type:
    """The CUDA backend's eager forward as the earlier path had it: through the ``_fast`` helper (a frame, the
    arguments packed and unpacked), ``torch.compiler`` looked up on each call."""
    slow = object()

    def fast(call: Any, eps: object, *args: Any) -> Any:
        if call is None or type(eps) is not float or torch.compiler.is_compiling():
            return slow
        try:
            return call(*args)
        except Exception:
            return slow

    class Run6CudaOp(cr.CudaRMSNormOp):
        def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
            out = fast(ops.rms_norm, eps, x, weight, eps, False)
            if out is not slow:
                return out
            return self._checked("rms_norm", x, weight, eps, False)

    return Run6CudaOp


def host_costs(x: torch.Tensor, w: torch.Tensor, tr: Any) -> list[str]:
    """ns a call of host-only pieces of the planned path (timeit, best of 5), at x's shape."""
    n, d = x.shape
    g = {"x": x, "w": w, "torch": torch, "tr": tr, "eps": EPS, "n": n, "d": d, "dt": x.dtype, "dev": x.device}
    g["plans"] = {(x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(), w.dtype, w.device, float, EPS,
                   False): 1}
    stmts = [
        "torch.empty_like(x)",
        "torch.empty((n, d), dtype=dt, device=dev)",
        "x.new_empty((n, d))",
        "plans.get((x.shape, x.stride(), x.dtype, x.device, w.shape, w.stride(), w.dtype, w.device, type(eps), "
        "eps, False))",
        "x.shape", "x.stride()", "x.device", "x.data_ptr()",
        "torch.compiler.is_compiling()", "torch.is_grad_enabled()",
        "torch._C._cuda_getDevice()", "torch._C._cuda_getCurrentRawStream(0)",
        "tr._launch_hooks_installed()",
        "tr._RUNTIME_KNOBS.launch_enter_hook is tr._ENTER_HOOKS and not tr._ENTER_HOOKS.calls",
    ]
    lines = ["| host-only piece | ns a call |", "|---|---|"]
    for stmt in stmts:
        number = 20000
        ns = min(timeit.repeat(stmt, globals=g, number=number, repeat=5)) / number * 1e9
        lines.append(f"| `{stmt}` | {ns:.0f} |")
    torch.cuda.synchronize()
    return lines


NAMES = ("copy", "F.rms_norm", "triton r6", "triton via run", "triton empty", "triton", "cuda r6", "cuda")


def callers(tr: Any) -> tuple[dict[str, Any], dict]:
    """Each subject's ``f(x, w)``, called as bench.py's latency phase calls a backend (bench.subjects: a lambda,
    ``Backend.forward``, the op's forward), the earlier paths the same way; and a dict that records Triton's
    compiled kernels by function handle as they compile (the earlier path's plans and "via run" launch through
    them)."""
    from bench import subjects

    import rmsnorm_conformance.backends.cuda_rmsnorm as cr
    from rmsnorm_conformance.backends.cuda_rmsnorm import _ops
    from rmsnorm_conformance.harness.running.backend import Backend

    compiled: dict = {}
    entry = tr._launch_entry

    def recording(kernel: Any) -> Any:
        compiled[kernel.function] = kernel
        return entry(kernel)

    tr._launch_entry = recording
    found = {s.name: s.forward for s in subjects(torch.device("cuda"), backends=("triton", "cuda"),
                                                 compile_peer=False)}
    triton6 = Backend(run6_classes(tr, compiled)(), spec="triton")
    found["triton r6"] = lambda x, w: triton6.forward(x, w, EPS)
    if "cuda" in found:
        cuda6 = Backend(run6_cuda_class(cr, _ops)(), spec="cuda")
        found["cuda r6"] = lambda x, w: cuda6.forward(x, w, EPS)
    return found, compiled


def one_shape(tr: Any, found: dict[str, Any], compiled: dict, rows: int, dim: int, dtype: torch.dtype,
              args: Any, device: str = "cuda") -> tuple[dict[str, float], bool]:
    """Median µs a call of every subject at rows x dim, and whether every Triton and CUDA subject gave the same bits."""
    gen = torch.Generator(device=device).manual_seed(rows * dim)
    x = torch.randn(rows, dim, device=device, generator=gen).to(dtype)
    w = torch.randn(dim, device=device, generator=gen).to(dtype)
    y = torch.empty_like(x)
    outs = [found["triton"](x, w), found["triton"](x, w), found["triton r6"](x, w), found["triton r6"](x, w)]
    key = tr._plan_key(x, w, EPS, False)
    plan = tr._PLANS[key]
    c = compiled[plan.head[0]]
    plans = {"triton via run": plan._replace(launch=c.run, head=(c.function, c.packed_metadata, None, None, None)),
             "triton empty": plan._replace(like=False)}
    fns = {"copy": lambda: y.copy_(x)}
    for name in NAMES[1:]:
        forward = found.get(name.replace(" via run", "").replace(" empty", ""))
        if forward is not None:
            fns[name] = lambda f=forward: f(x, w)
    for name, fn in fns.items():
        if name not in ("copy", "F.rms_norm"):  # the rest are the canonical order's bits, every one
            tr._PLANS[key] = plans.get(name, plan)
            outs.append(fn())
    same = all(torch.equal(outs[0], o) for o in outs[1:])
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            tr._PLANS[key] = plans.get(name, plan)
            times[name].append(per_call_us(fn, torch.device(device), args.calls))
    tr._PLANS[key] = plan
    return {name: statistics.median(t) for name, t in times.items()}, same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to time")
        return 0
    import rmsnorm_conformance.backends.triton_rmsnorm as tr

    found, compiled = callers(tr)
    dtype = getattr(torch, args.dtype)
    lines = [f"# Eager forward latency, {args.dtype}, µs a call (median of {args.rounds} rounds of {args.calls})",
             "", f"torch {torch.__version__}, Triton {tr.triton.__version__}, {torch.cuda.get_device_name()}; "
             f"Triton's launcher bypassed for its C launch function: {tr._launcher_layout_known() is not None}", "",
             "| rows x dim | " + " | ".join(NAMES) + " | triton r6 / F | triton / F | cuda r6 / F | cuda / F | "
             "same bits |", "|---" * (len(NAMES) + 6) + "|"]
    host: list[str] = []
    nan = float("nan")
    for dim in DIMS:
        for rows in ROWS:
            med, same = one_shape(tr, found, compiled, rows, dim, dtype, args)
            ratios = [med.get(k, nan) / med["F.rms_norm"] for k in ("triton r6", "triton", "cuda r6", "cuda")]
            lines.append(f"| {rows}x{dim} | " + " | ".join(f"{med.get(n, nan):.2f}" for n in NAMES) + " | "
                         + " | ".join(f"{r:.3f}" for r in ratios) + f" | {same} |")
            print(lines[-1], flush=True)
            if dim == 4096 and rows == 8:
                x = torch.randn(rows, dim, device="cuda").to(dtype)
                host = host_costs(x, torch.randn(dim, device="cuda").to(dtype), tr)
    lines += ["", "Host-only pieces at 8x4096 (timeit, best of 5 repeats):", "", *host]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
