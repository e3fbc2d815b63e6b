"""How often the diagnosis of a bitwise breach names the mechanism a planted defect plants: each Axis-A, first-call,
execution-mode and parity defect of the zoo (its ``mechanism``, or a control's ``parity_mechanism`` against native),
run as a user would (``--rule``, ``--sweep=ci``, ``-x``) with a JSON report, and the diagnosis read from it.

    python benchmarks/diagnosis.py [--out reports/cpu/diagnosis.md] [--defect NAME ...] [--jobs 2]
        [--cost-turns 2 --cost-defect SmallBatchReduction]

A diagnosis names the mechanism when its threshold has the planted kind and, where the defect has one, exactly the
planted value (a mode: the planted words appear in the mode named), and its stage is the planted stage.

``--cost-turns N`` also measures what the diagnosis costs: the suite tests of the rule one failing defect breaks,
under ``--sweep=ci`` (no ``-x``: every failing test is diagnosed), N times with the diagnosis and N times with it
turned off (a plugin that replaces ``for_breach`` by a function that returns None), in turns, as user + system CPU
seconds of the pytest process (the machine is shared: CPU time moves less than wall time, and turns cancel a drift).
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



# Each run holds its kernel to one dtype: float32, where every change of order shows, except where the planted path
# takes another (a mixed pair: bf16 x with an fp32 weight).
DTYPE = "float32"
COST_TITLE = "## What a diagnosis costs"
DTYPES = {"MixedPairSmallBatch": "bfloat16"}


def subjects() -> list[dict[str, Any]]:
    """Each diagnosed defect, and each parity pair of a control against native, with its run's arguments."""
    from rmsnorm_conformance.contract.families import parity
    from rmsnorm_conformance.harness.checking.diagnosis import diagnosed
    from rmsnorm_conformance.zoo import DEFECTS, EngineStyleRMSNorm, LaneOrderRMSNorm

    out = []
    for d in DEFECTS:
        if diagnosed(d.breaks):
            out.append({"name": d.__name__, "rule": d.breaks, "mechanism": d.mechanism, "backend": d.name,
                        "args": [f"--rule={d.breaks}", f"--backend=rmsnorm_conformance.zoo:{d.__name__}",
                                 f"--dtype={DTYPES.get(d.__name__, DTYPE)}"]})
    for control in (LaneOrderRMSNorm, EngineStyleRMSNorm):
        out.append({"name": f"native = {control.__name__}", "rule": parity.BITWISE.id,
                    "mechanism": control.parity_mechanism, "backend": f"native={control.name}",
                    "args": [f"--rule={parity.BITWISE.id}",
                             f"--backend=native,rmsnorm_conformance.zoo:{control.__name__}",
                             f"--require-parity=native:{control.name}", f"--dtype={DTYPE}"]})
    return out


