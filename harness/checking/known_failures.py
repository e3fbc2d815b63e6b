"""Known-failure manifest: expected breaches per backend, device and rule, each with its reason.

A CI gate can adopt the harness before every kernel passes: a listed breach is reported as expected (an
xfail) instead of failing the run. An expected breach that starts passing is reported so that its entry can
go, and an entry that matches nothing is a warning. Patterns use shell wildcards (`cuda*`, `axis_a.*`).

    # known-failures.toml
    [[expected]]
    backend = "torch_compile"
    device = "cuda*"
    rule = "axis_a.batch_size"
    dtype = "float32"          # optional, default "*"
    reason = "inductor picks another reduction plan below 16 rows"
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from rmsnorm_conformance.contract import ALL_RULES, DTYPES

_KNOWN_RULES = [r.id for r in ALL_RULES]


@dataclass(frozen=True)
class ExpectedBreach:
    """One manifest entry: which (backend, device, dtype, rule) may fail, and why."""

    backend: str
    device: str
    rule: str
    reason: str
    dtype: str = "*"

    def matches(self, backend: str, device: str, dtype: str, rule: str) -> bool:
        return (fnmatchcase(backend, self.backend) and fnmatchcase(device, self.device)
                and fnmatchcase(dtype, self.dtype) and fnmatchcase(rule, self.rule))

    def describe(self) -> str:
        return f"{self.backend} on {self.device}, {self.dtype}, {self.rule}"


@dataclass
class Manifest:
    entries: list[ExpectedBreach]

    def match(self, backend: str, device: str, dtype: str, rule: str) -> int | None:
        """Index of the first entry that expects this breach, or None."""
        for i, entry in enumerate(self.entries):
            if entry.matches(backend, device, dtype, rule):
                return i
        return None


def parse_manifest(data: Any, source: str = "manifest") -> Manifest:
    """Entries from a parsed TOML/JSON document; errors name the file, the entry and the field."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: the top level must be a table with an 'expected' list, "
                         f"not a {type(data).__name__}")
    unknown_top = set(data) - {"expected"}
    if unknown_top:
        raise ValueError(f"{source}: unknown top-level keys {', '.join(sorted(map(str, unknown_top)))}")
    raw = data.get("expected")
    if not isinstance(raw, list):
        raise ValueError(f"{source}: expected a list of [[expected]] entries")
    return Manifest([_parse_entry(item, f"{source}: entry {i}") for i, item in enumerate(raw, 1)])


def _parse_entry(item: Any, where: str) -> ExpectedBreach:
    """One [[expected]] entry; ``where`` names the file and the entry in every error."""
    if not isinstance(item, dict):
        raise ValueError(f"{where} must be a table of backend, device, rule, reason (and dtype), not {item!r}")
    wrong = [k for k, v in item.items() if not isinstance(v, str)]
    if wrong:
        raise ValueError(f"{where} fields must be strings: {', '.join(map(str, wrong))}")
    missing = [k for k in ("backend", "device", "rule", "reason") if not item.get(k)]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    unknown = set(item) - {"backend", "device", "rule", "reason", "dtype"}
    if unknown:
        raise ValueError(f"{where} has unknown fields {', '.join(sorted(unknown))}")
    if not any(fnmatchcase(r, item["rule"]) for r in _KNOWN_RULES):
        raise ValueError(f"{where} rule {item['rule']!r} matches no contract rule")
    dtype = item.get("dtype", "*")
    if not any(fnmatchcase(d, dtype) for d in DTYPES):
        raise ValueError(f"{where} dtype {dtype!r} matches no contract dtype; known: {', '.join(DTYPES)}")
    return ExpectedBreach(**{k: str(v) for k, v in item.items()})


def load_manifest(path: str | Path) -> Manifest:
    """Read a manifest: TOML (Python 3.11+) or JSON, by suffix."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from None
    else:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            raise ValueError(f"{path}: TOML manifests need Python 3.11+; use a .json manifest") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML: {exc}") from None
    return parse_manifest(data, str(path))


def entry_status(breached: int, passed: int) -> str:
    if breached:
        return "breached as expected"
    if passed:
        return "now passes: remove the entry"
    return "matched nothing: check the entry"


def manifest_rows(manifest: Manifest) -> list[dict[str, Any]]:
    """The collector's starting record of each entry, counts zero."""
    return [{**asdict(e), "breached": 0, "passed": 0} for e in manifest.entries]
