"""What the installed plugin costs a pytest run that is not a conformance run: ``pytest --co -q`` in a scratch folder
holding one trivial test, with the plugin and with ``-p no:rmsnorm_conformance``, interleaved. A measurement, not a
test (tests/plugin/test_plugin_import.py checks the imports).

    python benchmarks/plugin_import.py [--runs 10]

Wall time on a shared machine moves with its load; the CPU time (user + system) of each pytest process is the
steadier figure, and the paired difference (with minus without, run by run) the one to read.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _run(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs of each command (default: 10)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs={args.runs} must be at least 1")
    cmd = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"]
    kinds = {"with the plugin": [], "-p no:rmsnorm_conformance": ["-p", "no:rmsnorm_conformance"]}
    figures: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_trivial.py").write_text("def test_trivial():\n    assert 1 + 1 == 2\n")
        for _ in range(args.runs):
            for kind, extra in kinds.items():
                wall, cpu = _run(cmd + extra, Path(tmp))
                figures[kind]["wall"].append(wall)
                figures[kind]["cpu"].append(cpu)
    print(f"{args.runs} interleaved runs of `{' '.join(['python', *cmd[1:]])}` on {os.cpu_count()} CPU cores, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print("| run | wall median (s) | wall min (s) | CPU median (s) | CPU min (s) |")
    print("|---|---|---|---|---|")
    for kind, f in figures.items():
        print(f"| {kind} | {statistics.median(f['wall']):.3f} | {min(f['wall']):.3f} | "
              f"{statistics.median(f['cpu']):.3f} | {min(f['cpu']):.3f} |")
    a, b = (figures[k] for k in kinds)
    for what in ("wall", "cpu"):
        diffs = [x - y for x, y in zip(a[what], b[what], strict=True)]
        print(f"paired difference in {what} time (with - without): median {statistics.median(diffs):+.3f} s, "
              f"mean {statistics.mean(diffs):+.3f} s")


if __name__ == "__main__":
    main()