def run_one(subject: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """The subject's pytest run; its first diagnosed summary and whether it names the mechanism."""
    report = tmp / report_name(subject)
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "rmsnorm_conformance.suites", *subject["args"], "--device=cpu",
           "--sweep=ci", "-x", f"--report={report}", "-p", "no:cacheprovider", "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
    return row_of(subject, report, proc.returncode, time.perf_counter() - start)


def report_name(subject: dict[str, Any]) -> str:
    return f"{subject['name'].replace(' ', '_').replace('=', '_')}.json"


def row_of(subject: dict[str, Any], report: Path, code: int | None, wall: float | None) -> dict[str, Any]:
    """A subject's row from its run's JSON report: the first diagnosed summary of its rule, and whether it names the
    planted mechanism (no report: the run did not finish)."""
    from rmsnorm_conformance.harness.checking.diagnosis import mechanism_named

    data = json.loads(report.read_text()) if report.exists() else {"summaries": []}
    found = next((s for s in data["summaries"] if s.get("diagnosis") and s["rule"] == subject["rule"]), None)
    row = {**subject, "exit": code if report.exists() else "no report", "wall": wall,
           "diagnosis": found and found["diagnosis"], "dtype": found and found["dtype"],
           "verdict": data.get("verdict", "not run"), "threshold_ok": False, "stage_ok": False}
    if found:
        row["threshold_ok"], row["stage_ok"] = mechanism_named(tuple(subject["mechanism"]), found["diagnosis"])
    return row


# The plugin that turns the diagnosis off, written to a scratch folder called ``tests`` (Hypothesis mines literals from
# other local modules and would draw other examples).
OFF_PLUGIN = """
from rmsnorm_conformance.harness.checking import diagnosis

diagnosis.for_breach = lambda *args, **kwargs: None
"""


def measure_cost(defect: str, turns: int, tmp: Path) -> list[dict[str, Any]]:
    """user + system CPU seconds of the Axis-A ci sweep against ``defect``, with and without the diagnosis, in
    turns."""
    from rmsnorm_conformance import zoo

    rule = getattr(zoo, defect).breaks
    plugin_dir = tmp / "tests"
    plugin_dir.mkdir(exist_ok=True)
    (plugin_dir / "diagnosis_off.py").write_text(OFF_PLUGIN)
    out = []
    for turn in range(turns):
        for diagnosed in (False, True):
            report = tmp / f"cost-{turn}-{diagnosed}.json"
            cmd = ["/usr/bin/time", "-f", "%U %S %e", sys.executable, "-m", "pytest", "--pyargs",
                   "rmsnorm_conformance.suites", f"--rule={rule}", f"--backend=rmsnorm_conformance.zoo:{defect}",
                   "--device=cpu", "--sweep=ci", f"--dtype={DTYPE}", "-p", "no:cacheprovider", "-q",
                   f"--report={report}",
                   *([] if diagnosed else ["-p", "diagnosis_off"])]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(plugin_dir)])}
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
            user, system, wall = (float(v) for v in proc.stderr.strip().splitlines()[-1].split())
            data = json.loads(report.read_text()) if report.exists() else {"summaries": [], "totals": {}}
            out.append({"turn": turn, "diagnosed": diagnosed, "cpu": user + system, "wall": wall,
                        "failed_tests": data.get("totals", {}).get("failed_tests"),
                        "diagnoses": sum(1 for s in data["summaries"] if s.get("diagnosis")),
                        "calls": sum(s["diagnosis"]["calls"] for s in data["summaries"] if s.get("diagnosis"))})
            print(out[-1], flush=True)
    return out


def render_cost(cost: list[dict[str, Any]], defect: str) -> list[str]:
    from tabulate import tabulate

    off = [c["cpu"] for c in cost if not c["diagnosed"]]
    on = [c["cpu"] for c in cost if c["diagnosed"]]
    ratio = (sum(on) / len(on)) / (sum(off) / len(off)) - 1
    table = [[c["turn"] + 1, "on" if c["diagnosed"] else "off", f"{c['cpu']:.1f}", f"{c['wall']:.0f}",
              c["failed_tests"], c["diagnoses"], c["calls"]] for c in cost]
    return [COST_TITLE, "",
            f"The suite tests of the rule `{defect}` breaks (`--pyargs rmsnorm_conformance.suites --rule=...`) under "
            f"`--sweep=ci --device=cpu --dtype={DTYPE}`, without `-x` (every failing test is diagnosed), with the "
            "diagnosis on and off "
            "in turns; CPU is the pytest process's user + system seconds.", "",
            tabulate(table, ["turn", "diagnosis", "CPU (s)", "wall (s)", "failed tests", "diagnoses",
                             "calls into the backend"], tablefmt="github"), "",
            f"Mean CPU with the diagnosis: {sum(on) / len(on):.1f} s; without: {sum(off) / len(off):.1f} s: "
            f"{100 * ratio:+.1f} %.", ""]


