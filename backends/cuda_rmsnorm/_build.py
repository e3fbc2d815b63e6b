"""Building the CUDA operator library: the flags, the lazy torch.utils.cpp_extension build (or a prebuilt
library named by an environment variable), and a compile-only check.

The kernels (rmsnorm_kernels.cu, the plans and entry points, and one unit per kernel family and element type:
forward_*.cu, fused_add_*.cu, backward_*.cu) include no torch header and compile with nvcc alone; the binding
(binding.cpp, binding_autograd.cpp, binding_python.cpp) includes only CPU-side torch headers and Python's limited
API. Every unit is its own translation unit, so a cold build compiles them in parallel (ninja, MAX_JOBS).
So the compile check runs on any machine with nvcc and a torch wheel, a CPU-only one included, and needs no
GPU; and the library, which registers torch operators (plus one small limited-API module), loads into any
Python 3.10+ that runs the torch it was built against.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
KERNELS = "rmsnorm_kernels.cu"
BINDING = "binding.cpp"
HEADER = "rmsnorm.h"
# Every translation unit, the slowest first (ninja starts them in this order). No split changes a kernel's
# machine code: each kernel is instantiated in exactly one unit, from the same source (rmsnorm_device.h).
KERNEL_UNITS = (
    "forward_bf16.cu", "forward_f16.cu", "forward_f32.cu", "backward_bf16.cu", "backward_f16.cu",
    "fused_add_f32.cu", "backward_f32.cu", "fused_add_bf16.cu", "fused_add_f16.cu", KERNELS,
)
BINDING_UNITS = ("binding_autograd.cpp", BINDING, "binding_python.cpp")
SOURCE_SUFFIXES = (".cu", ".cpp", ".h")

# Where the built extension is cached; unset means torch's default (TORCH_EXTENSIONS_DIR or ~/.cache).
BUILD_DIR_ENV = "RMSNORM_CUDA_BUILD_DIR"
# A library built ahead (same sources, same torch) to load instead of building on first use.
LIBRARY_ENV = "RMSNORM_CUDA_LIBRARY"

# Hopper machine code plus its PTX, which the driver compiles for newer chips at load time.
BASE_ARCH = "90"

# torch's own nvcc defaults for extensions, repeated so that the compile check sees the build's flags.
_TORCH_NVCC_DEFINES = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
)

# No --use_fast_math: it flushes denormals and approximates division and sqrt, and the contract wants
# the correctly rounded operations the kernels spell out. -fmad=false: no multiply and add may be fused
# into an FMA behind the kernels' back (they write every FMA they mean, as __fmaf_rn).
_NVCC_OPTIONS = ("-O3", "-lineinfo", "-fmad=false")

# A build failure is reported in at most this many characters.
_MESSAGE_LIMIT = 1200


def arch_flags(extra_arch: str | None = None) -> list[str]:
    """-gencode flags: sm_90 code and compute_90 PTX, plus `extra_arch` code (a pre-Hopper device's own)."""
    flags = [f"-gencode=arch=compute_{BASE_ARCH},code=[sm_{BASE_ARCH},compute_{BASE_ARCH}]"]
    if extra_arch and extra_arch != BASE_ARCH:
        flags.append(f"-gencode=arch=compute_{extra_arch},code=sm_{extra_arch}")
    return flags


def nvcc_flags(extra_arch: str | None = None) -> list[str]:
    """Flags this package adds for nvcc (torch adds its defaults and the C++ standard itself)."""
    return [*_NVCC_OPTIONS, *arch_flags(extra_arch)]


def source_digest() -> str:
    """A short hash of the sources: a changed header rebuilds too, which torch's own versioning misses."""
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def source_files() -> list[Path]:
    """Every C++/CUDA source and header of the library (the wheel packages the same suffixes)."""
    return sorted(p for p in SOURCE_DIR.iterdir() if p.suffix in SOURCE_SUFFIXES)


def extension_name(extra_arch: str | None = None) -> str:
    archs = BASE_ARCH + (f"_{extra_arch}" if extra_arch and extra_arch != BASE_ARCH else "")
    return f"rmsnorm_cuda_sm{archs}_{source_digest()}"


def shorten(message: str, limit: int = _MESSAGE_LIMIT) -> str:
    """The compiler's error lines (or the tail when none is marked), at most `limit` characters."""
    lines = [line.rstrip() for line in message.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"\berror\b", line, re.IGNORECASE)]
    picked = errors[:8] if errors else lines[-12:]
    text = "\n".join(picked)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _failure_output(exc: BaseException) -> str:
    """The compiler output torch's build error carries in its cause, decoded, else the error itself."""
    for err in (exc.__cause__, exc.__context__, exc):
        output = getattr(err, "output", None)
        if output:
            return output.decode(errors="replace") if isinstance(output, bytes) else str(output)
    return f"{type(exc).__name__}: {exc}"


