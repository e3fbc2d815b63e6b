"""The report's first section, "Pick a kernel": one row per backend and device with what a reader choosing a
kernel needs, best choice first, and the breaches grouped by severity below it.

A row holds the numerics verdict, the interface rules breached, the rounding class the bits follow, the
backends it is bitwise equal to, the worst Axis-B margin per dtype and, from a benchmark JSON
(``benchmarks/bench.py``), the forward's share of a device copy's bandwidth at the target shapes and its
latency at 1-256 rows against ``F.rms_norm``. Rows are sorted by ``SORT_ORDER``.

The single-run report and ``rmsnorm-conformance merge`` both build this section from a ``Collector`` whose
devices carry their labels (``labelled``, ``merged``), so the two read the same.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ...contract import rule
from ...contract.families import parity
from ..vocabulary.records import REFUSED_RULE as REFUSED
from ..vocabulary.records import Collector, fold_refused

VERDICT_ORDER = ("PASS", "XFAIL", "INCOMPLETE", "FAIL", "NOT RUN")
SORT_ORDER = ("numerics verdict (PASS, then XFAIL: only breaches the known-failure manifest accepts, then "
              "INCOMPLETE: nothing failed but checks did not run, the run having ended early or the device been lost, "
              "then FAIL, then NOT RUN); then fewer interface rules breached; then fewer kinds of input refused; "
              "then more bitwise-equal partner backends "
              "(itself on another device not counted); then rows with speed measured on their own device type, "
              "then measured elsewhere (†), then unmeasured; then more of a device copy's bandwidth (mean over "
              "the target shapes); then lower latency against F.rms_norm; then the lower worst margin")
# Reports show dtypes in the order readers pick them.
DTYPE_ORDER = ("bfloat16", "float16", "float32")
SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# The benchmark's names for the peers it times, as the adapters name them.
BENCH_ALIASES = {"F.rms_norm": "torch_rms_norm", "torch.compile(seed)": "torch_compile"}
TARGET_BENCH_DIMS = (4096, 128)  # hidden size and QK-norm head_dim (contract.TARGET_DIMS)
LATENCY_MAX_ROWS = 256
DETAIL_CHARS = 200


def device_label(device: str, environment: dict[str, Any]) -> str:
    """GPUs of one model share a label: under pytest-xdist each worker's tests land on its own GPU, and a
    reader picks a kernel for a GPU model, not for ``cuda:1``. A pair's ``cpu/cuda:0`` is labelled per side."""
    if "/" in device:
        return "/".join(device_label(part, environment) for part in device.split("/"))
    name = environment.get(f"device {device}")
    if name is None and ":" not in device:
        # An index-less "cuda" (a test id's device: each xdist worker's own GPU) takes the model of the GPUs
        # the run saw, when they are all one model.
        models = {v for k, v in environment.items() if k.startswith(f"device {device}:")}
        name = models.pop() if len(models) == 1 else None
    return f"{device.split(':')[0]} ({name})" if name and device != "cpu" else device


def relabeled(data: dict[str, Any]) -> dict[str, Any]:
    """A JSON report with every device replaced by its label (``device_label``) under that report's own
    environment: reports from several machines then fold into one ``Collector`` by GPU model."""
    env = data.get("environment", {})

    def lab(record: dict[str, Any]) -> dict[str, Any]:
        return {**record, "device": device_label(record["device"], env)} if record.get("device") else record

    out = dict(data)
    for key in ("summaries", "not_run", "parity", "rounding", "refused"):
        out[key] = [lab(r) for r in data.get(key, [])]
    out["outcomes"] = {k: lab(o) for k, o in data.get("outcomes", {}).items()}
    return out


def labelled(c: Collector, data: dict[str, Any] | None = None) -> Collector:
    """A copy of one run's records with device labels, for this section and the pictures. ``data``: ``c.to_json()``
    where the caller has it already (a JSON report renders it anyway; the report is rewritten at each test's start)."""
    out = Collector.from_json(relabeled(c.to_json() if data is None else data))
    out.environment = dict(c.environment)
    return out


