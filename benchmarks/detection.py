"""How fast the suites catch each planted defect of the zoo (rmsnorm_conformance.zoo): examples to the first
failing check, and the wall time of the run that tests/detection/test_detection.py makes for it. A measurement, not a
test.

    python benchmarks/detection.py [--seeds 10] [--max-examples 100] [--out reports/cpu/detection.md]
    python benchmarks/detection.py --seeds 0 --out reports/cpu/detection.md   (the ci runs alone)
    python benchmarks/detection.py --sweep smoke --seeds 0 --out reports/cpu/smoke.md

Two measurements per defect, each on the suite test of the rule the defect breaks, in all three dtypes:

- ``ci``: the derandomized ``ci`` profile, exactly as tests/detection/test_detection.py runs it (``-x``,
``--no-shrink``):
  which dtype sweep failed first, after how many examples, and the run's wall time (pytest start-up included).
  ``--sweep smoke`` makes the same run under the pre-commit ``smoke`` profile instead (``--seeds 0``: that alone).
- seeded: the ``ci`` settings with the derandomization off, ``--hypothesis-seed=0..N-1``, up to
  ``--max-examples`` examples a sweep and no shrinking, so that "examples needed" is measured rather than
  cut off at 12. A defect's count for a seed is the fewest examples any of its dtype sweeps needed (the
  sweeps are independent; under pytest-xdist they run side by side).

An example is one drawn configuration: consecutive checks of the same case count once. The counts come from a
small pytest plugin (``COUNTER_PLUGIN`` below) that wraps the harness's check recorder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The seeded runs use the harness's ``dev`` sweep, which the counting plugin redefines for them (random, no
# example database, no shrinking, RMSNORM_DETECTION_MAX_EXAMPLES examples): --sweep only takes the harness's names.
SEEDED_SWEEP = "dev"
DEFAULT_MAX_EXAMPLES = 100  # far past ci's 12: a count near it means the defect is caught by luck
DTYPES = ("float32", "bfloat16", "float16")
NOTES_MARKER = "<!-- notes: kept when benchmarks/detection.py rewrites this file -->"
CI_EXAMPLES = 12  # the ci profile's max_examples: a seed that needs more would slip past one ci sweep

# The counting plugin, written to a scratch folder called ``tests`` for each run. Hypothesis mines literals
# from every local module it sees and draws them as values, so a plugin imported from this file would
# change the very examples it counts (a ci run here would no longer be the ci run tests/detection/test_detection.py
# makes); modules under a ``tests`` folder are exempt. It wraps the harness's check recorder: an example
# is a run of consecutive checks of one case, counted per node until the node's first failing check.
# Other dtype sweeps of the same (backend, test) stop once they have run as many examples as the best so
# far, since they can no longer need fewer. It also redefines the harness's dev sweep as the seeded one: ci's
# settings, not derandomized, stopping at the first failure without shrinking it.
COUNTER_PLUGIN = f"""
import inspect, json, os
from pathlib import Path

import pytest
from hypothesis import Phase, settings

import rmsnorm_conformance.harness.plugin.hooks
from rmsnorm_conformance.harness.checking.checks import Subject
from rmsnorm_conformance.harness.drawing.sweeps import PREFIX, sweep_settings

settings.register_profile(
    PREFIX + "{SEEDED_SWEEP}", parent=sweep_settings("ci"), derandomize=False, database=None,
    max_examples=int(os.environ.get("RMSNORM_DETECTION_MAX_EXAMPLES", "12")),
    phases=(Phase.explicit, Phase.generate), report_multiple_bugs=False)

NODES, BEST = {{}}, {{}}
_record = Subject.record
_signature = inspect.signature(_record)


def _counted(subject, rule_id, case, *args, **kwargs):
    node = NODES.setdefault(subject.nodeid, {{
        "backend": subject.backend.name, "test": subject.nodeid.split("[")[0].split("::")[-1],
        "dtype": subject.dtype, "examples": 0, "first_failure": None, "rule": None, "last": None}})
    text = repr(case)
    if text != node["last"]:
        node["examples"] += 1
        node["last"] = text
    passed = _signature.bind(subject, rule_id, case, *args, **kwargs).arguments["passed"]
    key = (node["backend"], node["test"])
    if not passed and node["first_failure"] is None:
        node["first_failure"], node["rule"] = node["examples"], rule_id
        BEST[key] = min(BEST.get(key, node["examples"]), node["examples"])
    if node["first_failure"] is None and key in BEST and node["examples"] >= BEST[key]:
        pytest.skip("another dtype sweep caught it in fewer examples")
    return _record(subject, rule_id, case, *args, **kwargs)