def build(extra_arch: str | None = None, *, verbose: bool = False) -> str:
    """Compile (or take from the cache) and load the operator library; its path. RuntimeError if not."""
    import torch
    from torch.utils import cpp_extension

    prebuilt = os.environ.get(LIBRARY_ENV)
    if prebuilt:
        try:
            torch.ops.load_library(prebuilt)
        except Exception as exc:  # a stale or foreign library becomes the backend's unavailable reason
            raise RuntimeError(f"loading {LIBRARY_ENV}={prebuilt} failed: {type(exc).__name__}: {exc}") from exc
        return prebuilt
    name = extension_name(extra_arch)
    build_directory = None
    root = os.environ.get(BUILD_DIR_ENV)
    if root:
        build_directory = os.path.join(root, name)
        os.makedirs(build_directory, exist_ok=True)
    get_directory = getattr(cpp_extension, "_get_build_directory", None)
    if build_directory or get_directory:
        clear_stale_lock(build_directory or get_directory(name, False))
    try:
        return cpp_extension.load(
            name=name,
            sources=[str(SOURCE_DIR / name) for name in (*BINDING_UNITS, *KERNEL_UNITS)],
            extra_cflags=["-O3"],
            extra_cuda_cflags=nvcc_flags(extra_arch),
            extra_include_paths=[str(SOURCE_DIR)],
            build_directory=build_directory,
            verbose=verbose,
            is_python_module=False,
        )
    except Exception as exc:  # any build or import failure becomes the backend's unavailable reason
        raise RuntimeError(f"building the CUDA extension failed: {shorten(_failure_output(exc))}") from exc


# A build holds a lock file in its build directory (torch's FileBaton) and every other process waits while the
# file exists. A build killed outright leaves it behind, and every later run would wait forever. A cold build takes
# 13-36 s on an H200 and minutes on a slow machine: a lock this old is a dead build's.
STALE_LOCK_SECONDS = 600


def clear_stale_lock(build_directory: str, *, now: float | None = None) -> bool:
    """Remove the build lock in ``build_directory`` if it is older than ``STALE_LOCK_SECONDS``; True if removed."""
    lock = os.path.join(build_directory, "lock")
    try:
        age = (time.time() if now is None else now) - os.path.getmtime(lock)
    except OSError:
        return False
    if age < STALE_LOCK_SECONDS:
        return False
    try:
        os.remove(lock)
    except OSError:
        return False
    print(f"rmsnorm-conformance: removed a build lock {age:.0f} s old, left by a build that was killed: {lock}",
          file=sys.stderr)
    return True


# ------------------------------------------------------------------------------------------------------
# The compile-only check.


