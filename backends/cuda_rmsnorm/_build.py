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
import json
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

try:
    import fcntl
except ImportError:  # no POSIX file locks (Windows): the check compiles every unit, without its cache
    fcntl = None  # type: ignore[assignment]

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
# A folder where the compile check keeps the kernel units it compiled (unset: no cache). See _run_cached.
CHECK_CACHE_ENV = "RMSNORM_CUDA_CHECK_CACHE"

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


def _unit_key(unit: str, command: list[str]) -> str:
    """The name of a kernel unit's entry in the check's cache: a digest of what decides its machine code and
    its messages. The command (its output's folder aside), every source file of the backend (any header may be
    included), nvcc's and the host compiler's own files (size and time: another toolkit is another key), and the
    variables nvcc reads its flags and host compiler from."""
    digest = hashlib.sha256()
    out = command.index("-o") + 1
    for i, arg in enumerate(command):
        digest.update((Path(arg).name if i == out else arg).encode() + b"\0")
    for tool in (command[0], shutil.which("g++"), shutil.which("c++"), shutil.which("gcc")):
        if tool:
            path = Path(tool).resolve()
            stat = path.stat()
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    for var in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "CPATH", "CPLUS_INCLUDE_PATH"):
        digest.update(f"{var}={os.environ.get(var, '')}\0".encode())
    for path in source_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{Path(unit).stem}-{digest.hexdigest()[:40]}"


def _run_cached(unit: str, command: list[str], cache: Path | None, *, wait: bool = True
                ) -> tuple[int, str, float, bool] | None:
    """A unit's compile: (exit status, messages, seconds, whether from the cache).

    With a cache folder, a kernel unit whose key (_unit_key) has an entry is not compiled again: its machine
    code is copied to the command's output and its messages and time are the first compile's. A compile that
    succeeds makes the entry (written whole, then renamed into place); a failure makes none, so it is compiled
    and reported afresh every time. One file lock a key: a process that finds the unit being compiled by
    another waits for it (``wait``) or leaves it to that one (returns None). CI compiles the kernel units
    into the cache while it installs (warm_check_cache, on the core the install leaves idle), and the check's
    test then finds them there."""
    if cache is None or fcntl is None or unit not in KERNEL_UNITS:
        return (*_run(command), False)
    key = _unit_key(unit, command)
    out = Path(command[command.index("-o") + 1])
    entry, record = cache / f"{key}.cubin", cache / f"{key}.json"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock = open(cache / f"{key}.lock", "a")  # noqa: SIM115 - held across the compile below
    except OSError:  # a folder this process cannot write: compiled as without a cache
        return (*_run(command), False)
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None
        served = _served(entry, record, out)
        if served is not None:
            return 0, served[0], served[1], True
        code, output, seconds = _run(command)
        if code == 0:
            _keep(out, entry, record, output, seconds)
        return code, output, seconds, False


