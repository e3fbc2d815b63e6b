"""Known-failure manifest: expected breaches per backend, device, dtype and rule (and, optionally, case), each
with its reason.

A CI gate can adopt the harness before every kernel passes, one breach at a time, as a type checker's baseline
allows: each check is matched on its own, so a listed breach is reported as expected while an unlisted one in the
same test still fails the run with its replay. A test whose only breaches are listed reads as xfailed. An entry
whose checks all passed is reported so that it can go (``--strict-known-failures`` fails the run on it, as pytest's
strict xfail does), and one that matched no check is a warning. Patterns use shell wildcards (`cuda*`,
`axis_a.*`); ``case`` matches the case as a failure prints it (`*dim=4096*`). ``--write-known-failures=PATH``
writes the breaches of a run as such a manifest: the baseline to adopt.

    # known-failures.toml
    [[expected]]
    backend = "torch_compile"
    device = "cuda*"
    rule = "axis_a.batch_size"
    dtype = "float32"          # optional, default "*"
    case = "*rows=3,*"         # optional, default "*"
    reason = "inductor picks another reduction plan below 16 rows"
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from ...contract import ALL_RULES, DTYPES

_KNOWN_RULES = [r.id for r in ALL_RULES]


@dataclass(frozen=True)
class ExpectedBreach:
    """One manifest entry: which (backend, device, dtype, rule, case) may fail, and why."""

    backend: str
    device: str
    rule: str
    reason: str
    dtype: str = "*"
    case: str = "*"

    def matches(self, backend: str, device: str, dtype: str, rule: str, case: str = "") -> bool:
        return (fnmatchcase(backend, self.backend) and fnmatchcase(device, self.device)
                and fnmatchcase(dtype, self.dtype) and fnmatchcase(rule, self.rule)
                and fnmatchcase(case, self.case))

    def describe(self) -> str:
        where = f"{self.backend} on {self.device}, {self.dtype}, {self.rule}"
        return where if self.case == "*" else f"{where}, case {self.case}"


@dataclass
class Manifest:
    entries: list[ExpectedBreach]

    def match(self, backend: str, device: str, dtype: str, rule: str, case: str = "") -> int | None:
        """Index of the first entry that expects this breach, or None."""
        for i, entry in enumerate(self.entries):
            if entry.matches(backend, device, dtype, rule, case):
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
        raise ValueError(f"{where} must be a table of backend, device, rule, reason (and dtype, case), not {item!r}")
    wrong = [k for k, v in item.items() if not isinstance(v, str)]
    if wrong:
        raise ValueError(f"{where} fields must be strings: {', '.join(map(str, wrong))}")
    missing = [k for k in ("backend", "device", "rule", "reason") if not item.get(k)]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    unknown = set(item) - {"backend", "device", "rule", "reason", "dtype", "case"}
    if unknown:
        raise ValueError(f"{where} has unknown fields {', '.join(sorted(unknown))}")
    if not any(fnmatchcase(r, item["rule"]) for r in _KNOWN_RULES):
        raise ValueError(f"{where} rule {item['rule']!r} matches no contract rule")
    dtype = item.get("dtype", "*")
    if not any(fnmatchcase(d, dtype) for d in DTYPES):
        raise ValueError(f"{where} dtype {dtype!r} matches no contract dtype; known: {', '.join(DTYPES)}")
    return ExpectedBreach(**{k: str(v) for k, v in item.items()})


def load_manifest(path: str | Path) -> Manifest:
    """Read a manifest: TOML or JSON, by suffix."""
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
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10: the same parser, as a dependency
            import tomli as tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: not valid TOML: {exc}") from None
    return parse_manifest(data, str(path))


STALE = "now passes: remove the entry"


def entry_status(breached: int, passed: int) -> str:
    """What became of an entry in a run: breached; checked and never breached (stale, as an xpass is); or not
    met by any check of the run (a typo, or a backend or device the run did not select)."""
    if breached:
        return "breached as expected"
    if passed:
        return STALE
    return "matched nothing: check the entry"


@dataclass(frozen=True)
class Breach:
    """A (backend, device, dtype, rule) that broke in a run: what a baseline lists, with one failing case."""

    backend: str
    device: str
    dtype: str
    rule: str
    count: int
    detail: str
    replay: str


def baseline_toml(breaches: list[Breach], command: str) -> str:
    """A manifest listing every breach (``--write-known-failures``): a run with it as ``--known-failures`` passes
    as long as nothing new breaks. Each entry keeps the detail and replay of one failing case as comments. TOML's
    basic strings take JSON's escapes, so ``json.dumps`` quotes the values."""
    lines = ["# Known failures written by --write-known-failures: the breaches of this run, one entry per backend,",
             "# device, dtype and rule. Give each a reason you can defend, remove the entries you fix, and run with",
             "# --known-failures=THIS_FILE (and --strict-known-failures to fail on entries that no longer match).",
             f"# written by: {command}", ""]
    for b in sorted(breaches, key=lambda b: (b.backend, b.device, b.dtype, b.rule)):
        lines += [f"# {b.count} failing check{'s' if b.count != 1 else ''}; one: {_comment(b.detail)}",
                  *([f"# replay: {_comment(b.replay)}"] if b.replay else []),
                  "[[expected]]",
                  *(f"{key} = {json.dumps(value, ensure_ascii=False)}" for key, value in (
                      ("backend", b.backend), ("device", _any_index(b.device)), ("dtype", b.dtype), ("rule", b.rule),
                      ("reason", "baseline: breached when this file was written"))),
                  ""]
    return "\n".join(lines)


def _any_index(device: str) -> str:
    """``cuda:3`` as ``cuda*``: pytest-xdist's workers each take a GPU, so a breach found on one GPU of a host is
    met on another the next time."""
    return device.split(":", 1)[0] + "*" if ":" in device else device


def _comment(text: str) -> str:
    """``text`` on one comment line: its first line, at most 300 characters."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= 300 else first[:297] + "..."


def manifest_rows(manifest: Manifest) -> list[dict[str, Any]]:
    """The collector's starting record of each entry, counts zero."""
    return [{**asdict(e), "breached": 0, "passed": 0} for e in manifest.entries]
