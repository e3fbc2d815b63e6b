"""Which of the Triton warm-up's binaries a conformance run launches, and what each costs to build.

A cold Triton run on an H200 machine is bound by its CPU (as measured there): the workers' tests and
the warm-up's compiles share 16 cores. A binary the warm-up builds and no test launches is CPU taken from the tests.
Two steps, each with Triton's cache in a folder of its own (TRITON_CACHE_DIR):

    # the warm-up's jobs, part I of N, each timed, and the binaries each added to the cache
    TRITON_CACHE_DIR=<dir I> python benchmarks/warm_up_coverage.py jobs --part I --parts N --out jobs-I.json
    # a run's binaries: RMSNORM_CONFORMANCE_WARM_UP=0 and an empty TRITON_CACHE_DIR=<run dir>, then
    python benchmarks/warm_up_coverage.py compare --jobs jobs-*.json --run-cache <run dir> --out coverage.md

A binary is named by its cache folder (Triton's hash of the source, the signature, the constexprs and the options:
the same in every process of one Triton). ``compare`` says how many of the warm-up's binaries the run built too, what
the others cost by call and dtype, and which binaries the run built that no job had.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import sys
import time
from pathlib import Path


def _cache_dir() -> Path:
    return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def _binaries(cache: Path) -> dict[str, str]:
    """Each cache folder holding a compiled binary (a .cubin), by folder name: its kernel's name."""
    found = {}
    if cache.is_dir():
        for folder in cache.iterdir():
            for cubin in folder.glob("*.cubin"):
                found[folder.name] = cubin.stem
    return found


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # ptxas
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def jobs(part: int, parts: int, out: Path) -> None:
    import torch

    from rmsnorm_conformance.backends.triton_rmsnorm import TritonRMSNormOp, prepare_jobs
    from rmsnorm_conformance.harness.running.warm_up import prepared_dims

    device = torch.device("cuda")
    op = TritonRMSNormOp()
    cache = _cache_dir()
    op.prepared_call(4096, torch.bfloat16, torch.bfloat16, "forward", device)  # Triton's own first-use costs
    torch.cuda.synchronize()
    before = set(_binaries(cache))
    records = []
    for dim, x_dtype, w_dtype, call in prepare_jobs(prepared_dims())[part::parts]:
        wall, cpu = time.perf_counter(), _cpu()
        op.prepared_call(dim, x_dtype, w_dtype, call, device)
        torch.cuda.synchronize()
        now = _binaries(cache)
        records.append({"dim": dim, "x": str(x_dtype).removeprefix("torch."), "w": str(w_dtype).removeprefix("torch."),
                        "call": call, "wall_s": round(time.perf_counter() - wall, 3), "cpu_s": round(_cpu() - cpu, 3),
                        "binaries": {h: now[h] for h in sorted(set(now) - before)}})
        before = set(now)
    out.write_text(json.dumps({"part": part, "parts": parts, "jobs": records}, indent=1))


def compare(job_files: list[Path], run_cache: Path, out: Path) -> None:
    records = [r for f in job_files for r in json.loads(f.read_text())["jobs"]]
    run = _binaries(run_cache)
    prepared = {h: (r, name) for r in records for h, name in r["binaries"].items()}
    used = [r for r in records if any(h in run for h in r["binaries"])]
    unused = [r for r in records if r["binaries"] and not any(h in run for h in r["binaries"])]
    by = collections.defaultdict(lambda: [0, 0.0])
    for r in unused:
        key = (r["call"], r["x"], r["w"])
        by[key][0] += 1
        by[key][1] += r["cpu_s"]
    extra = collections.Counter(name for h, name in run.items() if h not in prepared)
    lines = [
        "# The Triton warm-up's binaries against a run's",
        "",
        f"- jobs: {len(records)}, {sum(r['cpu_s'] for r in records):.1f} CPU-s "
        f"({sum(r['wall_s'] for r in records):.1f} s wall), binaries {len(prepared)}",
        f"- jobs whose binaries the run built too: {len(used)} ({sum(r['cpu_s'] for r in used):.1f} CPU-s)",
        f"- jobs none of whose binaries the run built: {len(unused)} ({sum(r['cpu_s'] for r in unused):.1f} CPU-s)",
        f"- jobs that built nothing new (another job's binaries): {sum(1 for r in records if not r['binaries'])}",
        f"- binaries the run built: {len(run)}, of them no job's: {sum(extra.values())}",
        "",
        "| call | x | weight | unused jobs | their CPU-s |",
        "|---|---|---|---|---|",
        *(f"| {c} | {x} | {w} | {n} | {s:.1f} |" for (c, x, w), (n, s) in sorted(by.items())),
        "",
        "Binaries the run built that no job had, by kernel: "
        + (", ".join(f"{k} {v}" for k, v in extra.most_common()) or "none"),
        "",
        "Unused jobs' dims by call: "
        + "; ".join(f"{c}: {sorted({r['dim'] for r in unused if r['call'] == c})}"
                    for c in sorted({r['call'] for r in unused})),
    ]
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    j = sub.add_parser("jobs")
    j.add_argument("--part", type=int, default=0)
    j.add_argument("--parts", type=int, default=1)
    j.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("--jobs", type=Path, nargs="+", required=True)
    c.add_argument("--run-cache", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.what == "jobs":
        jobs(args.part, args.parts, args.out)
    else:
        compare(args.jobs, args.run_cache, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
