"""A pytest plugin for tests/detection/test_detection.py: one run of the suites holds many zoo backends, each to its own
selection (a defect to the tests of the rule it breaks, a control to its tests and dtype), and stops each backend
at its first failure as ``-x`` stops a run of that backend alone. It only selects and skips; every check is the
harness's own, so one run finds what a run per backend would, without a process per backend.

Loaded with ``-p tests.helpers.detection_plan --detection-plan=plan.json``; the plan maps a backend name to a selection:
``rules`` (patterns, as ``--rule`` takes them), ``module`` (a suite file name), ``dtype`` (the input dtype),
``name_has_all`` / ``name_has_any`` / ``name_has_none`` (words of the test id, as ``-k`` matches them) and
``stop_first`` (skip the backend's later tests once one failed).

The explicit checks at the thresholds and past the 32-bit offsets (the costly ones) run after the sweeps: a defect
a sweep catches stops there, as it would have after them, and one that only they catch still meets them. Each
backend meets the same tests; only the work spent before its first failure is less.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

# Words of the names of the tests that run last: the explicit checks over large batches.
LAST = ("_at_thresholds", "_past_int32_offsets")
PLAN = pytest.StashKey[dict[str, dict[str, Any]]]()
FAILED = pytest.StashKey[set[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--detection-plan", default=None, metavar="PATH",
                     help="JSON: for each backend name, the suite tests it runs (tests/helpers/detection_plan.py)")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--detection-plan")
    if path:
        config.stash[PLAN] = json.loads(Path(path).read_text())
        config.stash[FAILED] = set()


def _subject(item: pytest.Item) -> tuple[Any, ...] | None:
    """(backend, device, dtype, weight dtype) of a conformance test; None for others (the parity gate's pairs)."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params.get("subject") if callspec is not None else None
    return params if isinstance(params, tuple) and len(params) == 4 else None


def selects(entry: dict[str, Any], item: pytest.Item, dtype: str) -> bool:
    """Whether ``entry`` (one backend's selection) keeps ``item``."""
    marker = item.get_closest_marker("conformance")
    if marker is None:
        return False
    rules = entry.get("rules")
    if rules is not None and not any(fnmatchcase(r, p) for r in marker.kwargs.get("rules", ()) for p in rules):
        return False
    if entry.get("module") not in (None, item.path.name):
        return False
    if entry.get("dtype") not in (None, dtype):
        return False
    name = item.name
    return (all(word in name for word in entry.get("name_has_all", ()))
            and (not entry.get("name_has_any") or any(word in name for word in entry["name_has_any"]))
            and not any(word in name for word in entry.get("name_has_none", ())))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    plan = config.stash.get(PLAN, None)
    if plan is None:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        subject = _subject(item)
        entry = plan.get(subject[0].name) if subject is not None else None
        (keep if entry is not None and selects(entry, item, subject[2]) else drop).append(item)
    missing = set(plan) - {_subject(item)[0].name for item in keep}  # type: ignore[index]
    if missing:
        raise pytest.UsageError(f"--detection-plan: no suite test selected for {sorted(missing)}")
    keep.sort(key=lambda item: any(word in item.name for word in LAST))
    items[:] = keep
    if drop:
        config.hook.pytest_deselected(items=drop)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    failed = item.config.stash.get(FAILED, None)
    subject = _subject(item)
    if failed and subject is not None and subject[0].name in failed:
        pytest.skip(f"{subject[0].name} stopped at its first failure (as -x stops a run of it alone)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    plan = item.config.stash.get(PLAN, None)
    subject = _subject(item)
    if plan is None or subject is None or not report.failed or hasattr(report, "wasxfail"):
        return
    if plan.get(subject[0].name, {}).get("stop_first"):
        item.config.stash[FAILED].add(subject[0].name)
