"""How a test's report becomes part of the run's records: its checks (carried in ``user_properties``, so they
travel from pytest-xdist workers), and the outcome of a test that did not pass, pinned on its backend, device
and rule with the replay of its failing case.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import pytest

from ..vocabulary.records import Collector

if TYPE_CHECKING:  # the device-loss guard, loaded in every pytest run, reads this module's keys without torch
    from ..running.backend import Backend

RECORDS_PROPERTY = "rmsnorm_conformance_records"
# Marks the report pytest-xdist makes for a worker that ended after a device fault (device_lost.py): the test's own
# reports are in already, and this one is no failure of anyone's.
ENDED_PROPERTY = "rmsnorm_conformance_worker_ended"
FAILURE_PROPERTY = "rmsnorm_conformance_failure"
SUBJECT_PROPERTY = "rmsnorm_conformance_subject"
# The rules a conformance test declares, on its setup report: a worker that crashes in the test's call sends no
# report of its own, and the controller, which never imports the suites, pins the crash on the rule from here.
RULES_PROPERTY = "rmsnorm_conformance_rules"


def record_report(collector: Collector, report: pytest.TestReport, backends: tuple[Backend, ...],
                  declared: dict[str, tuple[str, ...]]) -> None:
    """Fold one test report (setup, call or teardown) into ``collector``; ``declared`` keeps the rules each test's
    setup report named (``RULES_PROPERTY``), for a later report of the test that names nothing."""
    if report.when == "setup" and "conformance" in report.keywords:
        collector.conformance_tests += 1
    for name, value in report.user_properties:
        if name == RECORDS_PROPERTY:
            collector.merge_json(cast(dict[str, Any], value))
        elif name == RULES_PROPERTY:
            declared[report.nodeid] = tuple(cast(list[str], value))
    if any(name == ENDED_PROPERTY for name, _ in report.user_properties):
        return
    outcomes = collector.outcomes
    params = where(report.nodeid)
    subject = _property(report, SUBJECT_PROPERTY) or subject_from_id(report.nodeid, params, backends, declared)
    if hasattr(report, "wasxfail"):  # a breach the known-failure manifest expects
        outcomes[report.nodeid] = {"outcome": "xfailed", "reason": str(report.wasxfail)[:300], "where": params}
    elif report.passed and report.when == "call":
        collector.passed_tests += 1
    elif report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        outcomes[report.nodeid] = {"outcome": "skipped", "reason": reason.removeprefix("Skipped: "),
                                   "where": params, **subject}
    elif report.failed or report.outcome == "rerun":
        # A failed attempt that pytest-rerunfailures runs again stays a failure: a kernel that is wrong only
        # sometimes is wrong.
        _record_failure(outcomes, report, params, subject)


def _record_failure(outcomes: dict[str, dict[str, str]], report: pytest.TestReport, params: str,
                    subject: dict[str, str]) -> None:
    """A failed (or rerun) test's outcome, pinned on its backend, device and rule with the replay of its failing
    case; the first failure of a test is the one kept."""
    failure = _failure(report)
    if report.nodeid in outcomes and outcomes[report.nodeid]["outcome"] in ("failed", "error"):
        return  # a teardown error after a failed call, or a later attempt: the first failure is the one to show
    reason = failure["reason"][:300]
    if report.outcome == "rerun":
        reason = f"failed on an attempt that was then rerun: {reason}"[:300]
    outcomes[report.nodeid] = {"outcome": "failed" if report.when == "call" else "error",
                               "reason": reason, "replay": failure.get("replay", ""),
                               "where": params, **subject, "rule": failure.get("rule") or subject.get("rule", "")}


def _failure(report: pytest.TestReport) -> dict[str, Any]:
    """The failure a check carried in the report, else the last line of the report's text, without a replay."""
    failure = dict(_property(report, FAILURE_PROPERTY) or {})
    if not failure:
        lines = [_plain(ln) for ln in (report.longreprtext or "").splitlines() if _plain(ln)]
        failure = {"reason": lines[-1] if lines else "", "replay": ""}
    return failure


def subject_from_id(nodeid: str, params: str, backends: tuple[Backend, ...],
                    declared: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Backend, device and rule of a test that left no record of them: a worker that crashed (a segfault in
    a kernel, say) reports only the test id. Its params begin with a selected backend's name and the
    device; its rule is the one rule its setup report declared (``declared``), where it declared one."""
    if not params:
        return {}
    backend = next((b.name for b in sorted(backends, key=lambda b: -len(b.name))
                    if params.startswith(f"{b.name}-")), None)
    if backend is None:
        return {}
    subject = {"backend": backend, "device": params[len(backend) + 1:].split("-", 1)[0]}
    rules = declared.get(nodeid, ())
    if len(rules) == 1:
        subject["rule"] = rules[0]
    return subject


def _property(report: pytest.TestReport, key: str) -> Any:
    for name, value in report.user_properties:
        if name == key:
            return dict(cast(dict[str, Any], value))
    return None


def where(nodeid: str) -> str:
    """The params part of a test id: backend, device and dtype."""
    return nodeid.rsplit("[", 1)[1].rstrip("]") if "[" in nodeid else ""


def _plain(line: str) -> str:
    """A failure line without the `| ` margins pytest draws around exception groups."""
    return line.strip().lstrip("|+-").strip()