def _served(entry: Path, record: Path, out: Path) -> tuple[str, float] | None:
    """A cache entry's messages and seconds, its machine code copied to ``out``; None where there is none (or
    one this process cannot read: the unit is then compiled again)."""
    try:
        if not (entry.is_file() and record.is_file()):
            return None
        first = json.loads(record.read_text(encoding="utf-8"))
        shutil.copyfile(entry, out)
        return str(first["output"]), float(first["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _keep(out: Path, entry: Path, record: Path, output: str, seconds: float) -> None:
    """A compiled unit into the cache: each file written whole, then renamed into place (the record last, so an
    entry with a record is complete). A cache that cannot be written keeps nothing."""
    try:
        shutil.copyfile(out, entry.with_suffix(".part"))
        os.replace(entry.with_suffix(".part"), entry)
        record.with_suffix(".part").write_text(json.dumps({"output": output, "seconds": seconds}), encoding="utf-8")
        os.replace(record.with_suffix(".part"), record)
    except OSError:
        pass


def _kernel_commands(nvcc: str, target: Path, std: str, verbose: bool) -> dict[str, list[str]]:
    """The compile check's nvcc command for each kernel unit (machine code in ``target``): no torch needed."""
    machine_code = f"-gencode=arch=compute_{BASE_ARCH},code=sm_{BASE_ARCH}"
    commands: dict[str, list[str]] = {}
    for unit in KERNEL_UNITS:
        command = [nvcc, "-cubin", str(SOURCE_DIR / unit), "-o", str(target / (Path(unit).stem + ".cubin")),
                   f"-I{SOURCE_DIR}", f"-std={std}", *_TORCH_NVCC_DEFINES, *_NVCC_OPTIONS, machine_code]
        commands[unit] = [*command, "-Xptxas=-v"] if verbose else command
    return commands


def _check_commands(nvcc: str, cxx: str | None, target: Path, verbose: bool) -> dict[str, list[str]]:
    """The compile check's command for each unit: nvcc -cubin for the kernel units (sm_90 machine code in
    `target`), a syntax-only pass of the host compiler for the binding units (none without a host compiler).

    -cubin runs what the build runs for the device (the front end over the whole unit, host functions included,
    NVVM to PTX at the build's flags, ptxas) and leaves out the host compiler's pass over nvcc's generated host
    code and the fat binary: 40.0 -> 28.2 s for the kernel units one after another on a 2-core machine. A host
    function's error still fails it: the front end checks every function."""
    from torch.utils import cpp_extension

    std = cxx_standard()
    commands = _kernel_commands(nvcc, target, std, verbose)
    if cxx is not None:
        includes = [f"-I{path}" for path in cpp_extension.include_paths()]
        includes += [f"-I{sysconfig.get_paths()['include']}", f"-I{SOURCE_DIR}"]
        for unit in BINDING_UNITS:
            commands[unit] = [cxx, "-fsyntax-only", f"-std={std}", "-DTORCH_EXTENSION_NAME=rmsnorm_compile_check",
                              "-DTORCH_API_INCLUDE_EXTENSION_H", *includes, str(SOURCE_DIR / unit)]
    return commands


def compile_check(*, verbose: bool = False, out_dir: str | None = None, jobs: int | None = None) -> CheckResult:
    """nvcc every kernel unit to sm_90 machine code and compile every binding unit against torch's headers,
    `jobs` at a time (default: the CPU count, as ninja would).

    Nothing is linked or loaded, so no GPU is needed. ``verbose`` adds ptxas's register and spill report.
    With a folder in RMSNORM_CUDA_CHECK_CACHE, kernel units compiled before by the same command over the same
    sources come from it (_run_cached), and the report says which.
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
        cache = Path(os.environ[CHECK_CACHE_ENV]) if os.environ.get(CHECK_CACHE_ENV) else None
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1)) as pool:
            runs = pool.map(lambda item: _run_cached(item[0], item[1], cache), commands.items())
            results = {unit: run for unit, run in zip(commands, runs, strict=True) if run is not None}
        wall = time.perf_counter() - start
        for unit, (code, output, _, _) in results.items():
            if code == 0:
                continue
            if unit in BINDING_UNITS:
                return CheckResult(False, f"{cxx} failed on {unit} against torch {torch.__version__}'s headers "
                                          f"({' '.join(commands[unit])}):\n{output}")
            return CheckResult(False, f"nvcc failed on {unit} ({' '.join(commands[unit])}):\n{output}")
        for unit in KERNEL_UNITS:
            code, output, seconds, cached = results[unit]
            lines.append(f"{unit}: compiled by {nvcc} for sm_{BASE_ARCH} in {seconds:.1f} s"
                         + (f" (the same command over the same sources, from the cache in {cache})" if cached else ""))
            if verbose and output:
                lines.append(output)
        if cxx is None:
            lines.append(f"{', '.join(BINDING_UNITS)}: skipped, no host C++ compiler (set CXX)")
        for unit in BINDING_UNITS if cxx is not None else ():
            lines.append(f"{unit}: compiled by {cxx} against torch {torch.__version__}'s headers "
                         f"in {results[unit][2]:.1f} s")
        lines.append(f"{len(commands)} units, {max(1, jobs or os.cpu_count() or 1)} at a time: {wall:.1f} s")
    return CheckResult(True, "\n".join(lines))


def warm_check_cache(cache: Path, *, std: str = "c++20", units: tuple[str, ...] = KERNEL_UNITS) -> list[str]:
    """Compile ``units`` (kernel units) into the compile check's cache, one at a time, leaving any that another
    process is compiling to it; a line for each. Needs nvcc and no torch: CI runs it while it installs torch
    (``python3 backends/cuda_rmsnorm/_build.py --warm-check-cache DIR``), on the core the install leaves idle.
    ``std`` is the C++ standard torch's extension builder uses (cxx_standard); another one is another key, so a
    wrong guess costs the check its cache, never a wrong answer."""
    nvcc = find_nvcc()
    if nvcc is None:
        return ["nvcc not found: nothing compiled"]
    lines = []
    with tempfile.TemporaryDirectory(prefix="rmsnorm-cuda-warm-") as tmp:
        commands = _kernel_commands(nvcc, Path(tmp), std, False)
        for unit in units:
            run = _run_cached(unit, commands[unit], cache, wait=False)
            lines.append(f"{unit}: " + ("compiled elsewhere meanwhile" if run is None else
                                        f"exit {run[0]} in {run[2]:.1f} s" + (" (cached)" if run[3] else "")))
    return lines


if __name__ == "__main__":  # run as a file, without the package (whose import needs torch): the cache warm-up
    import argparse

    _parser = argparse.ArgumentParser(description=warm_check_cache.__doc__)
    _parser.add_argument("--warm-check-cache", metavar="DIR", required=True, type=Path)
    _parser.add_argument("--std", default="c++20")
    _parser.add_argument("--units", help="comma-separated kernel units (default: every one)")
    _args = _parser.parse_args()
    _units = tuple(_args.units.split(",")) if _args.units else KERNEL_UNITS
    print("\n".join(warm_check_cache(_args.warm_check_cache, std=_args.std, units=_units)), flush=True)
