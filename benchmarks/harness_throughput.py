"""How fast the harness reaches a verdict, and where its time goes.

Not a test: it runs the suites once and writes what it saw, as markdown:

- the verdict, the wall time from ``pytest`` to the verdict (start-up included), checks and checks per second;
- the time per suite file, from pytest's own per-test timings (a junit XML file), summed over workers;
- with ``--breakdown`` (one process only), a cProfile of the whole run with each second put under the stage
  that spent it: drawing inputs, the reference, comparisons, guard zones, the backend under test, compiles,
  pytest itself. Time inside torch or C code is charged to the project code that called it.

    python benchmarks/harness_throughput.py --backend=native --device=cpu --sweep=ci [--breakdown] [--out FILE]
    python benchmarks/harness_throughput.py --suite=test_axis_b --breakdown -- --dtype=bfloat16
    python benchmarks/harness_throughput.py --pyargs --backend=triton --device=cuda --workers=8   # from a wheel

``--pyargs`` runs the installed package's suites (``pytest --pyargs rmsnorm_conformance.suites``) from an empty
folder, as a kernel author does; without it, this tree's ``suites/``. Extra pytest arguments follow ``--``.
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Where a second is charged, by the path of the code that spent it (first match wins). Torch's own Python and C
# functions are charged to their nearest caller that matches one of these.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("compile (Triton, torch.compile)", ("/triton/", "/torch/_dynamo/", "/torch/_inductor/")),
    ("reference (contract/)", ("/contract/",)),
    ("drawing inputs (cases, strategies, Hypothesis)", ("/harness/drawing/", "/hypothesis/")),
    ("guard zones", ("/harness/checking/bounds.py",)),
    ("comparison and rounding", ("/harness/checking/comparison.py", "/harness/checking/rounding.py")),
    ("backend under test (backends/, zoo/)", ("/backends/", "/zoo/")),
    ("checks and plans (harness/checking/, suites/)", ("/harness/checking/", "/suites/")),
    ("running (isolation, devices, adapters)", ("/harness/running/",)),
    ("plugin and report", ("/harness/plugin/", "/harness/reporting/")),
    ("pytest and xdist", ("/_pytest/", "/pluggy/", "/xdist/", "/execnet/")),
)
UNCHARGED = "other (imports, interpreter)"


def stage_of(filename: str) -> str | None:
    path = filename.replace(os.sep, "/")
    for stage, parts in STAGES:
        if any(p in path for p in parts):
            return stage
    return None


def breakdown(stats: pstats.Stats) -> dict[str, float]:
    """Seconds per stage: each function's own time goes to its stage, or, for torch, builtins and the rest, to
    its callers' stages in proportion to the time it spent under each caller (followed up to 12 frames)."""
    table = stats.stats  # type: ignore[attr-defined]
    memo: dict[tuple, dict[str, float]] = {}

    def shares(func: tuple, depth: int) -> dict[str, float]:
        """How one second of ``func``'s own time splits over stages."""
        if func in memo:
            return memo[func]
        own = stage_of(func[0])
        if own is not None or depth > 12:
            result = {own or UNCHARGED: 1.0}
        else:
            callers = table[func][4]
            total = sum(c[2] for c in callers.values()) or sum(c[3] for c in callers.values())
            result = defaultdict(float)
            if not callers or total <= 0:
                result[UNCHARGED] = 1.0
            else:
                memo[func] = {UNCHARGED: 1.0}  # a cycle resolves to uncharged
                for caller, c in callers.items():
                    weight = (c[2] if c[2] > 0 else c[3]) / total
                    if caller in table:
                        for stage, share in shares(caller, depth + 1).items():
                            result[stage] += weight * share
                    else:
                        result[UNCHARGED] += weight
            result = dict(result)
        memo[func] = result
        return result

    seconds: dict[str, float] = defaultdict(float)
    for func, (_cc, _nc, tt, _ct, _callers) in table.items():
        for stage, share in shares(func, 0).items():
            seconds[stage] += tt * share
    return dict(seconds)


