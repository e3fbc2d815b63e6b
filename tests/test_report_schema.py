"""The JSON report's format is versioned and published as a JSON Schema (harness/reporting/report.schema.json):
reports of every section, and of a real run, validate against it. jsonschema is not a dependency, so a small
validator for the subset the schema uses lives here (and is tested to reject what it should)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmsnorm_conformance.harness.reporting.render import render_report
from rmsnorm_conformance.harness.vocabulary.records import FORMAT, SCHEMA_PATH, Check, Collector

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads(SCHEMA_PATH.read_text())
# The keywords the validator knows; a schema using another would be checked only in part, so that fails.
KEYWORDS = {"$schema", "$id", "title", "description", "type", "required", "properties", "additionalProperties",
            "items", "enum", "const", "minimum", "$ref", "$defs", "anyOf"}
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value: Any, name: str) -> bool:
    if name in ("integer", "number"):
        ok = isinstance(value, int) if name == "integer" else isinstance(value, int | float)
        return ok and not isinstance(value, bool) and (name == "integer" or math.isfinite(value))
    return isinstance(value, TYPES[name])


# The keywords that judge a value on its own: keyword -> (the keyword's argument, the value) -> why it fails or "".
VALUE_KEYWORDS: dict[str, Callable[[Any, Any], str]] = {
    "const": lambda const, value: "" if value == const else f"{value!r} is not {const!r}",
    "enum": lambda enum, value: "" if value in enum else f"{value!r} is not one of {enum}",
    "minimum": lambda minimum, value: (
        f"{value} < {minimum}" if isinstance(value, int | float) and value < minimum else ""),
}


def errors(value: Any, schema: dict[str, Any], where: str = "$", root: dict[str, Any] = SCHEMA) -> list[str]:
    """Where ``value`` breaks ``schema`` (the subset in KEYWORDS), as 'path: why' lines."""
    unknown = set(schema) - KEYWORDS
    if unknown:
        raise ValueError(f"schema at {where} uses keywords this validator does not know: {sorted(unknown)}")
    if "$ref" in schema:
        return errors(value, _referenced(schema["$ref"], root), where, root)
    if "anyOf" in schema:
        if all(errors(value, option, where, root) for option in schema["anyOf"]):
            return [f"{where}: {value!r} matches none of {schema['anyOf']}"]
        return []
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is(value, n) for n in names):
            return [f"{where}: {type(value).__name__} {value!r:.60} is not {' or '.join(names)}"]
    found = [f"{where}: {why}" for keyword, check in VALUE_KEYWORDS.items()
             if keyword in schema and (why := check(schema[keyword], value))]
    if isinstance(value, dict):
        found += _object_errors(value, schema, where, root)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found += errors(item, schema["items"], f"{where}[{i}]", root)
    return found


def _referenced(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    """The schema a '#/...' reference points at within ``root``."""
    target: Any = root
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return target


def _object_errors(value: dict[str, Any], schema: dict[str, Any], where: str, root: dict[str, Any]) -> list[str]:
    """Missing required keys, then each key against its property's schema, or additionalProperties'."""
    found = [f"{where}: missing {key!r}" for key in schema.get("required", []) if key not in value]
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            found += errors(item, properties[key], f"{where}.{key}", root)
        elif extra is False:
            found.append(f"{where}: unexpected key {key!r}")
        elif isinstance(extra, dict):
            found += errors(item, extra, f"{where}.{key}", root)
    return found


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
                   "breached": 1, "passed": 0}]
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


def test_the_schema_names_the_format_the_reports_write():
    assert SCHEMA["properties"]["format"]["const"] == FORMAT
    assert FORMAT in (ROOT / "CHANGELOG.md").read_text(), "CHANGELOG.md has no entry for the report's format"


@pytest.mark.parametrize("collector", [_every_section(), Collector(usage_error="--device=cuda:7: no such device")],
                         ids=["every-section", "usage-error"])
def test_reports_validate_against_the_schema(collector, tmp_path):
    data = json.loads(render_report(collector, tmp_path / "r.json"))
    assert errors(data, SCHEMA) == []


def test_the_validator_rejects_what_breaks_the_schema(tmp_path):
    data = json.loads(render_report(_every_section(), tmp_path / "r.json"))
    broken = json.loads(json.dumps(data))
    del broken["totals"]
    broken["verdict"] = "MAYBE"
    broken["summaries"][0]["checks"] = -1
    broken["summaries"][0]["max_rel"] = "infinity"
    broken["outcomes"]["t.py::test_b[mine-cpu-float16]"]["outcome"] = "weird"
    broken["summaries"][0]["surprise"] = 1
    found = "\n".join(errors(broken, SCHEMA))
    for words in ("missing 'totals'", "'MAYBE' is not one of", "-1 < 0", "'infinity' matches none",
                  "'weird' is not one of", "unexpected key 'surprise'"):
        assert words in found, found


def test_a_real_runs_report_validates(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess(str(ROOT / "suites" / "test_axis_b.py"), "--backend=native",
                                           "--device=cpu", "--dtype=float32", "-k", "test_output", "--sweep=ci",
                                           "--max-examples=3", "-p", "no:cacheprovider", "--report=r.json")
    assert result.ret == 0, result.stdout.str()[-3000:]
    data = json.loads((pytester.path / "r.json").read_text())
    assert errors(data, SCHEMA) == []
    assert re.fullmatch(r"rmsnorm-conformance-report/\d+", data["format"])