def merged(reports: Iterable[dict[str, Any]]) -> Collector:
    """Several runs' JSON reports folded into one labelled ``Collector`` (for ``merge``)."""
    out = Collector()
    for data in reports:
        out.merge_json(relabeled(data))
    return out


# --- the benchmark -------------------------------------------------------------------------------------------


@dataclass
class Speed:
    """One backend's figures from a benchmark JSON."""

    copy_fraction: dict[str, float] = field(default_factory=dict)  # "4096" -> forward GB/s over copy GB/s
    shapes: dict[str, str] = field(default_factory=dict)  # "4096" -> "65536x4096": the shape measured
    latency: tuple[float, float] | None = None  # min, max of its time over F.rms_norm's at 1-256 rows

    def mean_fraction(self) -> float | None:
        return statistics.fmean(self.copy_fraction.values()) if self.copy_fraction else None

    def mean_latency(self) -> float | None:
        return statistics.fmean(self.latency) if self.latency else None


def bench_device(bench: dict[str, Any]) -> str:
    """The labelled device a benchmark ran on ("cuda (NVIDIA H200)"), from its environment; "" if unnamed."""
    env = bench.get("environment", {})
    for key in env:
        if key.startswith("device "):
            return device_label(key.removeprefix("device "), env)
    return ""


def bench_dtype(bench: dict[str, Any]) -> str:
    """bf16 where the benchmark timed it (what models run), else the first dtype it timed."""
    dtypes = [r.get("dtype") for r in bench.get("records", []) if r.get("kind", "forward") == "forward"]
    return "bfloat16" if "bfloat16" in dtypes else next((d for d in dtypes if d), "")


def bench_speeds(bench: dict[str, Any]) -> dict[str, Speed]:
    """Per backend (adapters by their harness names): forward fraction of copy bandwidth at the largest batch
    timed for each target dim, and latency at up to 256 rows relative to F.rms_norm in the same run."""
    dtype = bench_dtype(bench)
    speeds: dict[str, Speed] = {}
    largest: dict[tuple[str, int], int] = {}
    ratios: dict[str, list[float]] = {}
    for r in bench.get("records", []):
        name = BENCH_ALIASES.get(r.get("backend", ""), r.get("backend", ""))
        if not name or name == "copy" or r.get("dtype") != dtype or r.get("variant", "rms_norm") != "rms_norm":
            continue
        kind, dim, rows = r.get("kind", "forward"), r.get("dim"), r.get("rows", 0)
        if kind == "forward" and dim in TARGET_BENCH_DIMS and r.get("gbps") and r.get("copy_gbps"):
            if rows >= largest.get((name, dim), -1):
                largest[(name, dim)] = rows
                speed = speeds.setdefault(name, Speed())
                speed.copy_fraction[str(dim)] = r["gbps"] / r["copy_gbps"]
                speed.shapes[str(dim)] = f"{rows}x{dim}"
        elif kind == "latency" and rows <= LATENCY_MAX_ROWS:
            ratio = r.get("ratio_to_rms_norm")
            if ratio is None and r.get("us") and r.get("rms_norm_us"):
                ratio = r["us"] / r["rms_norm_us"]
            if ratio is not None:
                ratios.setdefault(name, []).append(float(ratio))
    for name, values in ratios.items():
        speeds.setdefault(name, Speed()).latency = (min(values), max(values))
    return speeds


# --- the rows ------------------------------------------------------------------------------------------------


def _severity(rule_id: str) -> str:
    if rule_id == REFUSED:  # a test failed by a refusal under --strict-interface (checking/refusals.py)
        return "refused"
    try:
        return rule(rule_id).severity
    except KeyError:  # "errors", or a rule of a newer contract: a failure of a test gates
        return "numerics"


def _x_dtype(label: str) -> str:
    return label.split("-w_")[0]


def _is_pair(backend: str) -> bool:
    return "=" in backend


