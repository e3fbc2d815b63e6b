"""Command-line entry: ``python -m rmsnorm_conformance.backends.cuda_rmsnorm --compile-check`` compiles the
sources without a GPU; ``--bench`` and ``--smoke`` run the built kernels on one. It sits above the package's other
modules and imports them, so that the build never imports the benchmark or the smoke run that import the package.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import _bench, _build, _smoke


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

        records = _bench.run()
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
        print("\n".join(_bench.render(records)), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
        return 0
    if args.smoke:
        for line in _smoke.run():
            print(line, flush=True)
        return 0
    if not args.compile_check:
        parser.print_help()
        return 2
    result = _build.compile_check(verbose=args.verbose, out_dir=args.out, jobs=args.jobs)
    print(result.report, file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
