"""Device faults on a GPU: a kernel that fires a device-side assert and one that runs out of memory, beside native
and a correct kernel, in one pytest-xdist run. The faulting kernel must fail alone: native and the correct kernel
read PASS, or "not run: the device was lost", never FAIL (issue 65's run, where a correct kernel read FAIL for a
context the asserting kernel had poisoned). A measurement of the gate on real hardware, not a test.

    python benchmarks/device_faults.py [--workers 8] [--deadline 170] [--out reports/gpu/device-faults.md]

Run it on a GPU machine with the package installed (the suites run from an empty folder through the installed
plugin, as a kernel author runs them). It writes one markdown file: the environment, the command, each backend's
verdict and failed rules, the tests that failed and whose they were, and what did not run and why.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# native, a correct kernel of another reduction order, the real Triton device-side assert above 300 rows (bf16
# only), and the kernel that asks for a terabyte above 4096 rows.
BACKENDS = ("native", "rmsnorm_conformance.zoo:LaneOrderRMSNorm", "rmsnorm_conformance.zoo.faults:TritonDeviceAssert",
            "rmsnorm_conformance.zoo.faults:AsksForATerabyte")
INNOCENT = ("native", "lane_order")


def command(workers: int, deadline: float, report: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", "--pyargs", "rmsnorm_conformance.suites", f"--backend={','.join(BACKENDS)}",
            "--device=cuda", "--dtype=bfloat16", "--sweep=ci", "-n", str(workers), "-q", "-p", "no:cacheprovider",
            f"--deadline={deadline:g}", f"--report={report}"]


def environment() -> list[tuple[str, str]]:
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return [("device", device), ("torch", torch.__version__),
            ("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))]


def summary(data: dict[str, Any], ret: int, cmd: list[str], seconds: float) -> str:
    rows = data["pick"]["rows"]
    lines = ["# Device faults on a GPU: the faulting kernels fail alone", "",
             "Command (on the GPU machine, the package installed):", "", "```bash",
             "python benchmarks/device_faults.py --out reports/gpu/device-faults.md", "```", "",
             "which runs, from an empty folder:", "", "```bash",
             " ".join(shlex.quote(part) for part in ["pytest", *cmd[3:-1], "--report=<scratch>.json"]), "```", "",
             "| environment | |", "|---|---|", *(f"| {k} | {v} |" for k, v in environment()),
             f"| wall time | {seconds:.0f} s |", f"| exit status | {ret} |", "",
             f"Verdict: **{data['verdict_label']}**; {data['totals']['checks']} checks, "
             f"{data['totals']['failed_checks']} failed.", "",
             "| backend | verdict | checks | numerics breached | innocent |", "|---|---|---|---|---|"]
    for r in rows:
        innocent = "yes" if r["backend"] in INNOCENT else "no"
        lines.append(f"| {r['backend']} | {r['verdict']} | {r['checks']} | "
                     f"{', '.join(r['numerics_breached']) or '–'} | {innocent} |")
    failed = {n: o for n, o in data["outcomes"].items() if o["outcome"] in ("failed", "error")}
    blamed = sorted({o.get("backend", "?") for o in failed.values()})
    lines += ["", f"Tests failed: {len(failed)}, all of them of: {', '.join(blamed) or 'none'}.", ""]
    held = not any(r["backend"] in INNOCENT and r["verdict"] == "FAIL" for r in rows) and not (
        set(blamed) & set(INNOCENT))
    lines += [f"Native and the correct kernel never read FAIL: **{'held' if held else 'BROKEN'}**.", ""]
    lost = [e for e in data["not_run"] if e["backend"] in INNOCENT]
    if lost:
        lines += ["What did not run for them, and why:", "",
                  *(f"- {e['backend']} on {e['device']}: {e['reason'][:300]}" for e in lost), ""]
    if data.get("incomplete"):
        lines += [f"The run did not finish: {data['incomplete'][:500]}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--deadline", type=float, default=170.0, help="the run's --deadline, in seconds")
    parser.add_argument("--out", type=Path, default=Path("reports/gpu/device-faults.md"))
    args = parser.parse_args(argv)
    out = args.out.resolve()
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch, "r.json")
        cmd = command(args.workers, args.deadline, report)
        start = time.monotonic()
        ret = subprocess.run(cmd, cwd=scratch, check=False).returncode
        seconds = time.monotonic() - start
        data = json.loads(report.read_text()) if report.exists() else None
    out.parent.mkdir(parents=True, exist_ok=True)
    if data is None:  # the gate wrote no report: that is the finding, and it is written down as one
        out.write_text(f"# Device faults on a GPU\n\nThe run (exit {ret}, {seconds:.0f} s) wrote no report: "
                       f"`{' '.join(cmd)}`\n")
        print(f"wrote {out}: no report")
        return 1
    out.write_text(summary(data, ret, cmd, seconds) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