@dataclass
class PickRow:
    """What a reader needs about one backend on one device to choose it or not."""

    backend: str
    device: str
    verdict: str
    checks: int
    numerics_breached: list[str]  # numerics rules failed (or, for XFAIL, breached as the manifest expects)
    interface_breached: list[str]  # interface rules breached (warnings, or failures under --strict-interface)
    rounding: str
    partners: list[str]  # backends bitwise equal to this one on the same inputs ("name" or "name@device")
    required_partners: list[str] = field(default_factory=list)  # of those, checked by --require-parity
    unequal_required: list[str] = field(default_factory=list)  # required pairs that differ, and by how much
    margins: dict[str, float] = field(default_factory=dict)  # x dtype -> worst Axis-B margin
    speed: Speed | None = None
    speed_elsewhere: bool = False  # the benchmark ran on another device type than this row's
    declared_limits: str = ""  # the limits it declares, where cases outside them were not run
    refused: list[str] = field(default_factory=list)  # kinds of input it raised on undeclared: "strided weight (…)"
    scope: str = ""  # what its run's pass is short of the gate ("smoke", "partial"): a PASS reads "PASS (smoke)"

    @property
    def numerics(self) -> str:
        """The verdict as the table shows it: a pass of a run short of the gate says so."""
        return f"{self.verdict} ({self.scope})" if self.verdict in ("PASS", "INCOMPLETE") and self.scope \
            else self.verdict

    @property
    def limits(self) -> str:
        """Its limits as a reader sees them: what it declares, then what it was seen to refuse."""
        parts = ([f"declares {self.declared_limits}"] if self.declared_limits else []) + (
            [f"refused: {', '.join(self.refused)}"] if self.refused else [])
        return "; ".join(parts)

    def partner_backends(self) -> int:
        """Other backends this one is bitwise equal to: itself on another device (``name@cpu``) is no choice a
        reader makes, so it does not lift a row above a kernel with as many real partners."""
        return len({p.split("@", 1)[0] for p in self.partners} - {self.backend})

    def sort_key(self) -> tuple[Any, ...]:
        """The documented order (``SORT_ORDER``): best choice first."""
        fraction = self.speed.mean_fraction() if self.speed else None
        latency = self.speed.mean_latency() if self.speed else None
        return (VERDICT_ORDER.index(self.verdict), len(self.interface_breached), len(self.refused),
                -self.partner_backends(),
                2 if fraction is None else int(self.speed_elsewhere), -fraction if fraction is not None else 1.0,
                latency if latency is not None else float("inf"),
                max(self.margins.values(), default=float("inf")), self.backend, self.device)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["limits"] = self.limits
        data["speed"] = None if self.speed is None else {
            "copy_fraction": self.speed.copy_fraction, "shapes": self.speed.shapes,
            "latency_vs_rms_norm": list(self.speed.latency) if self.speed.latency else None}
        data["margins"] = {k: v if v == v and abs(v) != float("inf") else str(v) for k, v in self.margins.items()}
        return data


def _rounding_label(c: Collector, backend: str, device: str) -> str:
    """The rounding class the forward's bits follow, over the dtypes where the classes differ."""
    per_dtype: dict[str, dict[str, int]] = {}
    declared, seen = "", False
    for r in c.rounding:
        if r["backend"] != backend or r["device"] != device or r["variant"] != "forward":
            continue
        seen = True
        declared = declared or r.get("declared", "")
        if not r["distinguishable"]:
            continue
        counts = per_dtype.setdefault(_x_dtype(r["dtype"]), {})
        for name, n in r["matches"].items():
            counts[name] = counts.get(name, 0) + n
    if not seen:
        return "not checked"
    if not per_dtype:
        return "indistinguishable (fp32 only)"
    follows = {}
    for dtype, counts in per_dtype.items():
        best = max(counts, key=lambda k: counts[k]) if counts else ""
        follows[dtype] = best if counts.get(best) else "none"
    classes = set(follows.values())
    if len(classes) == 1:
        (name,) = classes
        return name + (" (declared)" if declared == name else f" (declares {declared})" if declared else "")
    return "; ".join(f"{SHORT_DTYPE.get(d, d)} {n}" for d, n in sorted(follows.items()))