Subject.record = _counted


def pytest_sessionfinish(session):
    for node in NODES.values():
        node.pop("last", None)
    Path(os.environ["RMSNORM_DETECTION_LOG"]).write_text(json.dumps(NODES, indent=1))
"""


# --- the script ----------------------------------------------------------------------------------------------


def _defects() -> list[type]:
    from rmsnorm_conformance.zoo import DEFECTS

    return list(DEFECTS)


def _rule_tests() -> dict[str, list[str]]:
    """rule -> ``module.py::test`` of every suite test declaring it (suites/rule_index.py)."""
    from rmsnorm_conformance.suites.rule_index import rule_tests

    return rule_tests()


def _is_sweep(test: str) -> bool:
    """Is ``module.py::name`` a Hypothesis sweep (rather than a test over explicit cases)?"""
    import importlib

    module, name = test.split("::")
    obj = getattr(importlib.import_module(f"rmsnorm_conformance.suites.{module.removesuffix('.py')}"), name)
    return hasattr(obj, "hypothesis")


def _pytest(args: list[str], tmp: Path, log: Path, env: dict[str, str] | None = None) -> tuple[int, str, float, dict]:
    """pytest in a subprocess from the scratch folder ``tmp`` (as tests/detection/test_detection.py runs it), with the
    counting plugin; returns the exit status, the output, the wall time and the plugin's per-node counts."""
    plugin_dir = tmp / "tests"
    plugin_dir.mkdir(exist_ok=True)
    (plugin_dir / "rmsnorm_detection_counter.py").write_text(COUNTER_PLUGIN)
    cmd = [sys.executable, "-m", "pytest", *args, "--device=cpu", "-p", "no:cacheprovider",
           "-p", "rmsnorm_detection_counter", "-q"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(plugin_dir)]),
           "RMSNORM_DETECTION_LOG": str(log), **(env or {})}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    nodes = json.loads(log.read_text()) if log.exists() else {}
    return proc.returncode, proc.stdout, wall, nodes


def measure_ci(defect: type, tmp: Path, sweep: str = "ci") -> dict[str, Any]:
    """The derandomized ci run that tests/detection/test_detection.py makes for ``defect`` (or the same run under
    ``sweep``), counted."""
    from rmsnorm_conformance.contract import rule

    # An interface rule gates only under --strict-interface, as tests/detection/test_detection.py runs it.
    strict = ["--strict-interface"] if rule(defect.breaks).severity == "interface" else []
    code, out, wall, nodes = _pytest(
        ["--pyargs", "rmsnorm_conformance.suites", f"--rule={defect.breaks}",
         f"--backend=rmsnorm_conformance.zoo:{defect.__name__}", f"--sweep={sweep}", "-x", "--no-shrink", *strict],
        tmp,
        tmp / f"{sweep}-{defect.__name__}.json")
    ordered = list(nodes.values())  # in the order the tests ran
    at = next((i for i, n in enumerate(ordered) if n["first_failure"] is not None), None)
    first = ordered[at] if at is not None else None
    return {"caught": code == 1 and f"contract rule {defect.breaks} " in out and first is not None
            and first["rule"] == defect.breaks,
            "examples": first["first_failure"] if first else None, "dtype": first["dtype"] if first else None,
            "test": first["test"] if first else None,
            "run_before": sum(n["examples"] for n in ordered[:at]) if first else None, "wall": wall}


def _first_failure(nodes: list[dict[str, Any]], breaks: str, wall: float | None) -> dict[str, Any]:
    """One defect's ci result from its nodes, in the order they ran: the first failing node, caught if it failed
    in the defect's rule."""
    at = next((i for i, n in enumerate(nodes) if n["first_failure"] is not None), None)
    first = nodes[at] if at is not None else None
    return {"caught": first is not None and first["rule"] == breaks,
            "examples": first["first_failure"] if first else None, "dtype": first["dtype"] if first else None,
            "test": first["test"] if first else None,
            "run_before": sum(n["examples"] for n in nodes[:at]) if first else None, "wall": wall}


GROUPED_NOTE = (" (with --grouped, the runs are made in a few pytest processes, two at a time, as "
                "tests/detection/test_detection.py makes them: each defect still meets exactly its rule's tests and "
                "stops at its first failure, but has no wall time of its own)")
# Processes of --grouped: the numerics defects in this many runs, two at a time, beside the interface defects' run.
GROUPS = 3