def find_nvcc() -> str | None:
    """nvcc from $NVCC, $CUDA_HOME/$CUDA_PATH, the PATH, or /usr/local/cuda, in that order."""
    candidates = [os.environ.get("NVCC")]
    candidates += [os.path.join(home, "bin", "nvcc") for home in
                   (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")) if home]
    candidates += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def cxx_standard() -> str:
    """The C++ standard torch's extension builder uses (C++20 from the torch releases that need it)."""
    from torch.utils import cpp_extension

    source = Path(cpp_extension.__file__).read_text(encoding="utf-8", errors="replace")
    return "c++20" if "-std=c++20" in source else "c++17"


@dataclass(frozen=True)
class CheckResult:
    """What the compile check did: ok, and a report (the compiler's message when not ok)."""

    ok: bool
    report: str


def _run(command: list[str]) -> tuple[int, str, float]:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip(), time.perf_counter() - start


def _check_commands(nvcc: str, cxx: str | None, target: Path, verbose: bool) -> dict[str, list[str]]:
    """The compile check's command for each unit: nvcc -cubin for the kernel units (sm_90 machine code in
    `target`), a syntax-only pass of the host compiler for the binding units (none without a host compiler).

    -cubin runs what the build runs for the device (the front end over the whole unit, host functions included,
    NVVM to PTX at the build's flags, ptxas) and leaves out the host compiler's pass over nvcc's generated host
    code and the fat binary: 40.0 -> 28.2 s for the kernel units one after another on a 2-core machine
    (reports/cpu/ci-time.md). A host function's error still fails it: the front end checks every function."""
    from torch.utils import cpp_extension

    std = f"-std={cxx_standard()}"
    commands: dict[str, list[str]] = {}
    machine_code = f"-gencode=arch=compute_{BASE_ARCH},code=sm_{BASE_ARCH}"
    for unit in KERNEL_UNITS:
        command = [nvcc, "-cubin", str(SOURCE_DIR / unit), "-o", str(target / (Path(unit).stem + ".cubin")),
                   f"-I{SOURCE_DIR}", std, *_TORCH_NVCC_DEFINES, *_NVCC_OPTIONS, machine_code]
        commands[unit] = [*command, "-Xptxas=-v"] if verbose else command
    if cxx is not None:
        includes = [f"-I{path}" for path in cpp_extension.include_paths()]
        includes += [f"-I{sysconfig.get_paths()['include']}", f"-I{SOURCE_DIR}"]
        for unit in BINDING_UNITS:
            commands[unit] = [cxx, "-fsyntax-only", std, "-DTORCH_EXTENSION_NAME=rmsnorm_compile_check",
                              "-DTORCH_API_INCLUDE_EXTENSION_H", *includes, str(SOURCE_DIR / unit)]
    return commands


def compile_check(*, verbose: bool = False, out_dir: str | None = None, jobs: int | None = None) -> CheckResult:
    """nvcc every kernel unit to sm_90 machine code and compile every binding unit against torch's headers,
    `jobs` at a time (default: the CPU count, as ninja would).

    Nothing is linked or loaded, so no GPU is needed. ``verbose`` adds ptxas's register and spill report.
    """
    from concurrent.futures import ThreadPoolExecutor

    nvcc = find_nvcc()
    if nvcc is None:
        return CheckResult(False, "nvcc not found: set CUDA_HOME or NVCC, or put nvcc on the PATH")
    import torch

    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rmsnorm-cuda-check-") as tmp:
        target = Path(out_dir or tmp)
        target.mkdir(parents=True, exist_ok=True)
        commands = _check_commands(nvcc, cxx, target, verbose)
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1)) as pool:
            results = dict(zip(commands, pool.map(_run, commands.values()), strict=True))
        wall = time.perf_counter() - start
        for unit, (code, output, _) in results.items():
            if code == 0:
                continue
            if unit in BINDING_UNITS:
                return CheckResult(False, f"{cxx} failed on {unit} against torch {torch.__version__}'s headers "
                                          f"({' '.join(commands[unit])}):\n{output}")
            return CheckResult(False, f"nvcc failed on {unit} ({' '.join(commands[unit])}):\n{output}")
        for unit in KERNEL_UNITS:
            code, output, seconds = results[unit]
            lines.append(f"{unit}: compiled by {nvcc} for sm_{BASE_ARCH} in {seconds:.1f} s")
            if verbose and output:
                lines.append(output)
        if cxx is None:
            lines.append(f"{', '.join(BINDING_UNITS)}: skipped, no host C++ compiler (set CXX)")
        for unit in BINDING_UNITS if cxx is not None else ():
            lines.append(f"{unit}: compiled by {cxx} against torch {torch.__version__}'s headers "
                         f"in {results[unit][2]:.1f} s")
        lines.append(f"{len(commands)} units, {max(1, jobs or os.cpu_count() or 1)} at a time: {wall:.1f} s")
    return CheckResult(True, "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    """``python -m rmsnorm_conformance.backends.cuda_rmsnorm --compile-check [--verbose] [--out DIR]``,
    ``--bench [--json PATH]`` or ``--smoke``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m rmsnorm_conformance.backends.cuda_rmsnorm",
                                     description="Build checks for the CUDA RMSNorm backend.")
    parser.add_argument("--compile-check", action="store_true",
                        help="compile every unit for sm_90 without a GPU; non-zero exit on failure")
    parser.add_argument("--verbose", action="store_true", help="also print ptxas's register and spill report")
    parser.add_argument("--out", metavar="DIR", help="keep the object files in DIR (default: a temp dir)")
    parser.add_argument("--jobs", type=int, metavar="N", help="units compiled at once (default: the CPU count)")
    parser.add_argument("--bench", action="store_true",
                        help="on a GPU: bandwidth against a device copy and latency against F.rms_norm")
    parser.add_argument("--json", metavar="PATH", help="with --bench: also write the records as JSON to PATH")
    parser.add_argument("--smoke", action="store_true",
                        help="on a GPU: launch every kernel variant once (a run for compute-sanitizer)")
    args = parser.parse_args(argv)
    if args.bench:
        import json

        import torch

        from . import _bench

        records = _bench.run()
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
        print("\n".join(_bench.render(records)), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
        return 0
    if args.smoke:
        from ._smoke import run as smoke

        for line in smoke():
            print(line, flush=True)
        return 0
    if not args.compile_check:
        parser.print_help()
        return 2
    result = compile_check(verbose=args.verbose, out_dir=args.out, jobs=args.jobs)
    print(result.report, file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1