@dataclass
class ParityEvidence:
    """What a run saw of two backends' bits on the same inputs: the parity gate's checks (--require-parity,
    --modes) and the cross-backend parity rows (plain random rows of a few shapes)."""

    gate_checks: int = 0
    gate_differ: int = 0
    rows: int = 0
    equal_rows: int = 0

    @property
    def equal(self) -> bool:
        return bool(self.gate_checks or self.rows) and not self.gate_differ and self.equal_rows == self.rows

    def describe(self) -> str:
        """Why two backends are not partners, in a few words."""
        parts = []
        if self.gate_differ:
            parts.append(f"{self.gate_differ} of {self.gate_checks} required checks differ")
        if self.rows:
            parts.append(f"{self.equal_rows / self.rows:.0%} of plain rows equal")
        return "; ".join(parts)


def _pair_evidence(c: Collector) -> dict[tuple[str, str], dict[tuple[str, str], ParityEvidence]]:
    """(backend, device) -> (other backend, device) -> what the run saw of the two on the same inputs."""
    evidence: dict[tuple[str, str], dict[tuple[str, str], ParityEvidence]] = {}

    def note(a: tuple[str, str], b: tuple[str, str], **counts: int) -> None:
        for x, y in ((a, b), (b, a)):
            e = evidence.setdefault(x, {}).setdefault(y, ParityEvidence())
            for name, n in counts.items():
                setattr(e, name, getattr(e, name) + n)

    for s in c.summaries.values():
        if s.rule != parity.BITWISE.id or not _is_pair(s.backend) or not s.checks:
            continue
        left, right = s.backend.split("=", 1)
        devices = s.device.split("/")
        note((left, devices[0]), (right, devices[-1]), gate_checks=s.checks,
             gate_differ=s.failures + s.expected_failures)
    for p in c.parity:
        a, _, b = p["pair"].partition(" / ")
        if "rows" in p:
            note((a, p["device"]), (b, p["device"]), rows=p["rows"], equal_rows=p["equal_rows"])
        else:  # a report from before rows were recorded: elements stand in for rows
            note((a, p["device"]), (b, p["device"]), rows=p["total"], equal_rows=p["equal"])
    return evidence


def _row_keys(c: Collector) -> list[tuple[str, str]]:
    keys = {(s.backend, s.device) for s in c.summaries.values() if not _is_pair(s.backend)}
    keys |= {(o["backend"], o.get("device", "")) for o in c.outcomes.values()
             if o["outcome"] in ("failed", "error") and o.get("backend") and not _is_pair(o["backend"])}
    keys |= {(e["backend"], e["device"]) for e in c.not_run}
    keys |= {(e["backend"], e["device"]) for e in c.refused if not _is_pair(e["backend"])}
    keys |= {(name, "all") for name in c.named_but_not_run() if not any(k[0] == name for k in keys)}
    return sorted(keys)


