"""What a CI system reads from a run: a markdown step summary ($GITHUB_STEP_SUMMARY), ``::error``/``::warning``
annotations on the kernel's source (under GitHub Actions), and flat JUnit XML properties per test.

Reads ``records.Collector`` once the run has ended; registered by the plugin on the process that reports.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ...contract import rule
from ..vocabulary.records import REFUSED_RULE, Collector
from .diagnoses import one_line
from .pick_a_kernel import PICK_TITLE, breaches, labelled, pick_rows, pick_table

# A step summary is read on a web page beside the job's log: the verdict, the table and the first breaches only.
SUMMARY_BREACHES = 5
# GitHub shows at most 10 annotations of each kind per step; more are dropped silently, so say how many were left.
MAX_ANNOTATIONS = 10
DETAIL_CHARS = 300


@dataclass(frozen=True)
class Found:
    """One breach as CI shows it: a (backend, device, rule) with its smallest case's detail and replay."""

    severity: str
    status: str  # FAIL, xfail or warning
    backend: str
    device: str
    rule: str
    dtypes: tuple[str, ...]
    count: int
    detail: str
    replay: str
    diagnosis: str = ""  # a bitwise breach's diagnosis in one line (reporting/diagnoses.py)


def found(c: Collector) -> list[Found]:
    """Every breach, numerics first, each with the replay of its smallest failing case (or its test's)."""
    replays: dict[tuple[str, str, str], tuple[int, str]] = {}
    for s in c.summaries.values():
        if s.replay and (s.failures or s.warnings or s.expected_failures):
            key = (s.backend, s.device, s.rule)
            if key not in replays or s.failing_size < replays[key][0]:
                replays[key] = (s.failing_size, s.replay)
    for o in c.outcomes.values():
        if o["outcome"] in ("failed", "error") and o.get("replay") and o.get("backend"):
            replays.setdefault((o["backend"], o.get("device", ""), o.get("rule", "")), (-1, o["replay"]))
    diagnosed = {(s.backend, s.device, s.rule): one_line(s.diagnosis) for s in c.summaries.values()
                 if s.diagnosis is not None}
    out = [Found(b.severity, b.status, b.backend, b.device, b.rule, tuple(b.dtypes), b.breached,
                 " ".join(str(b.detail).split())[:DETAIL_CHARS],
                 replays.get((b.backend, b.device, b.rule), (0, ""))[1],
                 diagnosed.get((b.backend, b.device, b.rule), "")) for b in breaches(c)]
    # Refused inputs (checking/refusals.py): a warning, or a failure under --strict-interface; after the breaches.
    for e in c.refused:
        out.append(Found("refused", "FAIL" if e["gating"] else "warning", e["backend"], e["device"],
                         f"refused {e['entry']} with a {e['feature']}", (e["dtype"],), e["count"],
                         " ".join(f"{e['input']}: {e['exception']}".split())[:DETAIL_CHARS], e["replay"]))
    return out


# --- the step summary ----------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def step_summary(c: Collector, bench: dict[str, Any] | None = None, *, limit: int = SUMMARY_BREACHES,
                 reports: tuple[str, ...] = ()) -> str:
    """The markdown for $GITHUB_STEP_SUMMARY: verdict, "Pick a kernel" and the first ``limit`` breaches, each
    with a replay command in a code block (so the web page copies it whole), and where the full report is
    (``reports``, the run's --report paths; none: how to get one)."""
    lines = [f"### RMSNorm conformance: {c.verdict_label()}", "",
             f"{c.checks} checks, {c.failed_checks} failed, {c.warned_checks} interface warnings; "
             f"{c.passed_tests} tests passed, {len(c.failed_tests())} failed."]
    if c.usage_error:
        lines += ["", f"The run did not start: {_cell(c.usage_error)}"]
    elif c.incomplete:
        lines += ["", f"The run did not finish: {_cell(c.incomplete)}."]
    rows = pick_rows(labelled(c), bench)
    if rows:
        headers, cells = pick_table(rows, bench)
        lines += ["", f"#### {PICK_TITLE}", "", "| " + " | ".join(map(_cell, headers)) + " |",
                  "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in cells]
    shown = [f for f in found(c) if f.status != "xfail"]
    if shown:
        lines += ["", "#### Breaches" + (f" (the first {limit} of {len(shown)})" if len(shown) > limit else ""), ""]
        for f in shown[:limit]:
            kind = "FAIL" if f.status == "FAIL" else "refused input" if f.severity == "refused" else \
                "interface warning"
            named = "" if f.severity == "refused" else f" ({rule(f.rule).title if _known(f.rule) else f.rule})"
            lines.append(f"- **{kind}** `{f.rule}`{named}: "
                         f"{_cell(f.backend)} on {_cell(f.device)}, {', '.join(f.dtypes) or '–'}: {_cell(f.detail)}")
            if f.diagnosis:
                lines.append(f"  - diagnosis: {_cell(f.diagnosis)}")
            if f.replay:
                lines += ["", "  ```bash", f"  {f.replay}", "  ```"]
    if reports:
        lines += ["", "The full report: " + ", ".join(f"`{_cell(r)}`" for r in reports) + ".", ""]
    else:
        lines += ["", "The full report: add `--report=conformance.md` (and `.json`) to the run and keep the files.", ""]
    return "\n".join(lines)


def _known(rule_id: str) -> bool:
    try:
        rule(rule_id)
    except (KeyError, ValueError):
        return False
    return True


def write_step_summary(c: Collector, bench: dict[str, Any] | None = None, path: str | None = None,
                       reports: tuple[str, ...] = ()) -> Path | None:
    """Append the summary to ``path`` (default $GITHUB_STEP_SUMMARY; GitHub gives each step its own file, and
    appending keeps what earlier commands of the step wrote). None when there is no such file to write."""
    path = path or os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return None
    with open(path, "a", encoding="utf-8", errors="backslashreplace") as handle:
        handle.write(step_summary(c, bench, reports=reports))
    return Path(path)


# --- annotations --------------------------------------------------------------------------------------------


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def source_location(spec: str, entry_paths: dict[str, str] | None = None,
                    root: Path | None = None) -> tuple[str, int] | None:
    """Where a backend's code is, relative to ``root`` (the repository: $GITHUB_WORKSPACE, else the current
    directory), for an annotation on the kernel itself; None when it lies outside (an installed package)."""
    path = (entry_paths or {}).get(spec, spec)
    if ":" not in path:
        return None
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception:
        return None
    target: Any = module
    with contextlib.suppress(AttributeError):
        for part in attr.split("."):
            target = getattr(target, part)
    target = getattr(target, "func", target)  # a functools.partial: where its function is
    try:
        file, line = inspect.getsourcefile(target), inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        file, line = getattr(module, "__file__", None), 1
    if not file:
        return None
    base = (root or Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd())).resolve()
    try:
        return Path(file).resolve().relative_to(base).as_posix(), max(1, line)
    except ValueError:
        return None