def render(rows: list[dict[str, Any]], command: str, env: dict[str, Any]) -> str:
    from tabulate import tabulate

    from rmsnorm_conformance.harness.reporting.diagnoses import one_line

    named = sum(r["threshold_ok"] and r["stage_ok"] for r in rows)
    table = []
    for r in rows:
        kind, value, stage = r["mechanism"]
        planted = f"{kind}" + (f" {value}" if value is not None else "") + f"; {stage}"
        d = r["diagnosis"]
        said = one_line(d) if d else f"no diagnosis (run: {r['verdict']})"
        verdict = "yes" if r["threshold_ok"] and r["stage_ok"] else \
            "threshold only" if r["threshold_ok"] else "stage only" if r["stage_ok"] else "no"
        table.append([r["name"], f"`{r['rule']}`", planted, r["dtype"] or "–", said.replace("|", "/"),
                      d["calls"] if d else "–", verdict, f"{r['wall']:.0f}" if r["wall"] is not None else "–"])
    header = [f"- {k}: {v}" for k, v in env.items() if k in ("date", "torch", "python", "platform")
              or k.startswith("device")]
    return "\n".join([
        "# Diagnosis: does the diagnosis of a breach name the planted mechanism?", "",
        f"Command: `{command}`", "", *header, "",
        "Each Axis-A, first-call, execution-mode and parity defect of the zoo (and each control against native under "
        "`--require-parity`) runs the suite tests of its rule as a user would (`--sweep=ci`, `-x`, `--device=cpu`), "
        "in float32 (where every change of order shows; the mixed-pair defect in bfloat16, its weight in float32). "
        "*Planted*: the defect's declared `mechanism` (kind, value, stage). *Diagnosis*: the first diagnosed breach "
        "in the run's JSON report, in one line (threshold; stage; where the revealed trees part). *Named*: the "
        "threshold has the planted kind and exact value, and the stage is the planted one. *Calls*: calls into the "
        "backend the diagnosis made. *Wall*: the whole run's seconds, pytest's start-up included.", "",
        f"Named: {named} of {len(rows)} ({100 * named / max(len(rows), 1):.0f} %); of the "
        f"{sum(r['verdict'] != 'not run' for r in rows)} runs that finished, {named}"
        + (f"; not run (no report): {', '.join(r['name'] for r in rows if r['verdict'] == 'not run')}"
           if any(r["verdict"] == "not run" for r in rows) else "") + ".", "",
        tabulate(table, ["defect", "breaks", "planted", "dtype", "diagnosis", "calls", "named", "wall (s)"],
                 tablefmt="github"), ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="write the markdown table here")
    parser.add_argument("--defect", action="append", default=[], help="only these (class names)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    parser.add_argument("--cost-turns", type=int, default=0, help="turns of the cost measurement (default 0: none)")
    parser.add_argument("--cost-defect", default="SmallBatchReduction", help="the failing kernel the cost is "
                        "measured on (default SmallBatchReduction)")
    parser.add_argument("--keep", default=None, help="keep each run's JSON report in this folder")
    parser.add_argument("--from-reports", default=None, help="make the table from the JSON reports a --keep run left "
                        "there (a run without its report reads: not run)")
    parser.add_argument("--cost-only", action="store_true", help="measure the cost alone; keep the table of --out")
    args = parser.parse_args()
    from rmsnorm_conformance.harness.reporting.environment import fingerprint

    chosen = [s for s in subjects() if not args.defect or any(n in s["name"] for n in args.defect)]
    if not chosen:
        parser.error(f"--defect={args.defect}: no diagnosed defect has that name")
    with tempfile.TemporaryDirectory() as tmpdir:
        cost = measure_cost(args.cost_defect, args.cost_turns, Path(tmpdir)) if args.cost_turns else []
    cost_lines = render_cost(cost, args.cost_defect) if cost else []
    if args.cost_only:
        if not args.out:
            parser.error("--cost-only writes its section into --out (the table there is kept)")
        old = Path(args.out).read_text() if Path(args.out).exists() else ""
        kept = old.split(COST_TITLE)[0].rstrip("\n") + "\n\n" if old else ""
        Path(args.out).write_text(kept + "\n".join(cost_lines) + f"\nCost command: `python benchmarks/diagnosis.py "
                                  f"--cost-only --cost-turns {args.cost_turns} --cost-defect {args.cost_defect} "
                                  f"--out {args.out}`\n")
        return
    if args.from_reports:
        rows = [row_of(s, Path(args.from_reports) / report_name(s), None, None) for s in chosen]
    else:
        with tempfile.TemporaryDirectory() as tmpdir, ThreadPoolExecutor(max(1, args.jobs)) as pool:
            where = Path(args.keep) if args.keep else Path(tmpdir)
            where.mkdir(parents=True, exist_ok=True)
            rows = list(pool.map(lambda s: run_one(s, where), chosen))
    for r in rows:
        print(r["name"], r["threshold_ok"], r["stage_ok"], r["diagnosis"] and r["diagnosis"]["threshold"]["text"],
              flush=True)
    command = "python benchmarks/diagnosis.py" + (f" --jobs {args.jobs}" if args.jobs != 1 else "") + \
        (f" --keep {args.keep}" if args.keep else "") + (f" --from-reports {args.from_reports}" if args.from_reports
                                                          else "") + \
        "".join(f" --defect {d}" for d in args.defect) + (f" --out {args.out}" if args.out else "")
    import torch

    text = render(rows, command, fingerprint([torch.device("cpu")])) + "\n".join(["", *cost_lines])
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        old = Path(args.out).read_text() if Path(args.out).exists() else ""
        if not cost_lines and COST_TITLE in old:  # a cost measured by --cost-only stays
            text = text.rstrip("\n") + "\n\n" + COST_TITLE + old.split(COST_TITLE, 1)[1]
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
