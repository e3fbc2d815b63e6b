"""The conformance matrix: JSON reports from several runs and devices merged into one markdown table.

Rows are backends on devices; columns are the contract's rules, then max ULP, worst margin and, where a
benchmark file is given, bandwidth against a device copy. A failing cell points to a footnote holding its
minimal configuration and replay command.

    rmsnorm-conformance merge reports/cpu/*.json reports/gpu/*.json --bench reports/gpu/bench.json \\
        --out matrix.md
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from ...contract import ALL_RULES, Rule
from ...contract.families import axis_b
from ..vocabulary.records import FORMAT, _from_finite_json
from .pick_a_kernel import BENCH_ALIASES, device_label, merged, pick_markdown
from .plots import draw as draw_pictures
from .render import _md_table, md_cell, md_code, pictures_lines

ERRORS = "errors"  # the column for tests that failed without recording a failing check

_AXIS_LETTER = {"axis_a": "A", "axis_b": "B", "semantics": "S", "gradients": "G"}


def _column(rule_id: str, title: str) -> str:
    return f"{_AXIS_LETTER.get(rule_id.split('.')[0], '?')}: {title}"


# GPUs of one model share a row (pick.device_label); the benchmark's peers go by their adapters' names.
_device_label = device_label
_BENCH_ALIASES = BENCH_ALIASES


class Matrix:
    """Per (backend, device label) and rule: checks, failures, and the minimal failing case."""

    def __init__(self) -> None:
        self.cells: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.stats: dict[tuple[str, str], dict[str, Any]] = {}
        self.not_run: dict[tuple[str, str], str] = {}
        self.sources: list[str] = []

    def add_report(self, data: dict[str, Any], source: str) -> None:
        if data.get("format") != FORMAT:
            raise ValueError(f"{source} is not a conformance report (format {data.get('format')!r})")
        env = data.get("environment", {})
        verdict = data.get("verdict_label") or data.get("verdict")  # a report from before verdict_label: verdict
        self.sources.append(f"{source}: {verdict}, exit status {env.get('exit status', '?')}, "
                            f"{env.get('date', '?')}, torch {env.get('torch', '?')}")
        for s in map(_from_finite_json, data.get("summaries", [])):
            row = (s["backend"], _device_label(s["device"], env))
            cell = self.cells.setdefault(row, {}).setdefault(
                s["rule"], {"checks": 0, "failures": 0, "expected": 0, "case": "", "replay": "", "size": -1})
            cell["checks"] += s["checks"]
            cell["failures"] += s["failures"]
            cell["expected"] += s.get("expected_failures", 0)
            size = s.get("failing_size", 0)
            if (s["failures"] or s.get("expected_failures")) and (cell["size"] < 0 or size <= cell["size"]):
                cell["case"], cell["replay"], cell["size"] = s["failing_case"], s["replay"], size
            st = self.stats.setdefault(row, {"max_ulp": None, "margin": None})
            if s["rule"] == axis_b.OUTPUT.id and s.get("max_ulp") is not None:
                st["max_ulp"] = max(st["max_ulp"] or 0, s["max_ulp"])
            if s.get("margin") is not None and not s["rule"].startswith("gradients."):
                st["margin"] = max(st["margin"] or 0.0, s["margin"])
        for nodeid, outcome in data.get("outcomes", {}).items():
            # A test that failed without a failing check (a crashed worker, an error in setup) still fails its
            # backend's row: under the rule it names, or under "errors".
            if outcome.get("outcome") not in ("failed", "error") or not outcome.get("backend"):
                continue
            row = (outcome["backend"], _device_label(outcome.get("device", ""), env))
            rule_id = outcome.get("rule") or ERRORS
            cell = self.cells.setdefault(row, {}).setdefault(
                rule_id, {"checks": 0, "failures": 0, "expected": 0, "case": "", "replay": "", "size": -1})
            if not cell["failures"]:
                cell["failures"] += 1
                cell["checks"] = max(cell["checks"], 1)
                cell["case"] = cell["case"] or f"{nodeid}: {outcome.get('reason', '')}"
                cell["replay"] = cell["replay"] or outcome.get("replay", "")
        for entry in data.get("not_run", []):
            self.not_run[(entry["backend"], _device_label(entry["device"], env))] = entry["reason"]

    def render(self, bench: dict[str, Any] | None = None, *, pick: list[str] | None = None,
               pictures: list[str] | None = None, command: str | None = None) -> str:
        """The matrix, after the "Pick a kernel" section (``pick``'s lines) where given, and the pictures'
        section (``pictures``) at the end. ``command``, where given, heads it: the one line that writes the
        file again, so that a matrix kept as evidence says how it was made."""
        rows: list[list[Any]] = []
        notes: list[str] = []
        rules = [r for r in ALL_RULES if any(r.id in cells for cells in self.cells.values())]
        if any(ERRORS in cells for cells in self.cells.values()):
            rules.append(Rule(ERRORS, "errors", "tests that failed without a failing check"))
        for row in sorted(self.cells):
            cells = self.cells[row]
            line = [row[0], row[1]]
            line += [_cell_text(row, r.id, cells.get(r.id), notes) for r in rules]
            st = self.stats.get(row, {})
            line.append("–" if st.get("max_ulp") is None else st["max_ulp"])
            line.append("–" if st.get("margin") is None else f"{st['margin']:.3g}")
            if bench is not None:
                line.append(_bandwidth(bench, row[0], row[1]))
            rows.append(line)
        for (backend, device), reason in sorted(self.not_run.items()):
            if (backend, device) not in self.cells:
                rows.append([backend, device, *(["not run"] * len(rules)), "–", "–",
                             *(["–"] if bench is not None else [])])
                notes.append(f"{backend} on {device} did not run: {reason}")
        headers = ["backend", "device", *(_column(r.id, r.title) for r in rules), "max ULP (B)", "margin"]
        if bench is not None:
            headers.append("fwd GB/s bf16 4096 | 128 (x copy)")
        heading = ["# Conformance matrix", "", *([f"Command: `{command}`", ""] if command else [])]
        out = [*heading, *(pick or []), "## Rules per backend and device", "",
               "Each cell: `ok N` (N checks, all passed), `FAIL [k]` (see note k), `xfail [k]` (a breach the "
               "known-failure manifest expects), `–` (not checked). max ULP is Axis-B output's worst, in the "
               "output dtype; margin is the worst error over its allowance across Axis-B and semantics "
               "(<= 1 passes).", "",
               tabulate([[md_cell(v) for v in row] for row in rows], headers, tablefmt="github"), ""]
        if notes:
            out += ["## Notes", "", *(f"{i}. {n}" for i, n in enumerate(notes, 1)), ""]
        out += ["## Sources", "", *(f"- {s}" for s in self.sources), ""]
        out += pictures or []
        return "\n".join(out)

def _cell_text(row: tuple[str, str], rule_id: str, cell: dict[str, Any] | None, notes: list[str]) -> str:
    """A matrix cell: ``ok N``, ``–`` when not checked, or ``FAIL [k]`` / ``xfail [k]`` with note k appended."""
    if cell is None:
        return "–"
    if not (cell["failures"] or cell["expected"]):
        return f"ok {cell['checks']}"
    notes.append(f"{md_cell(row[0])} on {row[1]}, `{rule_id}`: {cell['failures'] + cell['expected']} of "
                 f"{cell['checks']} checks failed"
                 + (" (expected by the manifest)" if not cell["failures"] else "")
                 + f"; minimal configuration {md_code(cell['case'])}; replay {md_code(cell['replay'])}")
    return f"{'xfail' if not cell['failures'] else 'FAIL'} [{len(notes)}]"


def _bandwidth(bench: dict[str, Any], backend: str, device: str) -> str:
    if not device.startswith("cuda"):
        return "–"
    parts = []
    for dim, rows in ((4096, 65536), (128, 2097152)):
        rec = next((r for r in bench.get("records", []) if _BENCH_ALIASES.get(r.get("backend"), r.get("backend"))
                    == backend
                    and r.get("kind", "forward") == "forward" and r.get("dim") == dim and r.get("rows") == rows
                    and r.get("dtype") in ("bfloat16", "bf16")), None)
        parts.append("–" if rec is None else f"{rec['gbps']:.0f} ({rec['gbps'] / rec['copy_gbps']:.2f})")
    return " | ".join(parts)


def _read_json(path: str | Path, what: str) -> Any:
    """``path``'s JSON; a ValueError that names the file and what it should be where it is not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not {what}: {exc}") from exc


def merge(paths: Sequence[str | Path], *, bench: str | Path | None = None, out: str | Path | None = None,
          command: str | None = None) -> str:
    """The merged matrix, opening with the same "Pick a kernel" section a single run's report has. With ``out``
    (where the matrix will be written), the pictures are drawn beside it."""
    matrix = Matrix()
    reports = []
    for path in paths:
        data = _read_json(path, "a JSON report (written with --report=PATH.json)")
        matrix.add_report(data, str(path))  # names the file where it is another JSON
        reports.append(data)
    bench_data = _read_json(bench, "a benchmark JSON (benchmarks/bench.py)") if bench else None
    records = merged(reports)
    pick = pick_markdown(records, bench_data, _md_table, md_cell,
                         details_at="the notes under the matrix below")
    pictures = None
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        pictures = pictures_lines(draw_pictures(records, bench_data, Path(out).parent, Path(out).stem))
    return matrix.render(bench_data, pick=pick, pictures=pictures, command=command)


def _command_line(argv: Sequence[str] | None) -> str:
    """The merge as a shell command, for the matrix's header."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["merge"]:
        args = args[1:]
    return shlex.join(["rmsnorm-conformance", "merge", *args])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rmsnorm-conformance merge",
                                     description="Merge JSON reports into one markdown conformance matrix.")
    m = parser
    m.add_argument("reports", nargs="+", help="JSON reports written with --report=PATH.json")
    m.add_argument("--bench", default=None, help="a benchmark JSON (benchmarks/bench.py) for the GB/s column")
    m.add_argument("--out", default=None, help="write the matrix here (default: print it)")
    args = parser.parse_args(argv)
    try:
        text = merge(args.reports, bench=args.bench, out=args.out, command=_command_line(argv))
    except (OSError, ValueError, KeyError) as exc:
        parser.error(str(exc))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8", errors="backslashreplace")
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0