def pick_rows(c: Collector, bench: dict[str, Any] | None = None) -> list[PickRow]:
    """One row per (backend, device label) of a labelled collector, sorted best first (``SORT_ORDER``)."""
    evidence = _pair_evidence(c)
    speeds = bench_speeds(bench) if bench else {}
    where = bench_device(bench).split(" ")[0].split(":")[0] if bench else ""
    rows = []
    for backend, device in _row_keys(c):
        mine = [s for s in c.summaries.values() if (s.backend, s.device) == (backend, device)]
        failed = {s.rule for s in mine if s.failures and s.severity == "numerics"}
        failed |= {o.get("rule") or "errors" for o in c.outcomes.values()
                   if o["outcome"] in ("failed", "error") and (o.get("backend"), o.get("device", "")) ==
                   (backend, device) and _severity(o.get("rule") or "errors") == "numerics"}
        expected = {s.rule for s in mine if s.expected_failures and s.severity == "numerics"} - failed
        interface = {s.rule for s in mine if s.severity == "interface"
                     and (s.failures or s.warnings or s.expected_failures)}
        checks = sum(s.checks for s in mine)
        verdict = "FAIL" if failed else "XFAIL" if expected else "PASS" if checks else "NOT RUN"
        lost = [e for e in c.device_lost() if (e["backend"], e["device"]) == (backend, device)]
        if (lost or c.incomplete or c.coverage_gaps(backend)) and verdict in ("PASS", "XFAIL", "NOT RUN"):
            # checks it had left were kept from running: by a fault that was not its own, or by the run's end
            verdict = "INCOMPLETE"
        margins: dict[str, float] = {}
        for s in mine:
            if s.rule.startswith("axis_b.") and s.margin is not None:
                d = _x_dtype(s.dtype)
                margins[d] = max(margins.get(d, s.margin), s.margin)
        partners, required, unequal = [], [], []
        for (other, other_device), e in sorted(evidence.get((backend, device), {}).items()):
            name = other if other_device == device else f"{other}@{other_device}"
            if e.equal:
                partners.append(name)
                if e.gate_checks:
                    required.append(name)
            elif e.gate_checks:
                unequal.append(f"{name} ({e.describe()})")
        speed = speeds.get(backend)
        row_type = device.split(" ")[0].split(":")[0]
        declared = next((e["limits"] for e in c.not_run
                         if (e["backend"], e["device"]) == (backend, device) and e.get("limits")), "")
        refused = fold_refused((e["feature"], e["exception"].split(":", 1)[0]) for e in c.refused
                               if (e["backend"], e["device"]) == (backend, device))
        if verdict in ("PASS", "XFAIL") and any(e["gating"] for e in c.refused
                                                 if (e["backend"], e["device"]) == (backend, device)):
            verdict = "FAIL"  # refusals gate under --strict-interface; the limits column names them
        rows.append(PickRow(backend, device, verdict, checks, sorted(failed | expected), sorted(interface),
                            _rounding_label(c, backend, device), partners, required, unequal,
                            {d: margins[d] for d in DTYPE_ORDER if d in margins}, speed,
                            bool(speed and where and row_type != where), declared, refused,
                            _scope(c, backend, verdict)))
    return sorted(rows, key=PickRow.sort_key)


def _scope(c: Collector, backend: str, verdict: str) -> str:
    """What a row's verdict is short of: a pass's scope (smoke, partial), or the target dims it left unchecked."""
    gaps = c.coverage_gaps(backend).get(backend, [])
    if verdict == "INCOMPLETE" and gaps:
        return "not checked at " + ", ".join(gaps)
    return c.pass_scope(backend)


@dataclass
class Breach:
    """A rule broken by a backend on a device, folded over dtypes and dims."""

    severity: str  # "numerics" or "interface"
    status: str  # "FAIL" (gates the run), "xfail" (the manifest expects it), "warning" (interface, not gating)
    backend: str
    device: str
    rule: str
    dtypes: list[str]
    breached: int
    checks: int
    detail: str

    def sort_key(self) -> tuple[Any, ...]:
        return (self.severity != "numerics", ("FAIL", "xfail", "warning").index(self.status), self.backend,
                self.device, self.rule)


def breaches(c: Collector) -> list[Breach]:
    """Every breach, numerics first (what fails the run before what is accepted), then interface warnings."""
    folded: dict[tuple[str, ...], Breach] = {}
    checks: dict[tuple[str, str, str], int] = {}
    for s in c.summaries.values():
        checks[(s.backend, s.device, s.rule)] = checks.get((s.backend, s.device, s.rule), 0) + s.checks
    for s in sorted(c.summaries.values(), key=lambda s: s.key):
        for status, count in (("FAIL", s.failures), ("xfail", s.expected_failures), ("warning", s.warnings)):
            if not count:
                continue
            key = (s.severity, status, s.backend, s.device, s.rule)
            b = folded.setdefault(key, Breach(s.severity, status, s.backend, s.device, s.rule, [], 0, 0, ""))
            if s.dtype not in b.dtypes:
                b.dtypes.append(s.dtype)
            b.breached += count
            b.checks = checks[(s.backend, s.device, s.rule)]  # every check of the rule, passed or not
            b.detail = b.detail or s.failing_detail
    for o in c.outcomes.values():
        if o["outcome"] not in ("failed", "error") or not o.get("backend"):
            continue
        rule_id = o.get("rule") or "errors"
        if rule_id == REFUSED:
            continue  # listed with the refused inputs, from the records
        key = (_severity(rule_id), "FAIL", o["backend"], o.get("device", ""), rule_id)
        if key not in folded:  # a test that failed without a failing check: a crash, an exception, a timeout
            folded[key] = Breach(key[0], "FAIL", o["backend"], key[3], rule_id, [], 1, 0, o.get("reason", ""))
    return sorted(folded.values(), key=Breach.sort_key)


