"""The records of a run: every check's verdict and statistics, folded per rule, and their JSON form.

Workers and merged runs exchange these as JSON; ``render`` turns them into markdown and terminal tables.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ...contract import TARGET_DIMS

FORMAT = "rmsnorm-conformance-report/1"
# The JSON Schema of that format, shipped beside this module; CHANGELOG.md records each release's changes to it.
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")
# How checks read that could not run because another backend's device fault took the device: never FAIL. A "Did
# not run" entry whose reason starts so makes its backend's row, and the run, INCOMPLETE rather than PASS.
DEVICE_LOST = "not run: the device was lost"
# How a check reads that could not run because a backend left this process in a state that could not be put back
# (a resource limit lowered past what the process may raise again): its later tests run in a fresh process.
PROCESS_LOST = "not run: the process was left unusable"
_TARGET_DIM_NAMES = {v: k for k, v in TARGET_DIMS.items()}
# The rule a test failed by a refused input (under --strict-interface) is recorded under: no contract rule's.
REFUSED_RULE = "refused"


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
    severity: str = "numerics"  # the rule's severity (contract.SEVERITIES)
    gating: bool = True  # does a failure fail the run (numerics, or interface under --strict-interface)
    ulp_hist: list[int] | None = None  # Axis-B only: elements per ULP-error bin (comparison.ulp_histogram)
    diagnosis: dict[str, Any] | None = None  # a bitwise breach's diagnosis (checking/diagnosis.py), where it has one


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
    warnings: int = 0  # failures of interface rules that do not gate this run: reported, not counted as FAIL
    severity: str = "numerics"
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
    # For the report's pictures, kept small: elements per ULP-error bin summed over the checks (Axis-B), and the
    # worst margin per drawn dim ({"4096": 0.4, ...}; JSON keys are strings).
    ulp_hist: list[int] = field(default_factory=list)
    dim_margins: dict[str, float] = field(default_factory=dict)
    # The diagnosis of a bitwise breach (checking/diagnosis.py), kept with the smallest failing case that has one.
    diagnosis: dict[str, Any] | None = None

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
        self.severity = check.severity
        if check.ulp_hist:
            self._add_hist(check.ulp_hist)
        if check.margin is not None:
            key = str(check.dim)
            self.dim_margins[key] = _max(self.dim_margins.get(key), check.margin)  # type: ignore[assignment]
        if not check.passed:
            if check.expected >= 0:
                self.expected_failures += 1
            elif not check.gating:
                self.warnings += 1
            else:
                self.failures += 1
            self._keep_smaller(check.case, check.detail, check.replay, check.size)
            if check.diagnosis is not None:
                self.diagnosis = check.diagnosis

    def _add_hist(self, hist: list[int]) -> None:
        if len(self.ulp_hist) < len(hist):
            self.ulp_hist += [0] * (len(hist) - len(self.ulp_hist))
        for i, n in enumerate(hist):
            self.ulp_hist[i] += n

    def _keep_smaller(self, case: str, detail: str, replay: str, size: int) -> None:
        if self.failing_size < 0 or size <= self.failing_size:
            self.failing_case, self.failing_detail, self.replay, self.failing_size = case, detail, replay, size

    def merge(self, other: Summary) -> None:
        self.checks += other.checks
        self.failures += other.failures
        self.expected_failures += other.expected_failures
        self.warnings += other.warnings
        self.severity = other.severity
        self.dims += [d for d in other.dims if d not in self.dims]
        self.max_abs = _max(self.max_abs, other.max_abs)
        self.max_rel = _max(self.max_rel, other.max_rel)
        self.max_ulp = _max(self.max_ulp, other.max_ulp)  # type: ignore[assignment]
        self.margin = _max(self.margin, other.margin)
        if other.ulp_hist:
            self._add_hist(other.ulp_hist)
        for key, value in other.dim_margins.items():
            self.dim_margins[key] = _max(self.dim_margins.get(key), value)  # type: ignore[assignment]
        if other.failures or other.expected_failures or other.warnings:
            self._keep_smaller(other.failing_case, other.failing_detail, other.replay, other.failing_size)
            self.diagnosis = self.diagnosis or other.diagnosis


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
    # --strict-known-failures: an entry the run checked and never saw breached fails the run (a strict xpass).
    strict_known_failures: bool = False
    # Informational: how closely backends agree with each other on the same inputs.
    parity: list[dict[str, Any]] = field(default_factory=list)
    # Why the run did not finish ("" if it did), the tests it left running, and how many never started.
    incomplete: str = ""
    unfinished: list[str] = field(default_factory=list)
    not_started: int = 0
    # Backends the user named with --backend: each must run at least one check somewhere.
    named_backends: list[str] = field(default_factory=list)
    # A usage error that stopped the run before it started ("" if none).
    usage_error: str = ""
    # Informational: per backend, device, dtype and entry point, how many rows match each rounding class.
    rounding: list[dict[str, Any]] = field(default_factory=list)
    # What the run selected, and under "full_gate_adds" what the full gate would add ({} : not known).
    selection: dict[str, Any] = field(default_factory=dict)
    # Inputs a backend raised on without declaring that it refuses them (checking/refusals.py), folded per
    # (backend, device, dtype, entry point, what stood out, exception): neither passed nor failed checks.
    refused: list[dict[str, Any]] = field(default_factory=list)
    # Cases tried again after running out of memory (checking/checks.py), per (backend, device, dtype, rule): what
    # they finally gave is in the checks; a kernel that needs more memory on a first try than after is worth a look.
    retried: list[dict[str, Any]] = field(default_factory=list)

    def add_retried(self, backend: str, device: str, dtype: str, rule: str, count: int = 1) -> None:
        """Count one case (or ``count``) tried again after running out of memory."""
        for have in self.retried:
            if (have["backend"], have["device"], have["dtype"], have["rule"]) == (backend, device, dtype, rule):
                have["count"] += count
                return
        self.retried.append({"backend": backend, "device": device, "dtype": dtype, "rule": rule, "count": count})

    def add(self, check: Check) -> None:
        if 0 <= check.expected < len(self.expected):
            self.expected[check.expected]["passed" if check.passed else "breached"] += 1
        key = (check.backend, check.device, check.dtype, dim_bucket(check.dim), check.rule)
        if key not in self.summaries:
            self.summaries[key] = Summary(*key)
        self.summaries[key].add(check)

    def add_not_run(self, backend: str, device: str, reason: str, limits: str = "") -> None:
        """``limits``: the backend's declared limits, where they are the reason (a case outside them)."""
        entry = {"backend": backend, "device": device, "reason": reason, **({"limits": limits} if limits else {})}
        if entry not in self.not_run:
            self.not_run.append(entry)

    def add_refused(self, entry: dict[str, Any]) -> None:
        """Fold one refused input in: counted with its kind, the smallest case kept, gating if any was."""
        key = _refused_key(entry)
        for have in self.refused:
            if _refused_key(have) == key:
                have["count"] += entry.get("count", 1)
                have["gating"] = bool(have["gating"] or entry["gating"])
                if entry.get("size", 0) < have.get("size", 0):
                    have.update({k: entry[k] for k in ("input", "exception", "case", "replay", "size", "rule")})
                return
        self.refused.append({**entry, "count": entry.get("count", 1)})

    def stale_entries(self) -> list[dict[str, Any]]:
        """Known-failure entries that fail the run: under --strict-known-failures, those checked and never breached."""
        return [e for e in self.expected if e["passed"] and not e["breached"]] if self.strict_known_failures else []

    def gating_refusals(self) -> list[dict[str, Any]]:
        return [e for e in self.refused if e["gating"]]

    @property
    def checks(self) -> int:
        return sum(s.checks for s in self.summaries.values())

    @property
    def failed_checks(self) -> int:
        return sum(s.failures for s in self.summaries.values())

    @property
    def warned_checks(self) -> int:
        return sum(s.warnings for s in self.summaries.values())

    def checks_of(self, backend: str) -> int:
        """Checks a backend took part in: its own, and those of parity pairs ("a=b") it is a side of."""
        return sum(s.checks for s in self.summaries.values()
                   if s.backend == backend or backend in s.backend.split("="))

    def named_but_not_run(self) -> list[str]:
        """Backends the user named that ran no check on any device: not kept from it by a lost device, and not
        failing a test of their own either (one that crashed its process or raised in its first test ran, and
        failed; its row says FAIL, not NOT RUN)."""
        lost = {e["backend"] for e in self.device_lost()}
        failed = {o.get("backend") for o in self.outcomes.values() if o["outcome"] in ("failed", "error")}
        return [name for name in self.named_backends
                if not self.checks_of(name) and name not in lost and name not in failed]

    def device_lost(self) -> list[dict[str, str]]:
        """The "Did not run" entries of checks a lost device (or a process left unusable) kept from running."""
        return [e for e in self.not_run if e["reason"].startswith((DEVICE_LOST, PROCESS_LOST))]

    def failed_tests(self) -> list[str]:
        return [nodeid for nodeid, o in self.outcomes.items() if o["outcome"] in ("failed", "error")]

    @property
    def partial(self) -> bool:
        """Did the run leave out rules, dtypes, devices, tests or thresholds the full gate checks?"""
        return bool(self.selection.get("full_gate_adds"))

    def pass_scope(self, backend: str | None = None) -> str:
        """What a pass of this run (of ``backend``'s rows, where one is named) is short of the gate: the sweep's
        name where the sweep is not the gate (``smoke``), ``partial`` where the run left out what the gate checks;
        else empty."""
        if self.selection.get("sweep_is_gate") is False:
            return str(self.selection.get("sweep"))
        return "partial" if self.partial else ""

    def target_dims(self) -> dict[str, int]:
        """The dims a backend must be checked at to pass (name -> dim): the run's --target-dims, else the
        contract's."""
        return dict(self.selection.get("target_dims") or TARGET_DIMS)

    def coverage_gaps(self, backend: str | None = None) -> dict[str, list[str]]:
        """Per backend (``backend`` alone, where named), the target dims it left unchecked and why: its declared
        limits keep the dim out, or it refused an input at that dim (a contiguous one: the dim was what it refused)
        and no check of it ran there. A backend with any cannot pass: the run reads INCOMPLETE, naming them."""
        gaps: dict[str, list[str]] = {}
        for name, missing in (self.selection.get("target_gaps") or {}).items():
            gaps.setdefault(name, []).extend(f"{gap} (declared limits)" for gap in missing)
        checked = {(s.backend, d) for s in self.summaries.values() if s.checks for d in s.dims}
        for e in self.refused:
            for label, dim in self.target_dims().items():
                gap = f"{label} {dim} (refused)"
                if (e["feature"] == f"dim {dim}" and (e["backend"], dim) not in checked
                        and gap not in gaps.get(e["backend"], [])):
                    gaps.setdefault(e["backend"], []).append(gap)
        return {name: found for name, found in gaps.items() if backend in (None, name)}

    def verdict_label(self) -> str:
        """The verdict as a report's headline shows it: a pass of a selection reads ``PASS (partial)``, and a pass
        under a sweep that is not the gate reads ``PASS (smoke)``, never ``PASS``; a run that left a target dim
        unchecked reads ``INCOMPLETE (not checked at hidden 4096 (refused))``."""
        verdict, scope = self.verdict(), self.pass_scope()
        gaps = [g for found in self.coverage_gaps().values() for g in found]
        if verdict == "INCOMPLETE" and gaps:
            return f"{verdict} (not checked at {', '.join(dict.fromkeys(gaps))})"
        return f"{verdict} ({scope})" if verdict == "PASS" and scope else verdict

    def verdict(self) -> str:
        """PASS only when the run finished, nothing failed, and every named backend ran checks.

        FAIL: a gating check failed, or a test failed or raised, whether or not the run finished (a finished run
        cannot undo a failure), or, under --strict-known-failures, a known-failure entry no longer matched;
        INCOMPLETE: interrupted, stopped early or killed before the end with nothing
        failed by then, or checks left unrun because a device fault lost the device (the faulting backend's own
        row still reads FAIL), or a backend that left a target dim unchecked (``coverage_gaps``: refused or
        declared away); NOT RUN: a named backend ran nothing, or no conformance check ran at all.
        """
        if self.usage_error:
            return "NOT RUN"
        if self.device_lost():  # another backend took the device: what it left unrun makes the run unfinished
            return "INCOMPLETE"
        if self.failed_tests() or self.failed_checks or self.gating_refusals() or self.stale_entries():
            return "FAIL"
        if self.incomplete:
            return "INCOMPLETE"
        if self.named_but_not_run() or (self.conformance_tests and not self.checks):
            return "NOT RUN"
        if self.coverage_gaps():  # a target dim left unchecked: nothing says how it does on the model's shapes
            return "INCOMPLETE"
        return "PASS"

    # --- serialisation -------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "verdict": self.verdict(),
            "verdict_label": self.verdict_label(),
            "environment": self.environment,
            "complete": not self.incomplete and not self.usage_error,
            "partial": self.partial,
            "selection": self.selection,
            "usage_error": self.usage_error,
            "incomplete": self.incomplete,
            "unfinished": self.unfinished,
            "not_started": self.not_started,
            "named_backends": self.named_backends,
            "named_but_not_run": self.named_but_not_run(),
            "totals": {"checks": self.checks, "failed_checks": self.failed_checks,
                       "warned_checks": self.warned_checks, "failed_tests": len(self.failed_tests()),
                       "passed_tests": self.passed_tests, "conformance_tests": self.conformance_tests},
            "summaries": [_finite_json(_summary_dict(s))
                          for s in sorted(self.summaries.values(), key=lambda s: s.key)],
            "outcomes": self.outcomes,
            "not_run": self.not_run,
            "expected": self.expected,
            "strict_known_failures": self.strict_known_failures,
            "parity": self.parity,
            "rounding": self.rounding,
            "refused": self.refused,
            "retried": self.retried,
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
            s = Summary(**_from_finite_json(raw))
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
        if data.get("incomplete"):
            self.incomplete = "; ".join(filter(None, (self.incomplete, data["incomplete"])))
        self.unfinished += [n for n in data.get("unfinished", []) if n not in self.unfinished]
        self.not_started += data.get("not_started", 0)
        self.named_backends += [n for n in data.get("named_backends", []) if n not in self.named_backends]
        self.rounding += data.get("rounding", [])
        for entry in data.get("retried", []):
            self.add_retried(**entry)
        for entry in data.get("refused", []):
            self.add_refused(dict(entry))
        if data.get("selection"):
            self._merge_selection(data["selection"])
        self.strict_known_failures = self.strict_known_failures or bool(data.get("strict_known_failures"))
        for i, entry in enumerate(data.get("expected", [])):
            if i < len(self.expected) and {**entry, "breached": 0, "passed": 0} == {
                    **self.expected[i], "breached": 0, "passed": 0}:
                self.expected[i]["breached"] += entry["breached"]
                self.expected[i]["passed"] += entry["passed"]
            else:
                self.expected.append(dict(entry))

    def _merge_selection(self, other: dict[str, Any]) -> None:
        """Another run's selection folded in: what either left out, and a smoke run makes the merge one."""
        adds = self.selection.get("full_gate_adds", [])
        self.selection = {**other, **self.selection,
                          "full_gate_adds": adds + [a for a in other.get("full_gate_adds", []) if a not in adds],
                          "target_gaps": {**other.get("target_gaps", {}), **self.selection.get("target_gaps", {})}}
        if other.get("sweep_is_gate") is False:
            self.selection.update(sweep=other.get("sweep"), sweep_is_gate=False)


