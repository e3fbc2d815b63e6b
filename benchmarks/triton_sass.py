"""The Triton backward compiled for sm_90 without a GPU, for each tuning of ``triton_tuning.BWD_VARIANTS`` at both of
its shapes: registers, spilled bytes and shared memory a block (``cuobjdump --dump-resource-usage``), and the SASS
instructions of the kernel's main loop a tile (``nvdisasm``), by opcode where ``--ops`` is given.

    python benchmarks/triton_sass.py [--dtype bfloat16] [--ops] [--fields JSON ...] [--dims 4096,128]

Run it with the Triton the GPU machine has (3.6 in reports/gpu/bench.md): another Triton lays tiles out otherwise,
and its binaries differ. Its wheel carries ptxas, cuobjdump and nvdisasm; no CUDA driver is needed. Why: a loop's
instructions a tile say before a GPU run what a change costs the issue-bound kernels (profiled on an H200),
and the CPU seconds of each compile (this process's and ptxas's, Triton's cache in a new folder, after one compile
that warms Triton up) what it costs a cold conformance run, which compiles the backward once for each padded width,
vector width and dtype it draws.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from triton_tuning import BWD_VARIANTS, SHAPES


def compile_backward(tr: Any, dim: int, dtype: torch.dtype) -> tuple[Any, Any]:
    """The backward kernel as ``_backward`` launches it at ``dim`` under the current ``_GPU_BWD``, compiled for
    sm_90: (compiled kernel, launch config)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    tr.launch_config.cache_clear()
    cfg = tr.launch_config(dim, dtype, backward=True, interpreted=False)
    kernel = tr._rms_norm_bwd_kernel
    pointer = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32"}[dtype]
    signature = dict(x_ptr=pointer, w_ptr=pointer, g_ptr=pointer, dx_ptr=pointer, part_ptr="*fp32",
                     stats_ptr="*fp32", n_rows="i32", x_row_stride="i32", g_row_stride="i32", n_programs="i32",
                     eps="fp32", n_cols="i32")
    constants = tr.backward_constexprs(dim, cfg)
    signature.update({name: "constexpr" for name in constants})
    names = kernel.arg_names
    # Every pointer is 16-byte aligned at a launch (the backend copies what is not), as Triton then specialises it.
    attrs = {(names.index(n),): [["tt.divisibility", 16]]
             for n in ("x_ptr", "w_ptr", "g_ptr", "dx_ptr", "part_ptr", "stats_ptr")}
    source = ASTSource(kernel, {n: signature[n] for n in names}, constants, attrs)
    options = {"num_warps": cfg.num_warps, "enable_fp_fusion": False}
    if cfg.maxnreg:
        options["maxnreg"] = cfg.maxnreg
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options), cfg


def _tools() -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def resources(cubin: bytes) -> str:
    """cuobjdump's resource line of the kernel: registers, stack, shared and local bytes."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        out = subprocess.run([str(_tools() / "cuobjdump"), "--dump-resource-usage", f.name], capture_output=True,
                             text=True, check=False).stdout
    finally:
        os.unlink(f.name)
    line = next((line for line in out.splitlines() if "REG:" in line), "")
    return " ".join(part for part in line.split() if part.split(":")[0] in ("REG", "STACK", "SHARED", "LOCAL"))


def main_loop(cubin: bytes) -> list[str]:
    """The SASS instructions of the longest backward branch's body: the kernel's loop over tiles."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        sass = subprocess.run([str(_tools() / "nvdisasm"), "-c", f.name], capture_output=True, text=True,
                              check=False).stdout
    finally:
        os.unlink(f.name)
    instructions: list[str] = []
    labels: dict[str, int] = {}
    for line in sass.splitlines():
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        found = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if found:
            instructions.append(found.group(1).strip())
    best: tuple[int, int] = (0, -1)
    for i, text in enumerate(instructions):
        target = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", text)
        if target and labels.get(target.group(1), i + 1) <= i and i - labels[target.group(1)] > best[1] - best[0]:
            best = (labels[target.group(1)], i)
    return instructions[best[0]: best[1] + 1]


def opcode(instruction: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0].split(".")[0]


def _cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children (ptxas) so far."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--ops", action="store_true", help="also the loop's opcodes a tile, most frequent first")
    parser.add_argument("--fields", action="append", metavar="JSON",
                        help="a tuning to compile instead of BWD_VARIANTS: _GPU_BWD fields as a JSON object "
                             "(repeatable), e.g. '{\"tile\": 8192, \"strided\": false, \"warp_elems\": 1024}'")
    parser.add_argument("--dims", default=",".join(str(dim) for _, dim in SHAPES),
                        help="the dims to compile at, comma-separated (default: the sweep's shapes')")
    args = parser.parse_args()
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-sass-")  # every compile a cold one
    import triton

    import rmsnorm_conformance.backends.triton_rmsnorm as tr

    dtype = getattr(torch, args.dtype)
    base = tr._GPU_BWD
    print(f"Triton {triton.__version__}, sm_90, {args.dtype}; SASS instructions of the main loop a tile")
    variants = [(text, json.loads(text)) for text in args.fields] if args.fields else BWD_VARIANTS
    compile_backward(tr, 16, dtype)  # Triton's own first-compile costs, kept out of the figures below
    for label, fields in variants:
        tr._GPU_BWD = base._replace(**fields)
        for dim in (int(d) for d in args.dims.split(",")):
            start = _cpu_seconds()
            try:
                compiled, cfg = compile_backward(tr, dim, dtype)
            except Exception as exc:  # a variant that does not compile is a result too
                print(f"{label:<48} {dim:>5}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            seconds = _cpu_seconds() - start
            cubin = compiled.asm["cubin"]
            loop = main_loop(cubin)
            per_tile = f"{len(loop) / cfg.unroll:.0f} a tile" if loop else "no loop (one iteration)"
            print(f"{label:<48} {dim:>5}: warps {cfg.num_warps:>2}, stages {cfg.stages}, unroll {cfg.unroll}, "
                  f"{resources(cubin)}, shared {compiled.metadata.shared} B: {per_tile}; compiled in {seconds:.2f} "
                  "CPU-s")
            if args.ops:
                counts = collections.Counter(opcode(i) for i in loop)
                print("    " + " ".join(f"{op}:{n / cfg.unroll:.0f}" for op, n in counts.most_common(20)))
    tr._GPU_BWD = base
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