def refused_rows(c: Collector) -> list[list[Any]]:
    """The refused inputs folded over dtypes: status (refused, or FAIL under --strict-interface), backend, device,
    entry point, what stood out, dtypes, cases, and the smallest case's exception."""
    folded: dict[tuple[str, ...], list[Any]] = {}
    for e in sorted(c.refused, key=lambda e: (e["backend"], e["device"], e["entry"], e["feature"], e["size"])):
        key = (e["backend"], e["device"], e["entry"], e["feature"], e["exception"].split(":", 1)[0])
        row = folded.setdefault(key, ["refused", *key[:4], [], 0, _clip(e["exception"])])
        row[0] = "FAIL" if e["gating"] else row[0]
        if e["dtype"] not in row[5]:
            row[5].append(e["dtype"])
        row[6] += e["count"]
    return [[*r[:5], ", ".join(r[5]), r[6], r[7]] for r in folded.values()]


# --- rendering -----------------------------------------------------------------------------------------------


PICK_TITLE = "Pick a kernel"


def _fmt_margin(value: float | None) -> str:
    return "–" if value is None else f"{value:.2g}"


def _speed_cells(row: PickRow) -> list[str]:
    mark = " †" if row.speed_elsewhere else ""
    if row.speed is None:
        return ["–", "–"]
    fractions = " / ".join(f"{row.speed.copy_fraction[str(d)]:.2f}" if str(d) in row.speed.copy_fraction else "–"
                           for d in TARGET_BENCH_DIMS)
    lat = row.speed.latency
    latency = "–" if lat is None else (f"{lat[0]:.2f}×" if round(lat[0], 2) == round(lat[1], 2)
                                       else f"{lat[0]:.2f}–{lat[1]:.2f}×")
    return [fractions + (mark if row.speed.copy_fraction else ""), latency + (mark if lat else "")]


def pick_table(rows: list[PickRow], bench: dict[str, Any] | None) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the section's table (plain strings; the caller escapes them)."""
    dtypes = [d for d in DTYPE_ORDER if any(d in r.margins for r in rows)]
    headers = ["#", "backend", "device", "numerics", "interface warnings", "limits", "rounding class",
               "bitwise equal to", *(f"worst Axis-B margin {SHORT_DTYPE[d]}" for d in dtypes)]
    if bench is not None:
        where = _machine(bench_device(bench)) or "the benchmark's device"
        headers += [f"fwd bandwidth ÷ copy, dim {' / '.join(map(str, TARGET_BENCH_DIMS))}, {where}",
                    f"latency 1–{LATENCY_MAX_ROWS} rows ÷ F.rms_norm"]
    cells = []
    for i, r in enumerate(rows, 1):
        numerics = r.numerics + (f" ({', '.join(r.numerics_breached)})" if r.numerics_breached else "")
        interface = str(len(r.interface_breached)) + (f" ({', '.join(r.interface_breached)})"
                                                      if r.interface_breached else "")
        partners = ", ".join(p + (" (required)" if p in r.required_partners else "") for p in r.partners)
        if r.unequal_required:
            partners += ("; " if partners else "") + "NOT " + ", ".join(r.unequal_required)
        line = [str(i), r.backend, r.device, numerics, interface, r.limits or "–", r.rounding, partners or "–",
                *(_fmt_margin(r.margins.get(d)) for d in dtypes)]
        if bench is not None:
            line += _speed_cells(r)
        cells.append(line)
    return headers, cells


