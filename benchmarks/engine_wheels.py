"""The engine wheels for a GPU machine with no network, in groups that each fit in one call's carry: download the
pinned wheels, then pack them into ``.whl-engines/gN/``, splitting a wheel too large for a group into
``NAME.part-N`` files with ``NAME.sha256`` beside each part, as ``benchmarks/engines_on_device.sh`` joins them.

    python benchmarks/engine_wheels.py download DIR     # the pinned wheels for CPython 3.12, manylinux x86-64
    python benchmarks/engine_wheels.py pack DIR [--out .whl-engines] [--max-mib 56]

The target machine: torch 2.11 built for CUDA 13.0, Triton 3.6, Python 3.12, with numpy, einops, cuda-bindings,
requests and the like already there; the wheels below are what it lacks, plus a few small pure-Python ones as
insurance (a package installed there shadows the carried copy, which then goes unused).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import subprocess
import sys
from pathlib import Path

MIB = 1 << 20
# Each pinned for the reason beside it; versions read from each wheel's METADATA (Requires-Dist).
WHEELS: tuple[tuple[str, str], ...] = (
    ("liger-kernel==0.8.5", "Liger-Kernel's Triton RMSNorm; needs torch and triton only"),
    ("fla-core==0.6.0", "flash-linear-attention's Triton RMSNorm; needs einops"),
    ("einops==0.8.2", "fla-core and quack import it"),
    ("xformers==0.0.35", "the release for torch>=2.10 (py39-none); its _C.so links libcudart.so.12, which a "
                         "CUDA 13 torch lacks, so only its Triton kernels (the RMSNorm among them) load"),
    ("quack-kernels==0.6.5", "CuTe DSL RMSNorm; needs nvidia-cutlass-dsl>=4.7, apache-tvm-ffi, "
                             "torch-c-dlpack-ext, einops"),
    ("nvidia-cutlass-dsl==4.8.1", "meta package; FlashInfer 0.7.4 needs >=4.8.0"),
    ("nvidia-cutlass-dsl-libs-base==4.8.1", "the DSL's Python side"),
    ("nvidia-cutlass-dsl-libs-core==4.8.1", "the DSL's Python side"),
    ("nvidia-cutlass-dsl-libs-cu13==4.8.1", "the CUDA 13 flavor (picked by the driver's CUDA version); the cu12 "
                                            "flavor the meta package names by default is left out"),
    ("apache-tvm-ffi==0.1.15.post2", "quack and FlashInfer call kernels through it"),
    ("torch-c-dlpack-ext==0.1.5", "quack requires it; a no-op on torch>=2.10, which has the exchange API"),
    ("flashinfer-python==0.7.4", "norm kernels on the CuTe DSL path (nvidia-cutlass-dsl), CUDA JIT otherwise; "
                                 "cuda-tile, cudnn-frontend, nccl4py, nccl-extensions are not needed for "
                                 "flashinfer.norm"),
    ("requests==2.34.2", "FlashInfer imports it (insurance)"),
    ("urllib3==2.8.0", "requests (insurance)"),
    ("idna==3.20", "requests (insurance)"),
    ("certifi==2026.10.19.post1", "requests (insurance)"),
    ("charset-normalizer==3.5.3", "requests (insurance)"),
    ("tqdm==4.70.1", "FlashInfer imports it (insurance)"),
    ("nvidia-ml-py==13.615.71", "FlashInfer imports pynvml (insurance)"),
    ("protobuf==7.36.2", "nvidia-cutlass-dsl (insurance)"),
    ("ninja==1.13.2", "FlashInfer's CUDA JIT fallback runs ninja (insurance)"),
)
PLATFORM_ARGS = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:", "--no-deps",
                 *(a for n in ("manylinux_2_28", "manylinux_2_27", "manylinux_2_24", "manylinux_2_17",
                               "manylinux2014", "manylinux_2_5", "manylinux1")
                   for a in ("--platform", f"{n}_x86_64"))]


def download(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", *PLATFORM_ARGS, "-d", str(dest), *(w for w, _ in WHEELS)]
    subprocess.run(cmd, check=True)


def plan(sizes: dict[str, int], capacity: int) -> list[list[tuple[str, int, int]]]:
    """Groups of (wheel, start, end) byte ranges, each group at most ``capacity`` bytes, largest wheels first.

    A wheel goes whole into the current group where it fits; a larger one fills the group and goes on in the
    next, so only wheels bigger than what is left of a group are split. As few groups as the bytes need, give
    or take the one a whole small wheel may open."""
    groups: list[list[tuple[str, int, int]]] = [[]]
    free = capacity
    for name, size in sorted(sizes.items(), key=lambda item: (-item[1], item[0])):
        start = 0
        if size > free and size <= capacity and size < 4 * MIB:  # a small wheel is never split
            groups.append([])
            free = capacity
        while start < size:
            if free == 0:
                groups.append([])
                free = capacity
            end = min(size, start + free)
            groups[-1].append((name, start, end))
            free -= end - start
            start = end
    return [g for g in groups if g]


def pack(src: Path, out: Path, max_mib: float) -> list[Path]:
    wheels = {p.name: p for p in sorted(src.glob("*.whl"))}
    if not wheels:
        raise SystemExit(f"no wheels in {src}")
    sizes = {name: p.stat().st_size for name, p in wheels.items()}
    # As few groups as max_mib allows, then evened out (a MiB of slack for the wheels that are never split), so
    # that every call keeps the most room for the working tree beside its group.
    limit = int(max_mib * MIB)
    fewest = len(plan(sizes, limit))
    groups = plan(sizes, min(limit, math.ceil(sum(sizes.values()) / fewest) + MIB))
    if len(groups) > fewest:
        groups = plan(sizes, limit)
    split = {name for name, size in sizes.items() if any(0 < e - s < size for g in groups for n, s, e in g
                                                           if n == name)}
    digests = {name: hashlib.sha256(wheels[name].read_bytes()).hexdigest() for name in split}
    part_numbers = {name: 0 for name in split}
    made = []
    for i, group in enumerate(groups, 1):
        folder = out / f"g{i}"
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, start, end in group:
            with wheels[name].open("rb") as f:
                f.seek(start)
                data = f.read(end - start)
            if name in split:
                part_numbers[name] += 1
                (folder / f"{name}.part-{part_numbers[name]}").write_bytes(data)
                (folder / f"{name}.sha256").write_text(f"{digests[name]}  {name}\n")
            else:
                (folder / name).write_bytes(data)
        made.append(folder)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("download", help="download the pinned wheels")
    d.add_argument("dir", type=Path)
    p = sub.add_parser("pack", help="pack downloaded wheels into groups")
    p.add_argument("dir", type=Path)
    p.add_argument("--out", type=Path, default=Path(".whl-engines"))
    p.add_argument("--max-mib", type=float, default=56.0,
                   help="the most one group may hold: a call carries 64 MiB with the working tree")
    args = parser.parse_args(argv)
    if args.command == "download":
        download(args.dir)
        return 0
    for folder in pack(args.dir, args.out, args.max_mib):
        files = sorted(folder.iterdir())
        total = sum(f.stat().st_size for f in files)
        print(f"{folder}: {total / MIB:.1f} MiB, {len(files)} files: {', '.join(f.name for f in files)}")
    print(f"{math.ceil(sum(p.stat().st_size for p in args.dir.glob('*.whl')) / MIB)} MiB of wheels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
