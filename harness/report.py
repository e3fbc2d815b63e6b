"""The tolerance report: collects every check's verdict and statistics, merges them across pytest-xdist
workers, and renders markdown, JSON and the terminal tables. It is written even when tests fail, and
says what did not run and why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from contract import AXIS_A_VARIANTS, TARGET_DIMS, rule

from .manifest import entry_status

FORMAT = "rmsnorm-conformance-report/1"
_TARGET_DIM_NAMES = {v: k for k, v in TARGET_DIMS.items()}


def dim_bucket(dim: int) -> str:
    """Target dims get their own rows; every other drawn dim shares one."""
    return str(dim) if dim in _TARGET_DIM_NAMES else "other"


@dataclass
class Check:
    """One comparison: which rule, on what, and how it came out."""

    backend: str
    device: str
    dtype: str
    dim: int
    rule: str
    passed: bool
    case: str = ""
    detail: str = ""
    replay: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    max_ulp: int | None = None
    margin: float | None = None
    expected: int = -1  # index of the known-failure manifest entry that covers this check, or -1
    size: int = 0  # elements of the case's batch: the smallest failing case is the one a report shows


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, float) and math.isnan(a):
        return a
    return max(a, b)


@dataclass
class Summary:
    """Every check of one (backend, device, dtype, dim bucket, rule), folded together."""

    backend: str
    device: str
    dtype: str
    dim: str
    rule: str
    checks: int = 0
    failures: int = 0
    expected_failures: int = 0  # failures a known-failure manifest lists: reported, not counted as FAIL
    max_abs: float | None = None
    max_rel: float | None = None
    max_ulp: int | None = None
    margin: float | None = None
    dims: list[int] = field(default_factory=list)
    # The smallest failing case seen (ties: the later, as Hypothesis shrinks toward later examples).
    failing_case: str = ""
    failing_detail: str = ""
    replay: str = ""
    failing_size: int = -1

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.backend, self.device, self.dtype, self.dim, self.rule)

    def add(self, check: Check) -> None:
        self.checks += 1
        if check.dim not in self.dims:
            self.dims.append(check.dim)
        self.max_abs = _max(self.max_abs, check.max_abs)
        self.max_rel = _max(self.max_rel, check.max_rel)
        self.max_ulp = _max(self.max_ulp, check.max_ulp)  # type: ignore[assignment]
        self.margin = _max(self.margin, check.margin)
        if not check.passed:
            if check.expected >= 0:
                self.expected_failures += 1
            else:
                self.failures += 1
            self._keep_smaller(check.case, check.detail, check.replay, check.size)

    def _keep_smaller(self, case: str, detail: str, replay: str, size: int) -> None:
        if self.failing_size < 0 or size <= self.failing_size:
            self.failing_case, self.failing_detail, self.replay, self.failing_size = case, detail, replay, size

    def merge(self, other: Summary) -> None:
        self.checks += other.checks
        self.failures += other.failures
        self.expected_failures += other.expected_failures
        self.dims += [d for d in other.dims if d not in self.dims]
        self.max_abs = _max(self.max_abs, other.max_abs)
        self.max_rel = _max(self.max_rel, other.max_rel)
        self.max_ulp = _max(self.max_ulp, other.max_ulp)  # type: ignore[assignment]
        self.margin = _max(self.margin, other.margin)
        if other.failures or other.expected_failures:
            self._keep_smaller(other.failing_case, other.failing_detail, other.replay, other.failing_size)


@dataclass
class Collector:
    """Everything a run learned, in a form that survives JSON (for xdist workers and merged reports)."""

    environment: dict[str, Any] = field(default_factory=dict)
    summaries: dict[tuple[str, ...], Summary] = field(default_factory=dict)
    # nodeid -> {"outcome", "reason", "replay"} for tests that did not pass
    outcomes: dict[str, dict[str, str]] = field(default_factory=dict)
    passed_tests: int = 0
    conformance_tests: int = 0
    not_run: list[dict[str, str]] = field(default_factory=list)
    # Known-failure manifest entries with how often each was breached and how often it passed.
    expected: list[dict[str, Any]] = field(default_factory=list)
    # Informational: how closely backends agree with each other on the same inputs.
    parity: list[dict[str, Any]] = field(default_factory=list)

    def add(self, check: Check) -> None:
        if 0 <= check.expected < len(self.expected):
            self.expected[check.expected]["passed" if check.passed else "breached"] += 1
        key = (check.backend, check.device, check.dtype, dim_bucket(check.dim), check.rule)
        if key not in self.summaries:
            self.summaries[key] = Summary(*key)
        self.summaries[key].add(check)

    def add_not_run(self, backend: str, device: str, reason: str) -> None:
        entry = {"backend": backend, "device": device, "reason": reason}
        if entry not in self.not_run:
            self.not_run.append(entry)

    @property
    def checks(self) -> int:
        return sum(s.checks for s in self.summaries.values())

    @property
    def failed_checks(self) -> int:
        return sum(s.failures for s in self.summaries.values())

    def verdict(self) -> str:
        failed = any(o["outcome"] in ("failed", "error") for o in self.outcomes.values())
        if failed or self.failed_checks:
            return "FAIL"
        if self.conformance_tests and not self.checks:
            return "NOT RUN"
        return "PASS"

    # --- serialisation -------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "verdict": self.verdict(),
            "environment": self.environment,
            "totals": {"checks": self.checks, "failed_checks": self.failed_checks,
                       "passed_tests": self.passed_tests, "conformance_tests": self.conformance_tests},
            "summaries": [asdict(s) for s in sorted(self.summaries.values(), key=lambda s: s.key)],
            "outcomes": self.outcomes,
            "not_run": self.not_run,
            "expected": self.expected,
            "parity": self.parity,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Collector:
        if data.get("format") != FORMAT:
            raise ValueError(f"not a conformance report: format {data.get('format')!r}, expected {FORMAT!r}")
        out = cls(environment=dict(data.get("environment", {})))
        out.merge_json(data)
        return out

    def merge_json(self, data: dict[str, Any]) -> None:
        """Fold in another collector's JSON (a worker's, or another run's report)."""
        for raw in data.get("summaries", []):
            s = Summary(**raw)
            if s.key in self.summaries:
                self.summaries[s.key].merge(s)
            else:
                self.summaries[s.key] = s
        self.outcomes.update(data.get("outcomes", {}))
        totals = data.get("totals", {})
        self.passed_tests += totals.get("passed_tests", 0)
        self.conformance_tests += totals.get("conformance_tests", 0)
        for entry in data.get("not_run", []):
            self.add_not_run(**entry)
        self.parity += data.get("parity", [])
        for i, entry in enumerate(data.get("expected", [])):
            if i < len(self.expected) and {**entry, "breached": 0, "passed": 0} == {
                    **self.expected[i], "breached": 0, "passed": 0}:
                self.expected[i]["breached"] += entry["breached"]
                self.expected[i]["passed"] += entry["passed"]
            else:
                self.expected.append(dict(entry))

    # --- rendering ---------------------------------------------------------------------------

    def write(self, path: str | Path) -> Path:
        """Write ``.json`` as JSON and anything else as markdown."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".json":
            path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")
        else:
            path.write_text(render_markdown(self))
        return path


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


def backend_rows(c: Collector) -> list[list[Any]]:
    by: dict[tuple[str, str], list[Summary]] = {}
    for s in c.summaries.values():
        by.setdefault((s.backend, s.device), []).append(s)
    rows = []
    for (backend, device), items in sorted(by.items()):
        failed_rules = sorted({s.rule for s in items if s.failures})
        expected_rules = sorted({s.rule for s in items if s.expected_failures} - set(failed_rules))
        note = ", ".join(failed_rules) or "–"
        if expected_rules:
            note += " (expected: " + ", ".join(expected_rules) + ")"
        rows.append([backend, device, sum(s.checks for s in items), sum(s.failures for s in items),
                     "FAIL" if failed_rules else "PASS", note])
    for entry in c.not_run:
        if (entry["backend"], entry["device"]) not in by:
            rows.append([entry["backend"], entry["device"], 0, 0, "NOT RUN", entry["reason"]])
    return rows


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
    rows += [[f"{e['backend']} on {e['device']}", e["reason"], "all"] for e in c.not_run]
    return rows


def expected_rows(c: Collector) -> list[list[Any]]:
    return [[e["backend"], e["device"], e.get("dtype", "*"), e["rule"], e["reason"], e["breached"], e["passed"],
             entry_status(e["breached"], e["passed"])] for e in c.expected]


def parity_rows(c: Collector) -> list[list[Any]]:
    folded: dict[tuple[str, ...], list[Any]] = {}
    for p in c.parity:
        key = (p["device"], p["dtype"], str(p["dim"]), p["pair"])
        row = folded.setdefault(key, [*key, 0, 0, 0])
        row[4] += p["equal"]
        row[5] += p["total"]
        row[6] = max(row[6], p["max_ulp"])
    return [[*k, f"{r[4]} / {r[5]}", r[6]] for k, r in sorted(folded.items())]


def failures(c: Collector) -> list[tuple[str, dict[str, str]]]:
    return [(nodeid, o) for nodeid, o in sorted(c.outcomes.items()) if o["outcome"] in ("failed", "error")]


def failure_lines(c: Collector, *, markdown: bool) -> list[str]:
    """Failures as a list, not a table: the replay command must survive copy and paste whole."""
    lines = []
    for nodeid, o in failures(c):
        if markdown:
            lines.append(f"- `{nodeid}` ({o['outcome']}): {o.get('reason', '')}")
            if o.get("replay"):
                lines.append(f"  - replay: `{o['replay']}`")
        else:
            lines.append(f"{o['outcome'].upper()} {nodeid}")
            lines.append(f"  {o.get('reason', '')}")
            if o.get("replay"):
                lines.append(f"  replay: {o['replay']}")
    return lines


TABLES: tuple[tuple[str, list[str], Any], ...] = (
    ("Verdict per backend and device",
     ["backend", "device", "checks", "failed", "verdict", "failed rules / reason"], backend_rows),
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
    ("Known failures (manifest)", ["backend", "device", "dtype", "rule", "reason", "breached", "passed", "status"],
     expected_rows),
)
FAILURES_TITLE = "Failures and how to replay them (from the project root)"


def environment_rows(c: Collector) -> list[list[Any]]:
    return [[k, v] for k, v in c.environment.items()]


def render_markdown(c: Collector) -> str:
    lines = [f"# RMSNorm conformance report: {c.verdict()}", "",
             f"{c.checks} checks, {c.failed_checks} failed; {c.passed_tests} tests passed, "
             f"{sum(o['outcome'] in ('failed', 'error') for o in c.outcomes.values())} failed, "
             f"{sum(o['outcome'] == 'skipped' for o in c.outcomes.values())} skipped.", "",
             "## Environment", "", tabulate(environment_rows(c), ["", ""], tablefmt="github"), ""]
    for title, headers, rows_of in TABLES:
        rows = rows_of(c)
        lines += [f"## {title}", ""]
        lines += [tabulate(rows, headers, tablefmt="github") if rows else "(none)", ""]
    lines += [f"## {FAILURES_TITLE}", "", *(failure_lines(c, markdown=True) or ["(none)"]), ""]
    lines += ["margin = worst error / allowed error (<= 1 passes); ULPs are counted in the output dtype "
              "against the reference rounded to it.", ""]
    return "\n".join(lines)


def render_terminal(c: Collector, *, verbose: bool = True) -> Iterable[str]:
    yield f"RMSNorm conformance: {c.verdict()} ({c.checks} checks, {c.failed_checks} failed)"
    env = c.environment
    yield ("contract {} profile {} | hypothesis profile {} | torch {} | triton {}".format(
        env.get("contract version"), env.get("contract profile"), env.get("hypothesis profile"),
        env.get("torch"), env.get("triton")))
    for title, headers, rows_of in TABLES:
        if not verbose and title.startswith("Tolerance"):
            continue
        rows = rows_of(c)
        if rows:
            yield ""
            yield title
            yield tabulate(rows, headers, tablefmt="simple", maxcolwidths=60)
    lines = failure_lines(c, markdown=False)
    if lines:
        yield ""
        yield FAILURES_TITLE
        yield from lines


if __name__ == "__main__":
    import sys

    from .matrix import main

    sys.exit(main())