def workflow_annotations(c: Collector, locations: dict[str, tuple[str, int] | None] | None = None, *,
                limit: int = MAX_ANNOTATIONS) -> list[str]:
    """GitHub workflow commands: ``::error`` for each gating breach, ``::warning`` for each interface warning,
    on the backend's source where it is in the repository (``locations``: backend name -> (file, line))."""
    out: list[str] = []
    counts = {"error": 0, "warning": 0}
    left = {"error": 0, "warning": 0}
    for f in found(c):
        if f.status == "xfail":
            continue
        level = "error" if f.status == "FAIL" else "warning"
        if counts[level] >= limit:
            left[level] += 1
            continue
        counts[level] += 1
        where = (locations or {}).get(f.backend)
        props = ([f"file={_escape_property(where[0])}", f"line={where[1]}"] if where else [])
        what = f"{f.backend} {f.rule}" if f.severity == "refused" else f"{f.rule} broken by {f.backend}"
        title = f"{what} on {f.device}" + (f", {', '.join(f.dtypes)}" if f.dtypes else "")
        props.append(f"title={_escape_property(title)}")
        message = f.detail + (f"\nreplay: {f.replay}" if f.replay else "")
        out.append(f"::{level} {','.join(props)}::{_escape_data(message)}")
    for level, n in left.items():
        if n:
            out.append(f"::{level} title=rmsnorm-conformance::{n} more {level}s; see the report")
    return out


# --- JUnit XML -------------------------------------------------------------------------------------------------


def junit_properties(*, rules: tuple[str, ...], backend: str, device: str, dtype: str,
                     failure: dict[str, str] | None, records: Collector | None) -> list[tuple[str, str]]:
    """Flat string properties for one test's <testcase>: rule, backend, device, dtype, severity and replay of a
    failure, and one ``interface_warning`` per interface rule it breached without failing (rule: detail | replay)."""
    rule_id = (failure or {}).get("rule") or ",".join(rules)
    props = [("rule", rule_id), ("backend", backend), ("device", device), ("dtype", dtype)]
    if rule_id and "," not in rule_id and _known(rule_id):
        props.append(("severity", rule(rule_id).severity))
    elif rule_id == REFUSED_RULE:  # a test failed by a refused input under --strict-interface
        props.append(("severity", "refused"))
    if failure and failure.get("replay"):
        props.append(("replay", failure["replay"]))
    if records is not None:
        smallest: dict[str, Any] = {}  # one warning per rule: its smallest case
        for s in records.summaries.values():
            if s.warnings and (s.rule not in smallest or s.failing_size < smallest[s.rule].failing_size):
                smallest[s.rule] = s
        for rule_id, s in sorted(smallest.items()):
            props.append(("interface_warning", f"{rule_id}: {' '.join(s.failing_detail.split())[:DETAIL_CHARS]}"
                                               f" | replay: {s.replay}"))
    return props


class CiOutput:
    """Registered beside the run's reporter, on the reporting process only: once the run's records are final,
    writes the step summary and prints the annotations. ``reporter`` holds the collector and the options."""

    def __init__(self, reporter: Any) -> None:
        self.reporter = reporter

    def _ran(self) -> bool:
        c = self.reporter.collector
        return bool(c.conformance_tests or c.checks or c.parity or c.usage_error)

    @pytest.hookimpl(trylast=True)  # after the reporter has settled the verdict
    def pytest_sessionfinish(self, session: Any) -> None:
        if not self._ran():
            return
        with contextlib.suppress(OSError):  # a CI file that cannot be written must not change the run's result
            write_step_summary(self.reporter.collector, self.reporter.options.bench,
                               reports=self.reporter.options.reports)

    @pytest.hookimpl(trylast=True)  # after the report's own summary
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self._ran() or os.environ.get("GITHUB_ACTIONS") != "true":
            return
        from ..running.registry import entry_point_paths

        paths = entry_point_paths()
        locations = {b.name: source_location(b.spec, paths) for b in self.reporter.options.backends}
        for line in workflow_annotations(self.reporter.collector, locations):
            terminalreporter.write_line(line)
