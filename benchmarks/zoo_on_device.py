"""Run the planted-defect zoo (rmsnorm_conformance.zoo) on one device and say, per defect, whether the suites
caught it in the rule it breaks. tests/detection/test_detection.py does this on the CPU in CI; this is for GPUs.

    python benchmarks/zoo_on_device.py --device cuda [--jobs 4] [--out reports/gpu/detection.md]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rmsnorm_conformance.contract import rule  # noqa: E402
from rmsnorm_conformance.zoo import DEFECTS  # noqa: E402


def run_one(defect: type, device: str) -> list[object]:
    strict = ["--strict-interface"] if rule(defect.breaks).severity == "interface" else []
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "rmsnorm_conformance.suites", f"--rule={defect.breaks}",
           f"--backend=rmsnorm_conformance.zoo:{defect.__name__}", f"--device={device}", "--sweep=ci", "-x", "-q",
           "-p", "no:cacheprovider", *strict]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT),
                                                                                **_env()})
    wall = time.perf_counter() - start
    rules = set(re.findall(r"contract rule (\S+) \(", proc.stdout))
    caught = proc.returncode == 1 and rules == {defect.breaks}
    minimal = re.search(r"minimal configuration: (.*)$", proc.stdout, re.M)
    return [defect.__name__, defect.breaks, "caught" if caught else f"NOT CAUGHT (exit {proc.returncode}, "
            f"rules {sorted(rules)})", f"{wall:.1f}", minimal.group(1)[:110] if minimal else "–"]


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--only", default="", help="comma list of defect class names (default: all)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    chosen = [d for d in DEFECTS if not args.only or d.__name__ in args.only.split(",")]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda d: run_one(d, args.device), chosen))
    caught = sum(r[2] == "caught" for r in rows)
    text = "\n".join([
        f"# The planted-defect zoo on {args.device}", "",
        f"Command: `python benchmarks/zoo_on_device.py --device {args.device} --jobs {args.jobs}`", "",
        f"{caught} of {len(rows)} defects caught in the rule they break (ci profile, `-x`).", "",
        tabulate(rows, ["defect", "breaks", "verdict", "wall s", "minimal configuration"], tablefmt="github"), ""])
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    sys.exit(0 if caught == len(rows) else 1)


if __name__ == "__main__":
    main()