def measure_ci_grouped(defects: list[type], tmp: Path, sweep: str = "ci") -> tuple[dict[str, dict], dict[str, float]]:
    """The ci runs of every defect in a few pytest processes, as tests/detection/test_detection.py makes them: each
    defect held to the tests of its rule alone and stopped at its first failure (tests/helpers/detection_plan.py), the
    interface defects apart under --strict-interface. Returns each defect's result (no wall time of its own) and each
    group's wall time."""
    from concurrent.futures import ThreadPoolExecutor

    from rmsnorm_conformance.contract import rule

    numerics = [d for d in defects if rule(d.breaks).severity != "interface"]
    groups = {f"numerics-{i}": numerics[i::GROUPS] for i in range(GROUPS)}
    groups["interface"] = [d for d in defects if d not in numerics]

    def run(name: str) -> tuple[str, float, dict]:
        members = groups[name]
        where = tmp / name
        (where / "tests").mkdir(parents=True, exist_ok=True)
        plan_plugin = ROOT / "tests" / "helpers" / "detection_plan.py"
        (where / "tests" / "rmsnorm_detection_plan.py").write_text(plan_plugin.read_text())
        (where / "plan.json").write_text(json.dumps({d.name: {"rules": [d.breaks], "stop_first": True}
                                                     for d in members}))
        strict = ["--strict-interface"] if name == "interface" else []
        _, _, wall, nodes = _pytest(
            ["-p", "rmsnorm_detection_plan", "--detection-plan=plan.json", "--pyargs", "rmsnorm_conformance.suites",
             "--backend=" + ",".join(f"rmsnorm_conformance.zoo:{d.__name__}" for d in members),
             f"--sweep={sweep}", "--no-shrink", *strict], where, where / f"{sweep}.json")
        return name, wall, nodes

    results: dict[str, dict] = {}
    walls: dict[str, float] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for name, wall, nodes in pool.map(run, [g for g in groups if groups[g]]):
            walls[name] = wall
            for d in groups[name]:
                results[d.name] = _first_failure([n for n in nodes.values() if n["backend"] == d.name], d.breaks,
                                                 None)
            print(f"{sweep} group {name}: {wall:.0f} s", flush=True)
    return results, walls


def _sweep_node_ids(defects: list[type], tmp: Path) -> list[str]:
    """Every collected id of each defect's own sweep tests, in every dtype and declared weight dtype: read from
    a collection run, since a test's ids depend on what the backend declares (``-w_float32`` for a mixed pair;
    a test over mixed pairs has no plain id), and one id that does not exist stops a whole pytest run."""
    rule_tests = _rule_tests()
    mine = {d.name: set(filter(_is_sweep, rule_tests[d.breaks])) for d in defects}
    tests = sorted(set().union(*mine.values()))
    backends = ",".join(f"rmsnorm_conformance.zoo:{d.__name__}" for d in defects)
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--device=cpu",
           f"--backend={backends}", *(str(ROOT / "suites" / t) for t in tests)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env).stdout
    ids = []
    for line in out.splitlines():
        if "::" not in line or "[" not in line or "suites/" not in line:
            continue
        rest = line.strip().split("suites/", 1)[1]  # test_x.py::test_y[backend-cpu-dtype...]
        test, backend = rest.split("[", 1)[0], rest.split("[", 1)[1].split("-cpu-", 1)[0]
        if test in mine.get(backend, ()):
            ids.append(f"{ROOT / 'suites' / rest}")
    return ids


def measure_seed(defects: list[type], seed: int, max_examples: int, tmp: Path,
                 node_ids: list[str]) -> dict[str, dict[str, Any]]:
    """One run for all defects under one seed: per defect, the fewest examples any dtype sweep needed."""
    backends = ",".join(f"rmsnorm_conformance.zoo:{d.__name__}" for d in defects)
    _, _, _, nodes = _pytest(
        [*node_ids, f"--backend={backends}", f"--sweep={SEEDED_SWEEP}", f"--hypothesis-seed={seed}",
         "--strict-interface"],
        tmp, tmp / f"seed-{seed}.json", {"RMSNORM_DETECTION_MAX_EXAMPLES": str(max_examples)})
    result = {}
    for defect in defects:
        mine = [n for n in nodes.values() if n["backend"] == defect.name and n["first_failure"] is not None
                and n["rule"] == defect.breaks]
        best = min((n["first_failure"] for n in mine), default=None)
        result[defect.__name__] = {"examples": best,
                                   "dtypes": sorted({n["dtype"] for n in mine if n["first_failure"] == best})}
    return result