def _refused_key(entry: dict[str, Any]) -> tuple[str, ...]:
    """One kind of refusal: the exception's type, not its words (which often name the case's shape)."""
    return (entry["backend"], entry["device"], entry["dtype"], entry["entry"], entry["feature"],
            entry["exception"].split(":", 1)[0])


# JSON has no Infinity or NaN (strict parsers reject Python's extension): non-finite statistics travel as
# the strings "inf", "-inf" and "nan", and come back as floats.
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_STAT_FIELDS = ("max_abs", "max_rel", "max_ulp", "margin")


def finite_tree(value: Any) -> Any:
    """``value`` (dicts, lists, numbers) with every non-finite float as the string "inf", "-inf" or "nan":
    strict JSON has no literal for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: finite_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_tree(v) for v in value]
    return value


_SUMMARY_FIELDS = tuple(f.name for f in fields(Summary))


def _summary_dict(s: Summary) -> dict[str, Any]:
    """``dataclasses.asdict(s)`` without its deep copy: a summary's values are numbers and strings, lists of them
    and one flat dict, copied one level. The report is rendered at every test's start (``reporter.py``), and
    asdict's copy, element by element in Python, was most of that."""
    out = {}
    for name in _SUMMARY_FIELDS:
        value = getattr(s, name)
        out[name] = list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value
    return out


