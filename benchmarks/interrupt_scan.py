"""Interrupt a conformance run at fixed delays and say what each interrupted run left: its exit status, its report's
verdict and why, and whether any pytest-xdist worker outlived it. A Ctrl-C must never end in PASS or exit status 0,
wherever in the run it lands (reports/cpu/interrupt-scan.md).

    python benchmarks/interrupt_scan.py [--delays 0.3,0.5,...] [--workers 2] [--signal INT] [-- pytest args]

Each run is ``pytest --pyargs rmsnorm_conformance.suites --backend=native --sweep=smoke`` from a scratch folder
(and the arguments after ``--``), started with SIGINT at its default disposition (a job a shell starts in the
background ignores it), and sent the signal after each delay in seconds.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _workers_alive(folder: Path) -> int:
    """Processes still working in this run's folder (a worker that outlived its controller); Linux's /proc."""
    alive = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            alive += Path(proc / "cwd").resolve() == folder.resolve()
        except OSError:
            continue
    return alive


def interrupt(delay: float, workers: int, signum: int, extra: list[str]) -> str:
    """One run interrupted after ``delay`` seconds: a line saying what it left."""
    with tempfile.TemporaryDirectory(prefix="interrupt-scan-") as tmp:
        folder = Path(tmp)
        report = folder / "r.json"
        command = [sys.executable, "-m", "pytest", "--pyargs", "rmsnorm_conformance.suites", "--backend=native",
                   "--sweep=smoke", "-p", "no:cacheprovider", f"--report={report}", f"--basetemp={folder / 'tmp'}",
                   *(["-n", str(workers)] if workers else []), *extra]
        run = subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(delay)
        run.send_signal(signum)
        try:
            status: int | str = run.wait(120)
        except subprocess.TimeoutExpired:
            run.kill()
            status = "still running after 120 s (killed)"
        time.sleep(0.5)
        if report.exists():
            data = json.loads(report.read_text())
            verdict = f"{data['verdict']} ({data.get('incomplete') or 'complete'})"
        else:
            verdict = "no report"
        return f"| {delay:g} | {status} | {verdict} | {_workers_alive(folder)} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delays", default="0.1,0.3,0.5,0.7,0.9,1.2,1.6,2.2,3.0",
                        help="seconds after the start at which to send the signal, comma-separated")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (0: one process)")
    parser.add_argument("--signal", default="INT", help="the signal's name without SIG (default: INT)")
    parser.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args()
    signum = getattr(signal, f"SIG{args.signal}")
    print(f"workers {args.workers}, SIG{args.signal}\n\n| delay (s) | exit status | report | processes left |\n"
          "|---|---|---|---|")
    for delay in (float(d) for d in args.delays.split(",")):
        print(interrupt(delay, args.workers, signum, args.extra), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
