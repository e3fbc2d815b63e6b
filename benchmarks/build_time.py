"""Cold build time of the CUDA extension: torch.utils.cpp_extension.load of every source, from an empty build
directory, in a fresh Python process (torch imported before the clock starts), as a conformance run's first use
of ``--backend=cuda`` pays it.

    python benchmarks/build_time.py [--legacy DIR] [--jobs N ...] [--out build-time.json]
    python benchmarks/build_time.py --compile-only [--legacy DIR] [--out ...]   # no CUDA torch needed

Times the package's sources (``_build.build()``, ninja over all translation units, MAX_JOBS unset or N) and,
with ``--legacy``, a single-unit source set kept in DIR (rmsnorm_kernels.cu and binding.cpp, as before the
split) with the same flags. Where no CUDA torch is installed the build cannot run; ``--compile-only`` then times
the compile of every unit's object (nvcc -c for the kernels, the host compiler at -O3 for the binding, with the
build's flags, as many at once as there are CPUs, as ninja would), without the link.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CURRENT = """
import time, torch
start = time.perf_counter()
from rmsnorm_conformance.backends.cuda_rmsnorm import _build
try:
    _build.build()
    ok = True
except RuntimeError as exc:
    ok = False
    print(str(exc)[-300:])
print("SECONDS", time.perf_counter() - start, ok)
"""

_LEGACY = """
import sys, time, torch
from pathlib import Path
from torch.utils import cpp_extension
from rmsnorm_conformance.backends.cuda_rmsnorm import _build
src = Path(sys.argv[1])
start = time.perf_counter()
try:
    cpp_extension.load(name="rmsnorm_legacy_build_time", sources=[str(src / "binding.cpp"),
                       str(src / "rmsnorm_kernels.cu")], extra_cflags=["-O3"],
                       extra_cuda_cflags=_build.nvcc_flags(), extra_include_paths=[str(src)],
                       build_directory=sys.argv[2], is_python_module=False)
    ok = True
except Exception as exc:
    ok = False
    print(str(exc)[-300:])
print("SECONDS", time.perf_counter() - start, ok)
"""


def _time(code: str, args: list[str], jobs: int | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="rmsnorm-build-time-") as tmp:
        env = dict(os.environ, RMSNORM_CUDA_BUILD_DIR=tmp)
        env.pop("RMSNORM_CUDA_LIBRARY", None)
        if jobs:
            env["MAX_JOBS"] = str(jobs)
        else:
            env.pop("MAX_JOBS", None)
        build = Path(tmp) / "legacy"
        build.mkdir()
        proc = subprocess.run([sys.executable, "-c", code, *args, str(build)], capture_output=True, text=True,
                              env=env, check=False)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("SECONDS")]
    if not line:
        return {"error": (proc.stdout + proc.stderr)[-600:]}
    _, seconds, ok = line[-1].split()
    return {"seconds": round(float(seconds), 1), "linked_and_loaded": ok == "True",
            **({} if ok == "True" else {"note": "link or load failed (no CUDA torch here?): compile time only",
                                        "tail": proc.stdout[-300:]})}


def _compile_only(legacy: str | None) -> list[dict]:
    from concurrent.futures import ThreadPoolExecutor

    from rmsnorm_conformance.backends.cuda_rmsnorm import _build

    nvcc, cxx = _build.find_nvcc(), os.environ.get("CXX") or "c++"
    records = []
    with tempfile.TemporaryDirectory(prefix="rmsnorm-build-time-") as tmp:
        split = _build._check_commands(nvcc, cxx, Path(tmp), verbose=False)
        for unit in _build.BINDING_UNITS:  # a real object at -O3 -fPIC, as the build compiles it
            split[unit] = [a for a in split[unit] if a != "-fsyntax-only"] + [
                "-O3", "-fPIC", "-c", "-o", str(Path(tmp) / (unit + ".o"))]
        sets = {"package (split)": split}
        if legacy:
            src = Path(legacy).resolve()
            one = dict(split)
            kern = [a if a != str(_build.SOURCE_DIR / _build.KERNELS) else str(src / "rmsnorm_kernels.cu")
                    for a in split[_build.KERNELS]]
            bind = [a if a != str(_build.SOURCE_DIR / _build.BINDING) else str(src / "binding.cpp")
                    for a in split[_build.BINDING]]
            one = {"rmsnorm_kernels.cu": [a if a != f"-I{_build.SOURCE_DIR}" else f"-I{src}" for a in kern],
                   "binding.cpp": [a if a != f"-I{_build.SOURCE_DIR}" else f"-I{src}" for a in bind]}
            sets[f"single unit ({legacy})"] = one
        for name, commands in sets.items():
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                runs = list(pool.map(lambda c: subprocess.run(c, capture_output=True, text=True, check=False),
                                     commands.values()))
            wall = time.perf_counter() - start
            bad = [u for u, r in zip(commands, runs, strict=True) if r.returncode != 0]
            rec = {"sources": name, "compile_only_seconds": round(wall, 1), "units": len(commands),
                   **({"failed": bad} if bad else {})}
            records.append(rec)
            print(json.dumps(rec), flush=True)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--legacy", metavar="DIR", help="also time the single-unit sources in DIR")
    parser.add_argument("--jobs", type=int, nargs="*", default=[0],
                        help="MAX_JOBS values to time the package's build under (0: unset, ninja's default)")
    parser.add_argument("--out", help="JSON output")
    parser.add_argument("--compile-only", action="store_true", help="time the objects' compile alone (no link)")
    args = parser.parse_args(argv)
    if args.compile_only:
        result = {"cpus": os.cpu_count(), "records": _compile_only(args.legacy)}
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        return 0
    records = []
    for jobs in args.jobs:
        start = time.perf_counter()
        rec = {"sources": "package (split)", "max_jobs": jobs or None, **_time(_CURRENT, [], jobs or None)}
        rec["wall"] = round(time.perf_counter() - start, 1)
        records.append(rec)
        print(json.dumps(rec), flush=True)
    if args.legacy:
        rec = {"sources": f"single unit ({args.legacy})", "max_jobs": None,
               **_time(_LEGACY, [str(Path(args.legacy).resolve())], None)}
        records.append(rec)
        print(json.dumps(rec), flush=True)
    result = {"cpus": os.cpu_count(), "records": records}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