def legend(rows: list[PickRow], bench: dict[str, Any] | None) -> list[str]:
    """What the columns mean, in as few words as a first reading needs."""
    lines = [f"Sorted best first: {SORT_ORDER}.",
             "numerics: PASS (every numerics rule held), XFAIL (only breaches a known-failure manifest accepts), "
             "INCOMPLETE (nothing failed, but checks were not run: the run ended before them, or the device was "
             "lost to another backend's fault; see 'Did not run'), FAIL (the rules in brackets), NOT RUN. "
             "interface warnings: interface rules breached (which exception, which words), failing only under "
             "--strict-interface. limits: what it declares it takes (cases outside were not run), and the inputs "
             "it raised a clear exception on without declaring it (refused: see 'Refused inputs'; they fail only "
             "under --strict-interface, and a refused case counts as neither passed nor failed). bitwise "
             "equal to: backends whose outputs had identical bits on the same inputs (cross-backend parity; "
             "(required): under every Axis-A variant by --require-parity). worst Axis-B margin: the output's worst "
             "error over its allowance (≤ 1 passes); a semantics or gradient rule's margin is in its breach below."]
    if bench is not None:
        where = _machine(bench_device(bench)) or "an unnamed device"
        speeds = [r.speed for r in rows if r.speed]
        shapes = sorted({s for sp in speeds for s in sp.shapes.values()}, key=lambda s: -int(s.split("x")[1]))
        lines.append(f"Speed from the benchmark JSON, {bench_dtype(bench) or '?'} on {where}: forward GB/s over a "
                     f"device copy's at {', '.join(shapes) or 'no target shape'} (1.00 = copy speed); latency "
                     f"per call at 1 to {LATENCY_MAX_ROWS} rows over F.rms_norm's (below 1 is faster).")
        if any(r.speed_elsewhere for r in rows):
            lines.append(f"† measured on {where}, not on this row's device type: the same backend's code, another "
                         "machine.")
    return lines


def pick_json(c: Collector, bench: dict[str, Any] | None = None) -> dict[str, Any]:
    """The section as data, for the JSON report."""
    rows = pick_rows(c, bench)
    return {"order": SORT_ORDER, "bench_device": bench_device(bench) if bench else None,
            "rows": [r.to_json() for r in rows], "breaches": [asdict(b) for b in breaches(c)]}


def pick_markdown(c: Collector, bench: dict[str, Any] | None, table: Callable[[list[list[Any]], list[str]], str],
                  cell: Callable[[Any], str], *, details_at: str = "") -> list[str]:
    """The section's markdown lines; ``table`` and ``cell`` escape as the rest of the report does;
    ``details_at`` says where the minimal cases and replay commands are."""
    rows = pick_rows(c, bench)
    lines = [f"## {PICK_TITLE}", ""]
    if not rows:
        return [*lines, "No backend ran.", ""]
    headers, cells = pick_table(rows, bench)
    lines += [table(cells, headers), "", *(cell(line) + "\n" for line in legend(rows, bench))]
    found = breaches(c)
    lines += ["### Breaches by severity", ""]
    if not found:
        lines += ["None: every check held.", ""]
    titles = {"numerics": "Numerics (FAIL gates the run; xfail: accepted by the known-failure manifest)",
              "interface": "Interface (warnings; they gate only under --strict-interface)"}
    for severity in ("numerics", "interface"):
        group = [b for b in found if b.severity == severity]
        if not group:
            continue
        lines += [f"{titles[severity]}:", ""]
        lines += [table([[b.status, b.backend, b.device, b.rule, ", ".join(b.dtypes) or "–",
                          f"{b.breached} / {b.checks}" if b.checks else "test failed",
                          _clip(b.detail)] for b in group],
                        ["status", "backend", "device", "rule", "dtypes", "breached / checks",
                         "smallest case's detail"]), ""]
    refused = refused_rows(c)
    if refused:
        lines += ["Refused inputs (clear exceptions on inputs not declared as refused; they gate only under "
                  "--strict-interface):", ""]
        lines += [table(refused, ["status", "backend", "device", "entry point", "refused", "dtypes", "cases",
                                  "exception"]), ""]
    if (found or refused) and details_at:
        lines += [f"Minimal cases and replay commands: {details_at}.", ""]
    return lines


def _machine(label: str) -> str:
    """"cuda (NVIDIA H200)" as a header says it: "NVIDIA H200"."""
    return label.split(" (", 1)[1].rstrip(")") if " (" in label else label


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"