def _finite_json(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    for key in (*_STAT_FIELDS, "dim_margins"):
        if key in out:
            out[key] = finite_tree(out[key])
    return out


def _from_finite_json(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    for key in _STAT_FIELDS:
        if isinstance(out.get(key), str):
            out[key] = _NONFINITE[out[key]]
    if out.get("dim_margins"):
        out["dim_margins"] = {k: _NONFINITE[v] if isinstance(v, str) else v for k, v in out["dim_margins"].items()}
    return out


# How many refused dims a report names before it counts the rest.
DIMS_SHOWN = 6


def fold_refused(kinds: Iterable[tuple[str, str]]) -> list[str]:
    """Refused kinds of input, ``(feature, exception type)`` (features as harness/running/limits.py's
    ``refused_feature`` names them), as a reader sees them: every ``dim N`` of one exception type in one entry
    ("dims 1, 3, 7, 33, 63, 65 and 21 more (DSLRuntimeError)"), so that a kernel that refuses odd dims reads as
    refusing one kind of input, not one per dim it met; the rest as they are."""
    dims: dict[str, set[int]] = {}
    out: list[str] = []
    for feature, exc in kinds:
        size = feature.removeprefix("dim ")
        if feature.startswith("dim ") and size.isdigit():
            dims.setdefault(exc, set()).add(int(size))
        else:
            out.append(f"{feature} ({exc})" if exc else feature)
    for exc, found in dims.items():
        ordered = sorted(found)
        shown = ", ".join(map(str, ordered[:DIMS_SHOWN]))
        if len(ordered) > DIMS_SHOWN:
            shown += f" and {len(ordered) - DIMS_SHOWN} more"
        label = f"{'dims' if len(ordered) > 1 else 'dim'} {shown}"
        out.append(f"{label} ({exc})" if exc else label)
    return list(dict.fromkeys(out))