def _fmt(values: list[int | None], cap: int) -> tuple[str, str]:
    caught = [v for v in values if v is not None]
    if not caught:
        return f">{cap}", f">{cap}"
    median = statistics.median([v if v is not None else cap + 1 for v in values])
    worst = f">{cap}" if len(caught) < len(values) else str(max(caught))
    return (f"{median:g}" if median <= cap else f">{cap}"), worst


def _wall(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds:.1f}"


def environment_header() -> list[str]:
    """Where the table was measured: the report's environment fingerprint (date, versions, device) as a list."""
    import torch

    from rmsnorm_conformance.harness.reporting.environment import fingerprint

    env = fingerprint([torch.device("cpu")], {"CPU cores": str(os.cpu_count())})
    return [f"- **{key}:** {value}" for key, value in env.items()]


def render(rows: list[dict[str, Any]], args: argparse.Namespace, total_ci_wall: float) -> str:
    from tabulate import tabulate

    seeded = args.seeds > 0
    table = []
    for r in rows:
        ci, test = "not caught", "–"
        if r["ci"]["caught"]:
            test = r["ci"]["test"]
            unit = "examples" if _is_sweep(next(t for t in r["tests"] if t.endswith(f"::{test}"))) else "cases"
            ci = f"{r['ci']['examples']} {unit} ({r['ci']['dtype']})"
            if r["ci"]["run_before"]:
                ci += f", after {r['ci']['run_before']} passing"
        row = [r["name"], f"`{r['breaks']}`", test, ci]
        if seeded:
            median, worst = _fmt(r["seeded"], args.max_examples)
            within = sum(v is not None and v <= CI_EXAMPLES for v in r["seeded"])
            row += [median, worst, f"{within}/{len(r['seeded'])}", ", ".join(r["dtypes"]) or "–"]
        table.append([*row, _wall(r["ci"]["wall"])])
    headers = ["defect", "breaks", "ci: caught by", "ci: to the first failure (dtype)"]
    if seeded:
        headers += ["sweep alone: median", "sweep alone: worst", f"seeds caught within {CI_EXAMPLES}",
                    "dtypes that caught it"]
    headers.append("ci wall (s)")
    command = (f"python benchmarks/detection.py --seeds {args.seeds}"
               + (" --grouped" if args.grouped else "") + (f" --max-examples {args.max_examples}" if seeded else "")
               + "".join(f" --defect {d}" for d in args.defect)
               + (f" --out {args.out}" if args.out else ""))
    caught = sum(r["ci"]["caught"] for r in rows)
    described = (
        f"*sweep alone*: the rule's Hypothesis sweeps without the explicit checks, "
        f"`--hypothesis-seed=0..{args.seeds - 1}` instead of derandomization, no shrinking, at most "
        f"{args.max_examples} examples a sweep; a seed's count is the fewest examples any sweep needed; *seeds "
        f"caught within 12* counts the seeds whose count fits in one ci sweep; `>N` means the random draws did not "
        "reach the defect, which only the explicit checks do. An example is one drawn configuration; Hypothesis "
        "always tries the simplest configuration first, so a count of 1 in every seed means that configuration "
        "already shows the defect." if seeded else
        "The seeded runs (each rule's sweeps alone over several Hypothesis seeds) are left out: `--seeds N` adds "
        "them.")
    return "\n".join([
        "# Detection power: examples the suites need to catch each planted defect", "",
        f"Command: `{command}`", "",
        *environment_header(), "",
        "Each defect of the zoo (rmsnorm_conformance.zoo) runs the suite tests of the rule it breaks, in float32, "
        "bfloat16 and float16. *ci*: the derandomized `ci` sweep as tests/detection/test_detection.py runs it "
        "(`--rule`, `-x`, `--no-shrink`): the Hypothesis sweeps and the explicit checks beside them (thresholds, "
        "QK-norm shapes, 3-D views, accuracy at the threshold dims, first calls); which test failed first, the "
        "examples (or, in an explicit test, the cases) it ran to the first failure, and the wall time of that run with "
        f"pytest start-up{GROUPED_NOTE if args.grouped else ''}. {described}", "",
        f"Caught under ci: {caught} of {len(rows)}.", "",
        tabulate(table, headers, tablefmt="github"), "",
        f"Sum of the ci wall times: {total_ci_wall:.0f} s on {os.cpu_count()} CPU cores, shared with other work "
        "(the wall times are not a benchmark).", "",
    ])