def per_suite(junit: Path) -> dict[str, tuple[int, float]]:
    """Tests and seconds per suite file, from pytest's junit XML (test time summed over workers)."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for case in ET.parse(junit).getroot().iter("testcase"):
        suite = case.get("classname", "?").split(".")[-1]
        out[suite][0] += 1
        out[suite][1] += float(case.get("time", 0.0))
    return {k: (int(v[0]), v[1]) for k, v in out.items()}


def slowest(junit: Path, n: int = 15) -> list[tuple[str, float]]:
    """The n slowest tests (name and seconds), from pytest's junit XML: where a wall-time target is lost."""
    cases = [(f"{c.get('classname', '?').split('.')[-1]}::{c.get('name', '?')}", float(c.get("time", 0.0)))
             for c in ET.parse(junit).getroot().iter("testcase")]
    return sorted(cases, key=lambda kv: -kv[1])[:n]


def top_functions(stats: pstats.Stats, n: int = 25) -> list[tuple[str, int, float, float]]:
    """The n functions with the most time of their own: (name, calls, own seconds, cumulative seconds)."""
    rows = []
    for (file, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if file != "~" else ""
        rows.append((f"{where}({name})" if where else name, calls, own, cumulative))
    return sorted(rows, key=lambda r: -r[2])[:n]


def timeline(path: Path, began: float, wall: float) -> list[tuple[str, float]]:
    """Where the wall time went, from timeline_plugin.py's events: seconds from `pytest` to each milestone, and
    the workers' time in tests and between them."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_worker: dict[str, list[dict]] = {}
    for e in events:
        by_worker.setdefault(e["worker"], []).append(e)
    testers = {w: es for w, es in by_worker.items() if any(e["event"] == "test start" for e in es)}
    if not testers:
        return []

    def at(es: list[dict], event: str, last: bool = False) -> float:
        times = [e.get("at", e["t"]) - began for e in es if e["event"] == event]
        return (max if last else min)(times) if times else float("nan")

    firsts = [at(es, "test start") for es in testers.values()]
    lasts = [at(es, "test end", last=True) for es in testers.values()]
    busy = 0.0
    for es in testers.values():
        started = {e["test"]: e["t"] for e in es if e["event"] == "test start"}
        busy += sum(e["t"] - started.get(e["test"], e["t"]) for e in es if e["event"] == "test end")
    span = sum(last - first for first, last in zip(firsts, lasts, strict=True))
    controller = by_worker.get("controller", [])
    rows = [
        ("the first process started (Python's own start)", at(controller or events, "process start")),
        # (pytest-xdist's controller resolves its options once its workers have started: harness/plugin/controller.py)
        ("its plugins imported (its options resolved, but under pytest-xdist)", at(controller or events, "configure")),
        ("the first worker started", min(at(es, "process start") for es in testers.values())),
        ("the last worker started", max(at(es, "process start") for es in testers.values())),
        ("the last worker collected", max(at(es, "collected") for es in testers.values())),
        ("the first test began (earliest worker)", min(firsts)),
        ("the first test began (latest worker)", max(firsts)),
        ("the first worker ran out of tests", min(lasts)),
        ("the last test ended", max(lasts)),
        ("the last worker ended its session", max(at(es, "session end", last=True) for es in testers.values())),
        ("the controller ended its session (its workers gone)",
         at(controller, "session end", last=True) if controller and controller is not testers.get("controller")
         else float("nan")),
        ("the verdict (the process ended)", wall),
        (f"in tests, summed over {len(testers)} processes", busy),
        ("between tests, summed (from each one's first test to its last)", span - busy),
    ]
    return [(name, sec) for name, sec in rows if sec == sec]  # NaN: an event this run had none of


def last_to_end(path: Path, began: float, n: int = 12) -> list[tuple[str, str, float, float]]:
    """The tests that ended last (timeline_plugin.py's events): (test, worker, began, seconds), the last first. A
    run's end waits on them while the other workers have run out of tests."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    started = {(e["worker"], e["test"]): e["t"] for e in events if e["event"] == "test start"}
    ended = [(e["t"], e["worker"], e["test"]) for e in events if e["event"] == "test end"]
    ended.sort(reverse=True)
    return [(test, worker, started.get((worker, test), t) - began, t - started.get((worker, test), t))
            for t, worker, test in ended[:n]]


def host_reference(tries: int = 5) -> dict[str, float]:
    """The host's speed at the harness's kind of work, in ms, best of ``tries``, measured in this process after the
    run: a Python loop of 10^6 additions, and 10^4 ``torch.add`` calls on 64 floats (the dispatcher's cost a call).

    A run's worker-seconds are mostly host Python and small torch calls, and GPU machines of one kind ran the same
    run in 271-285 and in 410 worker-seconds (two H200 machines). Like a bandwidth beside its
    device copy, a time to verdict beside these two can be compared across machines."""
    import torch

    def best(fn: Any) -> float:
        times = []
        for _ in range(tries):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times) * 1e3

    def python_loop() -> None:
        total = 0
        for i in range(1_000_000):
            total += i

    a = torch.ones(64)

    def torch_calls() -> None:
        for _ in range(10_000):
            torch.add(a, a)

    with torch.inference_mode():
        return {"python_ms": best(python_loop), "torch_ms": best(torch_calls)}


# What the figures read as where pytest ended without writing its report (killed after an interrupt).
NO_REPORT: dict = {"verdict": "no report written", "totals": {"checks": 0, "passed_tests": 0}, "environment": {}}


def run_pytest(command: list[str], cwd: str, env: dict[str, str], grace: float = 60.0) -> tuple[int, str]:
    """pytest's exit status and its output. An interrupt of this script (``timeout -s INT``: a call's time limit)
    lets pytest end its run as Ctrl-C does, writing its report and its timeline up to there, so that a run stopped
    by a limit still says where its time went (``_wind_down``)."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            status = proc.wait()
        except KeyboardInterrupt:
            status = _wind_down(proc, grace)
            print(f"harness_throughput.py: interrupted; pytest ended with exit status {status}", flush=True)
        out.seek(0)
        return status, out.read()


def _wind_down(proc: subprocess.Popen, grace: float) -> int:
    """pytest's exit status after this script was interrupted. ``timeout`` and a terminal's Ctrl-C interrupt the
    whole process group, pytest with it, and a second interrupt would cut its report short: it gets half of
    ``grace`` to end on its own, then an interrupt of its own (where only this script was interrupted), then is
    killed."""
    try:
        return proc.wait(timeout=grace / 2)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=grace / 2)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def render(args: argparse.Namespace, data: dict, status: int, wall: float, suites: dict[str, tuple[int, float]],
           slow: list[tuple[str, float]], stages: dict[str, float], phases: list[tuple[str, float]] = (),
           hottest: list[tuple[str, int, float, float]] = (),
           last: list[tuple[str, str, float, float]] = (), host: dict[str, float] | None = None) -> str:
    """The run as markdown: verdict and wall time, the time per suite, the slowest tests and the breakdown."""
    checks = data["totals"]["checks"]
    command = " ".join(["python benchmarks/harness_throughput.py", *sys.argv[1:]])
    sweep = data["environment"].get("sweep", args.sweep)
    lines = [
        f"# Harness throughput: {args.backend} on {args.device}, sweep {sweep}, "
        f"{args.workers or 'no'} xdist workers", "",
        f"Command: `{command}`", "",
        f"- verdict: {data['verdict']} (pytest exit status {int(status)})",
        f"- wall time from `pytest` to the verdict: {wall:.1f} s (start-up included)",
        f"- checks (one comparison each): {checks}; checks per second: {checks / wall:.1f}",
        f"- tests passed: {data['totals']['passed_tests']}",
        f"- torch {data['environment'].get('torch')}, {data['environment'].get('platform')}, "
        f"{data['environment'].get('device cuda:0', 'no GPU')}",
    ]
    if host:
        lines.append(f"- the host, after the run (best of 5 in one process; host_reference): 10^6 Python additions "
                     f"{host['python_ms']:.1f} ms, 10^4 `torch.add` calls on 64 floats {host['torch_ms']:.1f} ms")
    lines.append("")
    if phases:
        lines += ["Timeline (seconds from `pytest`; timeline_plugin.py):", "", "| milestone | seconds |", "|---|---|"]
        lines += [f"| {name} | {sec:.1f} |" for name, sec in phases]
        lines.append("")
    if last:
        lines += ["The tests that ended last (the last first):", "",
                  "| test | worker | began at s | seconds |", "|---|---|---|---|"]
        lines += [f"| `{test.rsplit('::', 1)[-1]}` | {worker} | {at:.1f} | {sec:.1f} |"
                  for test, worker, at, sec in last]
        lines.append("")
    if suites:
        lines += ["| suite | tests | seconds (summed over workers) |", "|---|---|---|"]
        lines += [f"| {name} | {n} | {sec:.1f} |"
                  for name, (n, sec) in sorted(suites.items(), key=lambda kv: -kv[1][1])]
        lines.append("")
    if slow:
        lines += ["| slowest tests | seconds |", "|---|---|"]
        lines += [f"| `{name}` | {sec:.1f} |" for name, sec in slow]
        lines.append("")
    if stages:
        total = sum(stages.values())
        lines += ["Where the time went (cProfile; torch and C time charged to the project code that called it):", "",
                  "| stage | seconds | share |", "|---|---|---|"]
        lines += [f"| {stage} | {sec:.1f} | {sec / total:.0%} |"
                  for stage, sec in sorted(stages.items(), key=lambda kv: -kv[1])]
        lines.append("")
    if hottest:
        lines += ["The functions with the most time of their own (cProfile):", "",
                  "| function | calls | own s | cumulative s |", "|---|---|---|---|"]
        lines += [f"| `{name}` | {calls} | {own:.2f} | {cum:.2f} |" for name, calls, own, cum in hottest]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="native")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sweep", "--profile", dest="sweep", default=None,
                        help="the harness's --sweep (default: the harness's default)")
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist workers (0: one process)")
    parser.add_argument("--pyargs", action="store_true", help="the installed package's suites, from an empty folder")
    parser.add_argument("--breakdown", action="store_true", help="profile the run (one process only)")
    parser.add_argument("--suite", action="append", default=[],
                        help="one suite file's module name, e.g. test_axis_b (repeatable; default: every suite)")
    parser.add_argument("--out", default=None, help="write the markdown here too")
    parser.add_argument("--raw", default=None, help="keep every test's time (junit XML) and the timeline in this "
                                                    "folder (raw logs: not evidence for reports/)")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    if args.breakdown and args.workers:
        parser.error("--breakdown profiles one process: leave --workers at 0")
    with tempfile.TemporaryDirectory() as tmp:
        report, junit = Path(tmp) / "r.json", Path(tmp) / "junit.xml"
        if args.pyargs:
            target = ["--pyargs", *(f"rmsnorm_conformance.suites.{s}" for s in args.suite or [""])]
            target = [t.rstrip(".") for t in target]
        else:
            target = [str(ROOT / "suites" / (f"{s}.py" if s else "")) for s in args.suite or [""]]
        pytest_args = [*target, f"--backend={args.backend}", f"--device={args.device}", f"--report={report}",
                       f"--junitxml={junit}", "-q", "-p", "no:cacheprovider", *extra]
        if args.sweep:
            pytest_args.append(f"--sweep={args.sweep}")
        if args.workers:
            pytest_args += ["-n", str(args.workers)]
        cwd = tmp if args.pyargs else str(ROOT)
        stages: dict[str, float] = {}
        hottest: list[tuple[str, int, float, float]] = []
        timeline_file = Path(tmp) / "timeline.jsonl"
        began = time.time()
        start = time.perf_counter()
        if args.breakdown:
            os.chdir(cwd)
            import pytest

            profiler = cProfile.Profile()
            status = profiler.runcall(pytest.main, pytest_args)
            wall = time.perf_counter() - start
            stats = pstats.Stats(profiler)
            stages = breakdown(stats)
            hottest = top_functions(stats)
        else:
            # Each process's start, collection and tests on one clock (timeline_plugin.py).
            env = {**os.environ, "RMSNORM_TIMELINE": str(timeline_file),
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"),
                                                               os.environ.get("PYTHONPATH")]))}
            status, output = run_pytest([sys.executable, "-m", "pytest", "-p", "timeline_plugin", *pytest_args],
                                        cwd, env)
            print(output[-4000:])
            wall = time.perf_counter() - start
        data = json.loads(report.read_text()) if report.exists() else NO_REPORT
        suites = per_suite(junit) if junit.exists() else {}
        slow = slowest(junit) if junit.exists() else []
        phases = timeline(timeline_file, began, wall) if timeline_file.exists() else []
        last = last_to_end(timeline_file, began) if timeline_file.exists() and args.workers else []
        if args.raw:  # every test's time, and when each began and ended, on which process
            raw = Path(args.raw)
            raw.mkdir(parents=True, exist_ok=True)
            if junit.exists():
                shutil.copy(junit, raw / "junit.xml")
            if timeline_file.exists():
                with timeline_file.open("rb") as src, gzip.open(raw / "timeline.jsonl.gz", "wb") as dst:
                    shutil.copyfileobj(src, dst)
    text = render(args, data, int(status), wall, suites, slow, stages, phases, hottest, last, host_reference())
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
