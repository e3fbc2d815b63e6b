"""The JSON report's format is versioned and published as a JSON Schema (harness/vocabulary/report.schema.json,
shipped in the wheel): reports of every section, and of a real run, validate against it with jsonschema."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from rmsnorm_conformance.harness.reporting.render import render_report
from rmsnorm_conformance.harness.vocabulary.records import FORMAT, SCHEMA_PATH, Check, Collector

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads(SCHEMA_PATH.read_text())
VALIDATOR = Draft202012Validator(SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)


def errors(value: Any) -> list[str]:
    """Where ``value`` breaks the schema, as 'path: why' lines (jsonschema's own messages)."""
    return [f"{e.json_path}: {e.message}" for e in VALIDATOR.iter_errors(value)]


def _every_section() -> Collector:
    """A collector with something in every section, non-finite statistics included."""
    c = Collector(environment={"torch": "2.13", "exit status": 1}, named_backends=["mine", "absent"])
    c.add(Check("mine", "cpu", "bfloat16", 4096, "axis_b.output", True, max_abs=0.01, max_rel=math.inf,
                max_ulp=2, margin=math.nan, ulp_hist=[5, 1]))
    c.add(Check("mine", "cpu", "bfloat16", 77, "axis_a.batch_size", False, case="BatchSizeCase(...)",
                detail="not equal", replay="pytest --replay=x", size=770))
    c.add(Check("mine", "cpu", "float32", 128, "interface.shape_error", False, detail="RuntimeError",
                severity="interface", gating=False))
    c.outcomes["t.py::test_a[mine-cpu-bfloat16]"] = {"outcome": "failed", "reason": "r", "replay": "x",
                                                     "where": "mine-cpu-bfloat16", "backend": "mine",
                                                     "device": "cpu", "rule": "axis_a.batch_size"}
    c.outcomes["t.py::test_b[mine-cpu-float16]"] = {"outcome": "skipped", "reason": "no fp16", "where": "w"}
    c.outcomes["t.py::test_c[mine-cpu-float32]"] = {"outcome": "xfailed", "reason": "known", "where": "w"}
    c.add_not_run("other", "cuda", "no GPU")
    c.expected = [{"backend": "mine", "device": "*", "rule": "axis_a.*", "dtype": None, "reason": "why",
                   "breached": 1, "passed": 0},
                  {"backend": "mine", "device": "cpu", "rule": "axis_b.output", "dtype": "float32",
                   "case": "*rows=3,*", "reason": "stale", "breached": 0, "passed": 2}]
    c.strict_known_failures = True
    c.parity = [{"device": "cpu", "dtype": "bfloat16", "dim": 128, "pair": "a / b", "equal": 10, "total": 12,
                 "max_ulp": 1, "equal_rows": 1, "rows": 2}]
    c.rounding = [{"backend": "mine", "device": "cpu", "dtype": "bfloat16", "variant": "forward", "rows": 4,
                   "declared": "", "matches": {"product_fp32": 4}, "distinguishable": True}]
    c.add_refused({"backend": "mine", "device": "cpu", "dtype": "bfloat16", "rule": "axis_a.batch_size",
                   "entry": "forward",
                   "input": "x [2, 64] bfloat16 contiguous, weight [64] bfloat16 strided (stride 2)",
                   "feature": "strided weight", "exception": "ValueError: weights must be contiguous",
                   "case": "BatchSizeCase(...)", "replay": "pytest --replay=y", "size": 128, "gating": False})
    return c


def test_the_schema_is_a_valid_draft_2020_12_schema():
    Draft202012Validator.check_schema(SCHEMA)


def test_the_schema_names_the_format_the_reports_write():
    assert SCHEMA["properties"]["format"]["const"] == FORMAT
    assert FORMAT in (ROOT / "CHANGELOG.md").read_text(), "CHANGELOG.md has no entry for the report's format"


@pytest.mark.parametrize("collector", [_every_section(), Collector(usage_error="--device=cuda:7: no such device")],
                         ids=["every-section", "usage-error"])
def test_reports_validate_against_the_schema(collector, tmp_path):
    data = json.loads(render_report(collector, tmp_path / "r.json"))
    assert errors(data) == []


def test_the_schema_rejects_what_breaks_it(tmp_path):
    data = json.loads(render_report(_every_section(), tmp_path / "r.json"))
    broken = json.loads(json.dumps(data))
    del broken["totals"]
    broken["verdict"] = "MAYBE"
    broken["summaries"][0]["checks"] = -1
    broken["summaries"][0]["max_rel"] = "infinity"
    broken["outcomes"]["t.py::test_b[mine-cpu-float16]"]["outcome"] = "weird"
    broken["summaries"][0]["surprise"] = 1
    found = "\n".join(errors(broken))
    for words in ("'totals' is a required property", "'MAYBE' is not one of", "-1 is less than the minimum",
                  "$.summaries[0].max_rel: 'infinity' is not valid", "'weird' is not one of",
                  "('surprise' was unexpected)"):
        assert words in found, found


def test_a_real_runs_report_validates(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess(str(ROOT / "suites" / "test_axis_b.py"), "--backend=native",
                                           "--device=cpu", "--dtype=float32", "-k", "test_output", "--sweep=ci",
                                           "--max-examples=3", "-p", "no:cacheprovider", "--report=r.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    data = json.loads((pytester.path / "r.json").read_text())
    assert errors(data) == []
    assert re.fullmatch(r"rmsnorm-conformance-report/\d+", data["format"])