def render_profile(rows: list[dict[str, Any]], args: argparse.Namespace, total_wall: float) -> str:
    """The table of one profile's runs alone (``--sweep smoke``): caught or not, and how soon."""
    from tabulate import tabulate

    table = []
    for r in rows:
        caught = r["ci"]["caught"]
        examples = f"{r['ci']['examples']} ({r['ci']['dtype']}, {r['ci']['test']})" if caught else "–"
        if caught and r["ci"]["run_before"]:
            examples += f", after {r['ci']['run_before']} passing"
        table.append([r["name"], f"`{r['breaks']}`", "yes" if caught else "no", examples, _wall(r["ci"]["wall"])])
    caught = sum(r["ci"]["caught"] for r in rows)
    command = (f"python benchmarks/detection.py --sweep {args.sweep} --seeds 0" + (" --grouped" if args.grouped else "")
               + "".join(f" --defect {d}" for d in args.defect) + (f" --out {args.out}" if args.out else ""))
    return "\n".join([
        f"# Detection under --sweep={args.sweep}: which planted defects it catches", "",
        f"Command: `{command}`", "",
        *environment_header(), "",
        f"Each defect of the zoo (rmsnorm_conformance.zoo) runs the suite tests of the rule it breaks under "
        f"`--sweep={args.sweep}` as tests/detection/test_detection.py runs them under `ci` (`--rule`, `-x`, "
        "`--strict-interface` for an interface rule): caught means the run failed in that rule. *Examples to the "
        "first catch*: the examples (or, in an explicit test, the cases) the first failing test ran, its dtype and "
        "test, and how many examples passing tests ran before it. The wall time includes pytest's start-up.", "",
        f"Caught: {caught} of {len(rows)}.", "",
        tabulate(table, ["defect", "breaks", "caught", "examples to the first catch", "wall (s)"],
                 tablefmt="github"), "",
        f"Sum of the wall times: {total_wall:.0f} s on {os.cpu_count()} CPU cores.", "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10,
                        help="Hypothesis seeds for the seeded runs (default: 10; 0: none)")
    parser.add_argument("--sweep", default="ci", choices=("ci", "smoke"),
                        help="the profile of the derandomized run per defect (default: ci)")
    parser.add_argument("--max-examples", type=int, default=DEFAULT_MAX_EXAMPLES,
                        help=f"examples a seeded sweep may run (default: {DEFAULT_MAX_EXAMPLES})")
    parser.add_argument("--defect", action="append", default=[], help="only these defects (class names)")
    parser.add_argument("--grouped", action="store_true",
                        help="make the ci runs in a few processes, as tests/detection/test_detection.py does (two at a "
                             "time), instead of one a defect: the same checks, a fraction of the start-ups; no wall "
                             "time a defect")
    parser.add_argument("--out", default=None, help="write the markdown table here")
    args = parser.parse_args()
    if args.seeds < 0 or args.max_examples < 1:
        parser.error(f"--seeds={args.seeds} must be at least 0 and --max-examples={args.max_examples} at least 1")
    defects = [d for d in _defects() if not args.defect or d.__name__ in args.defect]
    rule_tests = _rule_tests()
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        grouped, walls = measure_ci_grouped(defects, tmp, args.sweep) if args.grouped else ({}, {})
        for defect in defects:
            ci = grouped[defect.name] if args.grouped else measure_ci(defect, tmp, args.sweep)
            print(f"{args.sweep}  {defect.__name__}: {ci}", flush=True)
            rows.append({"name": defect.__name__, "breaks": defect.breaks, "tests": rule_tests[defect.breaks],
                         "ci": ci, "seeded": [], "dtypes": set()})
        node_ids = _sweep_node_ids(defects, tmp) if args.seeds else []
        print(f"seeded runs: {len(node_ids)} sweep tests", flush=True)
        for seed in range(args.seeds):
            per_defect = measure_seed(defects, seed, args.max_examples, tmp, node_ids)
            for row in rows:
                got = per_defect[row["name"]]
                row["seeded"].append(got["examples"])
                row["dtypes"].update(got["dtypes"])
            print(f"seed {seed}: " + ", ".join(f"{k} {v['examples']}" for k, v in per_defect.items()), flush=True)
    for row in rows:
        row["dtypes"] = sorted(row["dtypes"])
    total = sum(walls.values()) if args.grouped else sum(r["ci"]["wall"] for r in rows)
    text = render(rows, args, total) if args.sweep == "ci" else render_profile(rows, args, total)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        # What follows the notes marker (results of other commands, findings) is kept across rewrites.
        kept = out.read_text().partition(NOTES_MARKER)[2] if out.exists() else ""
        out.write_text(text + (NOTES_MARKER + kept if kept else ""))


if __name__ == "__main__":
    main()
