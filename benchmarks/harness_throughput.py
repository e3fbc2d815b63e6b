"""How fast the harness checks a backend: configurations per second and the wall time of a whole run.

Not a test: it runs the suites once under a Hypothesis profile and reports what the JSON report counted.

    python benchmarks/harness_throughput.py --backend=native --device=cpu --profile=ci [--out reports/cpu/throughput.md]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="native")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--profile", default="ci")
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist workers (0: none)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "pytest", "suites", f"--backend={args.backend}", f"--device={args.device}",
               f"--sweep={args.profile}", f"--report={report}", "-q", "-p", "no:cacheprovider"]
        if args.workers:
            cmd += ["-n", str(args.workers)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        data = json.loads(report.read_text())
    checks = data["totals"]["checks"]
    by_axis: dict[str, int] = {}
    for s in data["summaries"]:
        axis = s["rule"].split(".")[0]
        by_axis[axis] = by_axis.get(axis, 0) + s["checks"]
    lines = [
        f"# Harness throughput: {args.backend} on {args.device}, Hypothesis profile {args.profile}", "",
        f"Command: `python benchmarks/harness_throughput.py --backend={args.backend} --device={args.device} "
        f"--profile={args.profile} --workers={args.workers}`", "",
        f"- verdict: {data['verdict']} (pytest exit status {proc.returncode})",
        f"- wall time of the whole run: {wall:.1f} s (pytest start-up included)",
        f"- checks (one comparison each): {checks}; per axis: "
        + ", ".join(f"{k} {v}" for k, v in sorted(by_axis.items())),
        f"- checks per second: {checks / wall:.1f}",
        f"- tests passed: {data['totals']['passed_tests']}",
        f"- torch {data['environment'].get('torch')}, {data['environment'].get('platform')}",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
