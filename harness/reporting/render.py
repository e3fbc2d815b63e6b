"""Rendering of a run's records: the markdown report, the terminal tables, and report files.

Reads ``records.Collector``; never imports the plugin or the merge tool, so each can use it.
"""

from __future__ import annotations

import contextlib
import functools
import html
import importlib.util
import json
import os
import re
import shlex
import textwrap
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from tabulate import tabulate

from ...contract import AXIS_A_VARIANTS, rule
from ..checking.known_failures import entry_status
from ..vocabulary.records import Collector, Summary, finite_tree, fold_refused
from .diagnoses import DIAGNOSES_TITLE, diagnosis_lines
from .pick_a_kernel import labelled, pick_json, pick_markdown
from .plots import Pictures, temporary_beside
from .plots import draw as draw_pictures

REPORT_SUFFIXES = (".md", ".markdown", ".json")


def render_report(c: Collector, path: str | Path, *, bench: dict[str, Any] | None = None,
                  pictures: Pictures | None = None, progress: bool = False) -> str:
    """The text of the report for ``path``: strict JSON for ``.json``, markdown otherwise. ``bench`` is a
    benchmark JSON's data for the speed columns of "Pick a kernel"; ``pictures`` what was drawn beside it.
    A ``progress`` report (rewritten as each test starts, the last one only if the run dies) is compact JSON:
    Python's C encoder writes that, its pure-Python one any indented JSON, several times slower."""
    if Path(path).suffix == ".json":
        data = c.to_json()
        # Derived: from_json and merge read the records, not this.
        data["pick"] = finite_tree(pick_json(labelled(c, data), bench))
        if progress:
            return json.dumps(data, allow_nan=False, separators=(",", ":")) + "\n"
        return json.dumps(data, indent=2, allow_nan=False) + "\n"
    return render_markdown(c, bench=bench, pictures=pictures)


def replace_reports(c: Collector, paths: Iterable[str]) -> None:
    """Write ``c`` to each of ``paths`` that names a report file (a report suffix, not a folder), leaving any that
    cannot be written: the report of a run that ended before its reporter started (a usage error, an interrupt), so
    that a previous run's verdict never reads as this one's."""
    for raw in paths:
        if Path(raw).suffix in REPORT_SUFFIXES and not Path(raw).is_dir():
            with contextlib.suppress(OSError):
                write_report(c, raw)


