"""How often the diagnosis of a bitwise breach names the mechanism a planted defect plants: each Axis-A, first-call,
execution-mode and parity defect of the zoo (its ``mechanism``, or a control's ``parity_mechanism`` against native),
run as a user would (``--rule``, ``--sweep=ci``, ``-x``) with a JSON report, and the diagnosis read from it.

    python benchmarks/diagnosis.py [--out reports/cpu/diagnosis.md] [--defect NAME ...] [--jobs 2]

A diagnosis names the mechanism when its threshold has the planted kind and, where the defect has one, exactly the
planted value (a mode: the planted words appear in the mode named), and its stage is the planted stage.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DIAGNOSED = ("axis_a.", "parity.bitwise")


def subjects() -> list[dict[str, Any]]:
    """Each diagnosed defect, and each parity pair of a control against native, with its run's arguments."""
    from rmsnorm_conformance.zoo import DEFECTS, EngineStyleRMSNorm, LaneOrderRMSNorm

    out = []
    for d in DEFECTS:
        if d.breaks.startswith(DIAGNOSED):
            out.append({"name": d.__name__, "rule": d.breaks, "mechanism": d.mechanism, "backend": d.name,
                        "args": [f"--rule={d.breaks}", f"--backend=rmsnorm_conformance.zoo:{d.__name__}"]})
    for control in (LaneOrderRMSNorm, EngineStyleRMSNorm):
        out.append({"name": f"native = {control.__name__}", "rule": "parity.bitwise",
                    "mechanism": control.parity_mechanism, "backend": f"native={control.name}",
                    "args": ["--rule=parity.bitwise", f"--backend=native,rmsnorm_conformance.zoo:{control.__name__}",
                             f"--require-parity=native:{control.name}"]})
    return out


def run_one(subject: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """The subject's pytest run; its first diagnosed summary and whether it names the mechanism."""
    from rmsnorm_conformance.harness.checking.diagnosis import mechanism_named

    report = tmp / f"{subject['name'].replace(' ', '_').replace('=', '_')}.json"
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "rmsnorm_conformance.suites", *subject["args"], "--device=cpu",
           "--sweep=ci", "-x", f"--report={report}", "-p", "no:cacheprovider", "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    data = json.loads(report.read_text()) if report.exists() else {"summaries": []}
    found = next((s for s in data["summaries"] if s.get("diagnosis") and s["rule"] == subject["rule"]), None)
    row = {**subject, "exit": proc.returncode, "wall": wall, "diagnosis": found and found["diagnosis"],
           "dtype": found and found["dtype"], "threshold_ok": False, "stage_ok": False}
    if found:
        row["threshold_ok"], row["stage_ok"] = mechanism_named(tuple(subject["mechanism"]), found["diagnosis"])
    return row


def render(rows: list[dict[str, Any]], command: str, env: dict[str, Any]) -> str:
    from tabulate import tabulate

    from rmsnorm_conformance.harness.reporting.diagnoses import one_line

    named = sum(r["threshold_ok"] and r["stage_ok"] for r in rows)
    table = []
    for r in rows:
        kind, value, stage = r["mechanism"]
        planted = f"{kind}" + (f" {value}" if value is not None else "") + f"; {stage}"
        d = r["diagnosis"]
        said = one_line(d) if d else f"no diagnosis (exit {r['exit']})"
        verdict = "yes" if r["threshold_ok"] and r["stage_ok"] else \
            "threshold only" if r["threshold_ok"] else "stage only" if r["stage_ok"] else "no"
        table.append([r["name"], f"`{r['rule']}`", planted, r["dtype"] or "–", said.replace("|", "/"),
                      d["calls"] if d else "–", verdict, f"{r['wall']:.0f}"])
    header = [f"- {k}: {v}" for k, v in env.items() if k in ("date", "torch", "python", "platform")
              or k.startswith("device")]
    return "\n".join([
        "# Diagnosis: does the diagnosis of a breach name the planted mechanism?", "",
        f"Command: `{command}`", "", *header, "",
        "Each Axis-A, first-call, execution-mode and parity defect of the zoo (and each control against native under "
        "`--require-parity`) runs the suite tests of its rule as a user would (`--sweep=ci`, `-x`, `--device=cpu`). "
        "*Planted*: the defect's declared `mechanism` (kind, value, stage). *Diagnosis*: the first diagnosed breach "
        "in the run's JSON report, in one line (threshold; stage; where the revealed trees part). *Named*: the "
        "threshold has the planted kind and exact value, and the stage is the planted one. *Calls*: calls into the "
        "backend the diagnosis made. *Wall*: the whole run's seconds, pytest's start-up included.", "",
        f"Named: {named} of {len(rows)} ({100 * named / max(len(rows), 1):.0f} %).", "",
        tabulate(table, ["defect", "breaks", "planted", "dtype", "diagnosis", "calls", "named", "wall (s)"],
                 tablefmt="github"), ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="write the markdown table here")
    parser.add_argument("--defect", action="append", default=[], help="only these (class names)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    args = parser.parse_args()
    from rmsnorm_conformance.harness.reporting.environment import fingerprint

    chosen = [s for s in subjects() if not args.defect or any(n in s["name"] for n in args.defect)]
    if not chosen:
        parser.error(f"--defect={args.defect}: no diagnosed defect has that name")
    with tempfile.TemporaryDirectory() as tmpdir, ThreadPoolExecutor(max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda s: run_one(s, Path(tmpdir)), chosen))
    for r in rows:
        print(r["name"], r["threshold_ok"], r["stage_ok"], r["diagnosis"] and r["diagnosis"]["threshold"]["text"],
              flush=True)
    command = "python benchmarks/diagnosis.py" + (f" --jobs {args.jobs}" if args.jobs != 1 else "") + \
        "".join(f" --defect {d}" for d in args.defect) + (f" --out {args.out}" if args.out else "")
    import torch

    text = render(rows, command, fingerprint([torch.device("cpu")]))
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