def write_report(c: Collector, path: str | Path, *, bench: dict[str, Any] | None = None,
                 plots: bool = False, progress: bool = False) -> Path:
    """Write the report atomically (a temporary file beside it, then a rename), so that a reader, or a run killed
    mid-write, never sees half a report. With ``plots``, a markdown report's pictures are drawn beside it first
    (the run's last write only: drawing takes seconds, and the report is rewritten as every test starts)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pictures = None
    if plots and path.suffix != ".json":
        try:
            pictures = draw_pictures(labelled(c), bench, path.parent, path.stem)
        except Exception as exc:  # draw never raises by design; the report must not depend on that
            pictures = Pictures(notes=[f"Pictures were not drawn: {type(exc).__name__}: {exc}."])
    text = render_report(c, path, bench=bench, pictures=pictures, progress=progress)
    fd, tmp = temporary_beside(path)
    try:
        # A kernel's exception may carry text that is no UTF-8 (a lone surrogate): escaped, never a report lost.
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def md_cell(value: Any) -> str:
    """A table cell that cannot break the table or inject markup: pipes, backticks and HTML escaped, newlines
    turned into <br>."""
    text = html.escape(str(value), quote=False)
    return text.replace("|", "\\|").replace("`", "\\`").replace("\r", "").replace("\n", "<br>")


def md_code(value: Any) -> str:
    """Inline code that survives any backticks inside (CommonMark: a longer backtick fence)."""
    text = str(value).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_table(rows: list[list[Any]], headers: list[str]) -> str:
    return _tabulated(tuple(tuple(md_cell(v) for v in row) for row in rows), tuple(md_cell(h) for h in headers))


@functools.lru_cache(maxsize=256)
def _tabulated(rows: tuple[tuple[str, ...], ...], headers: tuple[str, ...]) -> str:
    """tabulate's table of cells already escaped. Kept by content: the report is rewritten as every test starts,
    and from one start to the next most of its tables are the same (tabulate was half of a rewrite's time)."""
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def _num(value: float | None, fmt: str = ".3g") -> str:
    return "–" if value is None else format(value, fmt)


def _dims_label(summary: Summary) -> str:
    if summary.dim != "other":
        return summary.dim
    dims = sorted(summary.dims)
    if len(dims) == 1:
        return f"other ({dims[0]})"
    return f"other ({len(dims)} dims, {dims[0]}–{dims[-1]})" if dims else "other"


def _is_axis_a(rule_id: str) -> bool:
    return rule_id.startswith("axis_a.")


def _has_stats(summary: Summary) -> bool:
    return summary.margin is not None


def _by_backend(c: Collector) -> tuple[dict[tuple[str, str], list[Summary]], dict[tuple[str, str], list[str]]]:
    """Summaries per (backend, device), and the rules of tests that failed or raised without a recorded check
    (an exception, a timeout, a crash), which count too."""
    by: dict[tuple[str, str], list[Summary]] = {}
    for s in c.summaries.values():
        by.setdefault((s.backend, s.device), []).append(s)
    raised: dict[tuple[str, str], list[str]] = {}
    for o in c.outcomes.values():
        if o["outcome"] in ("failed", "error") and o.get("backend"):
            key = (o["backend"], _checked_device(by, o["backend"], o.get("device", "")))
            by.setdefault(key, [])
            raised.setdefault(key, []).append(o.get("rule") or o["outcome"])
    return by, raised


def _checked_device(by: dict[tuple[str, str], list[Summary]], backend: str, device: str) -> str:
    """A failed test's device as its checks name it: the test id says ``cuda``, the checks ``cuda:0``. Where the
    backend's checks ran on exactly one device of that type, the failure belongs to that row, not a row of its own."""
    if ":" in device:
        return device
    same = {d for b, d in by if b == backend and d.split(":")[0] == device}
    return same.pop() if len(same) == 1 else device


def _verdict_row(c: Collector, backend: str, device: str, items: list[Summary], raised: list[str]) -> list[Any]:
    """One backend on one device: checks, failures, its verdict (a run that ended early or lost the device
    passes no one) and the rules behind it."""
    failed_rules = sorted({s.rule for s in items if s.failures} | set(raised))
    expected_rules = sorted({s.rule for s in items if s.expected_failures} - set(failed_rules))
    warned_rules = sorted({s.rule for s in items if s.warnings})
    note = ", ".join(failed_rules) or "–"
    kinds = fold_refused(sorted({(e["feature"], "") for e in c.refused
                                 if (e["backend"], e["device"]) == (backend, device)}))
    if kinds:
        note += f" (refused: {', '.join(kinds)})"
    if expected_rules:
        note += " (expected: " + ", ".join(expected_rules) + ")"
    lost = any((e["backend"], e["device"]) == (backend, device) for e in c.device_lost())
    gaps = c.coverage_gaps(backend).get(backend, [])
    if gaps:
        note += f" (not checked at {', '.join(gaps)})"
    return [backend, device, sum(s.checks for s in items), sum(s.failures for s in items),
            "FAIL" if failed_rules else "INCOMPLETE" if lost or c.incomplete or gaps else "PASS", note,
            ", ".join(warned_rules) or "–"]


def backend_rows(c: Collector) -> list[list[Any]]:
    by, raised = _by_backend(c)
    rows = [_verdict_row(c, backend, device, items, raised.get((backend, device), []))
            for (backend, device), items in sorted(by.items())]
    for entry in c.not_run:
        if (entry["backend"], entry["device"]) not in by:
            rows.append([entry["backend"], entry["device"], 0, 0, "NOT RUN", entry["reason"], "–"])
    ran = {backend for backend, _ in by}
    for name in c.named_but_not_run():
        if name not in ran and not any(e["backend"] == name for e in c.not_run):
            rows.append([name, "all", 0, 0, "NOT RUN", "named with --backend but ran no check (see 'Did not run')",
                         "–"])
    return rows


def warning_rows(c: Collector) -> list[list[Any]]:
    """Breaches of interface rules that did not gate this run, with the smallest case and its replay."""
    return [[s.backend, s.device, s.dtype, s.rule, s.warnings, s.failing_detail or "–", s.replay or "–"]
            for s in sorted(c.summaries.values(), key=lambda s: s.key) if s.warnings]


def refused_input_rows(c: Collector) -> list[list[Any]]:
    """Each kind of refused input: where, the smallest input and case refused, the exception, how many cases,
    and whether it gated (under --strict-interface)."""
    return [[e["backend"], e["device"], e["dtype"], e["entry"], e["input"], e["exception"], e["count"],
             "FAIL" if e["gating"] else "refused", e["replay"] or "–"]
            for e in sorted(c.refused, key=lambda e: (e["backend"], e["device"], e["dtype"], e["entry"]))]


def tolerance_rows(c: Collector) -> list[list[Any]]:
    rows = []
    for s in sorted(c.summaries.values(), key=lambda s: s.key):
        if _is_axis_a(s.rule) or not _has_stats(s):
            continue
        rows.append([s.backend, s.device, s.dtype, _dims_label(s), s.rule, s.checks, s.failures,
                     _num(s.max_abs), _num(s.max_rel), _num(s.max_ulp, "d") if s.max_ulp is not None else "–",
                     _num(s.margin), s.failing_case or "–"])
    return rows


def axis_a_rows(c: Collector) -> list[list[Any]]:
    folded: dict[tuple[str, str, str, str], Summary] = {}
    for s in c.summaries.values():
        if not _is_axis_a(s.rule):
            continue
        key = (s.backend, s.device, s.rule, s.dtype)
        agg = folded.setdefault(key, Summary(s.backend, s.device, s.dtype, "all", s.rule))
        agg.merge(s)
    order = {r.id: i for i, r in enumerate(AXIS_A_VARIANTS)}
    rows = []
    for key in sorted(folded, key=lambda k: (k[0], k[1], order.get(k[2], 99), k[3])):
        s = folded[key]
        rows.append([s.backend, s.device, rule(s.rule).title if s.rule in order else s.rule, s.dtype,
                     s.checks, s.failures, s.failing_case or "–"])
    return rows


def other_rule_rows(c: Collector) -> list[list[Any]]:
    folded: dict[tuple[str, str, str], Summary] = {}
    for s in c.summaries.values():
        if _is_axis_a(s.rule) or _has_stats(s):
            continue
        agg = folded.setdefault((s.backend, s.device, s.rule), Summary(s.backend, s.device, "all", "all", s.rule))
        agg.merge(s)
    return [[s.backend, s.device, s.rule, s.checks, s.failures, s.failing_detail or "–"]
            for _, s in sorted(folded.items())]


def not_run_rows(c: Collector) -> list[list[Any]]:
    reasons: dict[tuple[str, str], int] = {}
    for outcome in c.outcomes.values():
        if outcome["outcome"] == "skipped":
            key = (outcome.get("where", ""), outcome["reason"])
            reasons[key] = reasons.get(key, 0) + 1
    rows = [[where or "–", reason, count] for (where, reason), count in sorted(reasons.items())]
    rows += [[f"{e['backend']} on {e['device']}", e["reason"], "cases outside them" if e.get("limits") else "all"]
             for e in c.not_run]
    return rows


def expected_rows(c: Collector) -> list[list[Any]]:
    failing = c.stale_entries()
    return [[e["backend"], e["device"], e.get("dtype", "*"), e["rule"] + _case_pattern(e), e["reason"], e["breached"],
             e["passed"], entry_status(e["breached"], e["passed"])
             + (" (FAIL: --strict-known-failures)" if e in failing else "")] for e in c.expected]


def _case_pattern(entry: dict[str, Any]) -> str:
    case = entry.get("case", "*")
    return "" if case in ("*", None) else f", case {case}"


def parity_rows(c: Collector) -> list[list[Any]]:
    folded: dict[tuple[str, ...], list[Any]] = {}
    for p in c.parity:
        key = (p["device"], p["dtype"], str(p["dim"]), p["pair"])
        row = folded.setdefault(key, [*key, 0, 0, 0])
        row[4] += p["equal"]
        row[5] += p["total"]
        row[6] = max(row[6], p["max_ulp"])
    return [[*k, f"{r[4]} / {r[5]}", r[6]] for k, r in sorted(folded.items())]


def rounding_rows(c: Collector) -> list[list[Any]]:
    """Rows matching each rounding class, folded over the shapes checked; the class followed is the one most
    rows match ("indistinguishable" where the classes give the same bits, as in fp32)."""
    folded: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in c.rounding:
        key: tuple[str, ...] = (r["backend"], r["device"], r["dtype"], r["variant"])
        row = folded.setdefault(key, {"rows": 0, "matches": {}, "distinct": False, "declared": r["declared"]})
        row["rows"] += r["rows"]
        row["distinct"] |= r["distinguishable"]
        for name, n in r["matches"].items():
            row["matches"][name] = row["matches"].get(name, 0) + n
    rows = []
    for key, row in sorted(folded.items()):
        matches, total = row["matches"], max(row["rows"], 1)
        best = max(matches, key=matches.get) if matches else ""
        follows = "indistinguishable" if not row["distinct"] else best if matches.get(best) else "none"
        shares = "; ".join(f"{name} {n / total:.0%}" for name, n in matches.items())
        rows.append([*key, row["rows"], shares, follows, row["declared"] or "–"])
    return rows


def failures(c: Collector) -> list[tuple[str, dict[str, str]]]:
    return [(nodeid, o) for nodeid, o in sorted(c.outcomes.items()) if o["outcome"] in ("failed", "error")]


def pyargs_id(nodeid: str, suite: str = "") -> str:
    """A conformance test's id as ``pytest --pyargs`` takes it from any directory
    (``rmsnorm_conformance.suites.test_axis_a::test_batch_size[...]``): the file part of a node id is relative to
    wherever pytest chose its rootdir, an installed package's site-packages included, so it cannot be pasted back.
    A run started with ``--pyargs 'module::test'`` from outside the package gets node ids with no file part at
    all (``::test_x[...]``): ``suite``, the test's module as the plugin noted it, names it then. Other ids are
    returned as they are."""
    path, sep, rest = nodeid.partition("::")
    if sep and not path and suite:
        path = f"{suite}.py"
    stem = PurePosixPath(path).stem
    if not sep or not path.endswith(".py") or not stem.startswith("test_"):
        return nodeid
    if importlib.util.find_spec(f"rmsnorm_conformance.suites.{stem}") is None:
        return nodeid
    return f"rmsnorm_conformance.suites.{stem}::{rest}"


# Options of a run that a re-run of one test leaves out: the reports it would overwrite, the workers it needs not.
_RERUN_DROPPED = ("--report", "--junitxml", "--junit-xml", "--rule", "-n", "--numprocesses", "--bench-json",
                  "--replay", "--lf", "--last-failed", "-x", "--exitfirst",
                  # the same options under the names they have where a conftest of the project took the short ones
                  "--rmsnorm-report", "--rmsnorm-rule", "--rmsnorm-bench-json", "--rmsnorm-replay")


def rerun_command(nodeid: str, replay: str, command: str, suite: str = "") -> str:
    """One command that re-runs just this test (its whole sweep) from the directory the run started in: the
    replay's options where there is one, else the run's own, without its targets, reports and workers."""
    target = pyargs_id(nodeid, suite)
    if target == nodeid:
        return ""
    words = shlex.split(re.split(r" --(?:rmsnorm-)?replay=", replay, maxsplit=1)[0]) if replay else \
        shlex.split(command or "pytest")
    options, skip_value = [], False
    for word in words[1:]:
        if skip_value:
            skip_value = False
            continue
        name = word.split("=", 1)[0]
        if name in ("-nauto", "-nlogical") or (name[:2] == "-n" and name[2:].isdigit()):
            continue  # -n with its value joined (options.run_command writes -n 2 as -n2)
        if name in _RERUN_DROPPED:
            skip_value = "=" not in word and name not in ("--lf", "--last-failed", "-x", "--exitfirst")
            continue
        if not word.startswith("-"):  # a target: a path or a package the run collected from
            continue
        options.append(word)
    options = [o for o in options if o != "--pyargs"]
    return shlex.join(["pytest", "--pyargs", target, *options])


def failure_lines(c: Collector, *, markdown: bool) -> list[str]:
    """Failures as a list, not a table: the replay command must survive copy and paste whole. Each test's id is
    given as ``pytest --pyargs`` takes it, with the command that re-runs it."""
    lines = []
    for nodeid, o in failures(c):
        shown = pyargs_id(nodeid, o.get("suite", "")) if o.get("backend") else nodeid
        rerun = rerun_command(nodeid, o.get("replay", ""), c.environment.get("command", ""), o.get("suite", "")) \
            if o.get("backend") else ""
        if markdown:
            lines.append(f"- {md_code(shown)} ({o['outcome']}): {md_cell(o.get('reason', ''))}")
            if o.get("replay"):
                lines.append(f"  - replay: {md_code(o['replay'])}")
            if rerun:
                lines.append(f"  - re-run the test: {md_code(rerun)}")
        else:
            lines.append(f"{'FAILED' if o['outcome'] == 'failed' else 'ERROR'} {shown}")
            lines.append(f"  {o.get('reason', '')}")
            if o.get("replay"):
                lines.append(f"  replay: {o['replay']}")
            if rerun:
                lines.append(f"  re-run the test: {rerun}")
    return lines


TABLES: tuple[tuple[str, list[str], Any], ...] = (
    ("Verdict per backend and device",
     ["backend", "device", "checks", "failed", "verdict", "failed rules / reason", "interface warnings"],
     backend_rows),
    ("Interface warnings (fail only under --strict-interface)",
     ["backend", "device", "dtype", "rule", "breaches", "smallest case's detail", "replay"], warning_rows),
    ("Refused inputs (clear exceptions on valid inputs not declared as refused: neither passed nor failed; "
     "fail only under --strict-interface)",
     ["backend", "device", "dtype", "entry point", "input refused (smallest)", "exception", "cases", "status",
      "replay"], refused_input_rows),
    ("Tolerance: Axis-B, semantics and gradients with statistics",
     ["backend", "device", "dtype", "dim", "rule", "cases", "failed", "max abs err", "max rel err",
      "max ULP", "margin", "minimal failing case"], tolerance_rows),
    ("Axis-A: bitwise batch invariance per variant",
     ["backend", "device", "variant", "dtype", "configurations", "failed", "minimal failing configuration"],
     axis_a_rows),
    ("Other rules (pass/fail)", ["backend", "device", "rule", "checks", "failed", "last failure"],
     other_rule_rows),
    ("Did not run", ["what", "reason", "tests"], not_run_rows),
    ("Cross-backend parity (informational): the same inputs through each pair of backends",
     ["device", "dtype", "dim", "pair", "bitwise equal", "max ULP apart"], parity_rows),
    ("Rounding class (informational): rows whose bits match each reference rounding order",
     ["backend", "device", "dtype", "variant", "rows", "share of rows matching", "follows", "declared"],
     rounding_rows),
    ("Known failures (manifest)", ["backend", "device", "dtype", "rule", "reason", "breached", "passed", "status"],
     expected_rows),
)
FAILURES_TITLE = "Failures and how to replay them"


def environment_rows(c: Collector) -> list[list[Any]]:
    return [[k, v] for k, v in c.environment.items()]


def headline(c: Collector) -> str:
    text = (f"RMSNorm conformance: {c.verdict_label()} ({c.checks} checks, {c.failed_checks} failed"
            + (f", {c.warned_checks} interface warnings" if c.warned_checks else "")
            + (f", {sum(e['count'] for e in c.refused)} refused inputs" if c.refused else "") + ")")
    return text


def incomplete_lines(c: Collector) -> list[str]:
    """Why the run did not finish and which tests it left: a report must never look finished when it is not."""
    if c.usage_error:
        return [f"The run did not start: usage error: {c.usage_error}"]
    if not c.incomplete:
        return []
    lines = [f"The run did not finish: {c.incomplete}."]
    if c.unfinished:
        lines.append("Tests started and not finished: " + ", ".join(c.unfinished[:20])
                     + (f" and {len(c.unfinished) - 20} more" if len(c.unfinished) > 20 else "") + ".")
    if c.not_started:
        lines.append(f"{c.not_started} collected tests never started.")
    return lines


def partial_lines(c: Collector) -> list[str]:
    """What a partial run left out: a selection's PASS must say it is not the full gate's, and a kernel that
    declines the contract's target dims must say the model's shapes were never checked."""
    lines = []
    adds = c.selection.get("full_gate_adds", [])
    if adds:
        lines += [f"This {c.selection.get('sweep')} run is a quick check, not the gate; a full run adds:"
                  if c.selection.get("sweep_is_gate") is False else
                  "This run is short of the full gate, which would add:", *(f"- {line}" for line in adds)]
    gaps = c.coverage_gaps()
    if gaps:
        target = ", ".join(f"{k} {v}" for k, v in c.target_dims().items())
        lines += [f"Not checked at the run's target dims ({target}): refused, or kept out by declared limits, so "
                  "nothing here says how these kernels do on the model's own shapes, and none of them can pass:",
                  *(f"- {name}: {', '.join(missing)}" for name, missing in sorted(gaps.items()))]
    return lines


def retried_lines(c: Collector) -> list[str]:
    """The cases tried again after running out of memory: not findings (what they finally gave is in the checks),
    but a kernel that needs more memory on a first try than on the next is worth a look."""
    if not c.retried:
        return []
    return ["Tried again after running out of memory (the checks count what the last try gave):",
            *(f"- {e['backend']} on {e['device']}, {e['dtype']}, {e['rule']}: {e['count']} "
              f"case{'s' * (e['count'] != 1)}" for e in c.retried)]


PICTURES_TITLE = "Pictures"


def pictures_lines(pictures: Pictures | None) -> list[str]:
    """The pictures section: each image linked relative to the report (it sits beside it), then what was not
    drawn and why."""
    lines = [f"## {PICTURES_TITLE}", ""]
    if pictures is None:
        return [*lines, "Not drawn in this write of the report: pictures are drawn once, when a run finishes.", ""]
    for title, name in pictures.images:
        lines += [f"### {md_cell(title)}", "", f"![{md_cell(title)}]({quote(name)})", ""]
    lines += [md_cell(note) for note in pictures.notes]
    return [*lines, ""] if pictures.notes else lines


def render_markdown(c: Collector, *, bench: dict[str, Any] | None = None, pictures: Pictures | None = None) -> str:
    lines = [f"# RMSNorm conformance report: {c.verdict_label()}", ""]
    lines += [md_cell(line) for line in incomplete_lines(c)] + ([""] if c.incomplete else [])
    lines += [md_cell(line) for line in partial_lines(c)] + ([""] if partial_lines(c) else [])
    lines += [md_cell(line) for line in retried_lines(c)] + ([""] if c.retried else [])
    lines += [f"{c.checks} checks, {c.failed_checks} failed, {c.warned_checks} interface warnings, "
              f"{sum(e['count'] for e in c.refused)} refused inputs; "
              f"{c.passed_tests} tests passed, {len(c.failed_tests())} failed, "
              f"{sum(o['outcome'] == 'skipped' for o in c.outcomes.values())} skipped.", ""]
    lines += pick_markdown(labelled(c), bench, _md_table, md_cell,
                           details_at="'Interface warnings', 'Refused inputs' and 'Failures and how to replay "
                                      "them' below; "
                                      f"pictures under '{PICTURES_TITLE}' at the end")
    lines += ["## Environment", "", _md_table(environment_rows(c), ["", ""]), ""]
    for title, headers, rows_of in TABLES:
        rows = rows_of(c)
        lines += [f"## {title}", ""]
        lines += [_md_table(rows, headers) if rows else "(none)", ""]
    lines += [f"## {FAILURES_TITLE}", "", *(failure_lines(c, markdown=True) or ["(none)"]), ""]
    found = diagnosis_lines(c, markdown=True)
    lines += [f"## {DIAGNOSES_TITLE}", "", *found] if found else []
    lines += pictures_lines(pictures)
    lines += [TOLERANCE_LEGEND, ""]
    return "\n".join(lines)


def render_terminal(c: Collector, *, verbose: bool = True, width: int = 120) -> Iterable[str]:
    """The terminal summary: on a quiet run, the verdict per backend, what did not run and the failures;
    with ``verbose``, every table. Wide cells wrap so that tables fit ``width`` columns."""
    yield headline(c)
    # What a budget left out is listed whole under "Did not run" below: named once here, not listed twice.
    adds = [line.split(NOT_CHECKED)[0] + f"{NOT_CHECKED}listed under 'Did not run' below" if NOT_CHECKED in line
            else line for line in partial_lines(c)]
    if not verbose:  # each note once, in a line: 'Did not run' has the budgets' lists, -v each whole
        adds = _quiet_items([line for line in adds if not line.endswith(f"{NOT_CHECKED}listed under 'Did not "
                                                                         "run' below")], width)
    yield from _prose([*incomplete_lines(c), *adds, *retried_lines(c)], width)
    env = c.environment
    if verbose:  # the header's lines say the contract, profile and sweep already
        yield ("contract {} profile {} | sweep {} | torch {} | triton {}".format(
            env.get("contract version"), env.get("contract profile"), env.get("sweep"),
            env.get("torch"), env.get("triton")))
    quiet_tables = ("Verdict", "Did not run", "Known failures")
    tables = TABLES if verbose else ((TABLES[0][0], QUIET_VERDICT_HEADERS, TABLES[0][2]), SUMMED_UP, *TABLES[1:])
    for title, headers, rows_of in tables:
        if not verbose and not title.startswith(quiet_tables) and rows_of is not summed_up_rows:
            continue
        if not verbose and rows_of is not_run_rows:
            yield from _quiet_not_run(c, width)
            continue
        terminal_rows = {not_run_rows: not_run_terminal_rows, warning_rows: warning_terminal_rows}
        rows = terminal_rows.get(rows_of, rows_of)(c)
        if rows:
            yield ""
            yield title
            headers, rows, replays = _replays_out(headers, rows)
            yield fitted_table(rows, headers, width)
            yield from replays
            if rows_of is tolerance_rows:
                yield from _prose([TOLERANCE_LEGEND], width)
    lines = failure_lines(c, markdown=False)
    if lines:
        yield ""
        yield FAILURES_TITLE
        yield from lines
    found = diagnosis_lines(c, markdown=False)
    if found:
        yield ""
        yield DIAGNOSES_TITLE
        yield from found


def _clipped(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _quiet_items(lines: list[str], width: int) -> list[str]:
    """Each list's items on a quiet run: a line each, QUIET_ITEMS at most, then how many more -v shows."""
    out: list[str] = []
    items: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("- "):
            items.append(_clipped(line, width))
            continue
        if len(items) > QUIET_ITEMS:
            items = [*items[: QUIET_ITEMS - 1], f"- and {len(items) - QUIET_ITEMS + 1} more: -v, or the report"]
        out += items
        items = []
        out.append(line)
    return out[:-1]


# The items of a list (what a full run adds, what did not run) a quiet run shows, at most.
QUIET_ITEMS = 4


def _quiet_not_run(c: Collector, width: int) -> Iterable[str]:
    """'Did not run' on a quiet run: a line a reason, cut to the terminal's width (the report and -v hold each
    whole), so that a budget's note of a hundred shapes does not fill the screen of a PASS."""
    rows = not_run_terminal_rows(c)
    if not rows:
        return
    yield ""
    yield "Did not run (each reason whole in the report and with -v)"
    shown = rows if len(rows) <= QUIET_ITEMS else rows[: QUIET_ITEMS - 1]
    for what, reason, count in shown:
        tests = count if isinstance(count, str) else f"{count} test{'s' if count != 1 else ''}"
        yield _clipped(f"- {reason} [{tests}: {what}]", width)
    if len(shown) < len(rows):
        yield f"- and {len(rows) - len(shown)} more reasons: -v, or the report"


def summed_up_rows(c: Collector) -> list[list[Any]]:
    """Interface warnings and refused inputs summed up for a quiet terminal: one row per backend and rule, with how
    many cases and the smallest of them; the report, and ``-v``, list each."""
    folded: dict[tuple[str, str], list[Any]] = {}

    def add(backend: str, rule_id: str, count: int, case: str, replay: str, size: int) -> None:
        row = folded.setdefault((backend, rule_id), [backend, rule_id, 0, "", "", -1])
        row[2] += count
        if (case or replay) and (not (row[3] or row[4]) or 0 <= size < row[5]):
            row[3:] = [case, replay, size]

    for s in c.summaries.values():
        if s.warnings:
            add(s.backend, s.rule, s.warnings, s.failing_case, s.replay, s.failing_size)
    for e in c.refused:
        if not e["gating"]:
            add(e["backend"], f"refused: {e['feature']} ({e['entry']})", e["count"], e["case"], e["replay"], e["size"])
    rows = []
    for backend, rule_id, count, case, replay, _ in sorted(folded.values(), key=lambda r: (r[0], r[1])):
        case = " ".join(case.split()) or "–"
        rows.append([backend, rule_id, count, case if len(case) <= TERMINAL_DETAIL else
                     case[: TERMINAL_DETAIL - 1] + "…", replay or "–"])
    return rows


# The verdict table's headers on a quiet terminal: short enough that the header is one line at 80 columns.
QUIET_VERDICT_HEADERS = ["backend", "device", "checks", "failed", "verdict", "failed / why", "warnings"]
# The quiet terminal's one table of what warns but does not gate: in place of the two tables -v shows.
SUMMED_UP: tuple[str, list[str], Any] = (
    "Interface warnings and refused inputs (fail only under --strict-interface; each is in the report and in -v)",
    ["backend", "rule", "cases", "first (smallest) case", "replay"], summed_up_rows)


# How a threshold plan's note (harness/drawing/thresholds.py) begins its list of what it left out.
NOT_CHECKED = ", not checked: "


def _prose(lines: Iterable[str], width: int) -> Iterable[str]:
    """Lines of text wrapped between words to ``width``, a list item's continuation indented under its text."""
    for line in lines:
        if len(line) <= width:
            yield line
            continue
        yield from textwrap.wrap(line, width, subsequent_indent="  " if line.startswith("- ") else "",
                                 break_long_words=False, break_on_hyphens=False)


# Under the tolerance tables (the report's end; the terminal's verbose tables).
TOLERANCE_LEGEND = ("margin = worst error / allowed error (<= 1 passes), the allowed error atol + rtol |reference| "
                    "(plus the rounding terms the rule names). ULPs are counted in the output dtype against the "
                    "reference rounded to it. max rel err and max ULP are each the worst over all elements, where "
                    "the reference is near zero too and atol allows most: they can be large while the margin "
                    "passes.")


# Free text and the first column are never narrowed below this: a narrower one wraps into a column of single
# words. Other columns (numbers, ids) narrow to their longest word.
MIN_COLUMN = 10
# Columns of free text (details, reasons): the only ones where a word (a case's repr, a long path) may be split,
# where the table cannot fit otherwise. Rule ids, test ids, backends, devices and options in the other columns
# are never split: a split one can be neither read whole nor searched for.
FREE_TEXT = frozenset({"smallest case's detail", "minimal failing configuration",
                       "last failure", "reason"})
# Free text splits its words only down to this width: a table that still does not fit runs wider instead.
FREE_TEXT_MIN = 28
# The terminal's "Did not run" names the tests a reason applies to up to this many characters, else the first and a
# count.
WHAT_CHARS = 40


def fitted_table(rows: list[list[Any]], headers: list[str], width: int) -> str:
    """A plain table no wider than ``width`` where its words allow: the widest columns wrap between words until it
    fits, then free text's longest words split. A table whose other words cannot fit is wider than ``width``, and
    the terminal wraps its lines."""
    # tabulate pads every header by 2 (its MIN_PADDING): a column is never narrower than that.
    natural = [max(len(str(h)) + 2, *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    room = max(width - 2 * (len(headers) - 1), MIN_COLUMN * len(headers))
    widths = list(natural)
    # Free text wraps first; the first column (what a row is about) and short columns only if they must.
    order = sorted(range(len(headers)), key=lambda i: (i == 0, -natural[i]))
    for split_free_text in (False, True):
        for i in order:
            excess = sum(widths) - room
            if excess <= 0:
                break
            longest = max((len(w) for r in rows for w in str(r[i]).split()), default=0)
            if split_free_text and headers[i] in FREE_TEXT:
                longest = min(longest, FREE_TEXT_MIN)  # narrower, a detail reads a few letters a line
            # A header wraps onto two lines at most: "failed rules / reason" in four was hard to read.
            header = str(headers[i])
            header_least = max(max(len(w) for w in header.split() or [""]), -(-len(header) // 2) + 1)
            least = (2 * MIN_COLUMN if i == 0 else MIN_COLUMN) if headers[i] in FREE_TEXT or i == 0 else 0
            floor = max(least, header_least + 2, longest)
            widths[i] = max(min(floor, widths[i]), widths[i] - excess)
    # Wrapped here rather than by tabulate's maxcolwidths, which splits at hyphens ("--max-" / "elements").
    wrapped = [[_wrap(cell, w, split_words=h in FREE_TEXT) if w < n else cell
                for cell, w, n, h in zip(r, widths, natural, headers, strict=True)] for r in rows]
    # A header wraps between its words ("max abs err" over two lines) where its column was narrowed.
    heads = [_wrap(h, w - 2, split_words=False) if w < n else h
             for h, w, n in zip(headers, widths, natural, strict=True)]
    return tabulate(wrapped, heads, tablefmt="simple", disable_numparse=True)


def _wrap(cell: Any, width: int, split_words: bool) -> str:
    """``cell`` in lines of at most ``width`` characters (its own lines kept), broken between words, and inside a
    word longer than ``width`` only where ``split_words``."""
    return "\n".join(line for part in str(cell).split("\n")
                     for line in textwrap.wrap(part, width, break_long_words=split_words, break_on_hyphens=False)
                     or [""])


def _replays_out(headers: list[str], rows: list[list[Any]]) -> tuple[list[str], list[list[Any]], list[str]]:
    """A table's replay column as references ([1], [2], ...) and the commands as lines below it: a replay wrapped
    inside a cell cannot be pasted."""
    if "replay" not in headers:
        return headers, rows, []
    i = headers.index("replay")
    lines: list[str] = []
    out: list[list[Any]] = []
    for row in rows:
        row = list(row)
        if row[i] and row[i] != "–":
            lines.append(f"[{len(lines) + 1}] {row[i]}")
            row[i] = f"[{len(lines)}]"
        out.append(row)
    return headers, out, (["replay:", *lines] if lines else [])


def not_run_terminal_rows(c: Collector) -> list[list[Any]]:
    """'Did not run' folded by reason for the terminal: what it applies to (clipped), the reason, how many tests."""
    folded: dict[str, list[Any]] = {}
    for what, reason, count in not_run_rows(c):
        row = folded.setdefault(reason, [[], reason, 0])
        row[0].append(what)
        # "all" (or another word, such as "cases outside them") stands for more than a count: it is kept.
        row[2] = row[2] if isinstance(row[2], str) else count if isinstance(count, str) else row[2] + count
    rows = []
    for whats, reason, count in folded.values():
        text = ", ".join(dict.fromkeys(whats))
        if len(text) > WHAT_CHARS:  # the first whole (a test id cut short names no test), then a count
            text = f"{whats[0]} and {len(set(whats)) - 1} more"
        rows.append([text, reason, count])
    return rows


# A detail in a terminal table is cut here: the report files keep it whole.
TERMINAL_DETAIL = 160


def warning_terminal_rows(c: Collector) -> list[list[Any]]:
    """Interface warnings folded over dims for the terminal: one row per (backend, device, dtype, rule), with the
    smallest case's detail (clipped) and replay."""
    folded: dict[tuple[str, ...], Summary] = {}
    for s in sorted(c.summaries.values(), key=lambda s: s.key):
        if not s.warnings:
            continue
        key = (s.backend, s.device, s.dtype, s.rule)
        agg = folded.setdefault(key, Summary(s.backend, s.device, s.dtype, "all", s.rule))
        agg.merge(s)
    rows = []
    for s in folded.values():
        detail = " ".join(s.failing_detail.split()) or "–"
        if len(detail) > TERMINAL_DETAIL:
            detail = detail[: TERMINAL_DETAIL - 1] + "…"
        rows.append([s.backend, s.device, s.dtype, s.rule, s.warnings, detail, s.replay or "–"])
    return rows
