"""What a conformance test holds: the subject under test, the assertion helpers that record every verdict
for the report, and the decorator that turns a check into a Hypothesis sweep (or a replay of one case).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from rmsnorm_conformance.contract import TARGET_DIMS, Profile, reference, rule
from rmsnorm_conformance.contract import rule as contract_rule

from .backend import Backend
from .cases import Batch, torch_dtype
from .comparison import BitwiseResult, ToleranceResult, compare_bitwise, compare_within
from .manifest import Manifest
from .records import Check, Collector
from .session import active_settings

TARGET_DIM_SET = frozenset(TARGET_DIMS.values())


@dataclass(repr=False)
class Subject:
    """One (backend, device, dtype) under one contract profile, as a conformance test sees it."""

    backend: Backend
    device: torch.device
    dtype: str
    profile: Profile
    collector: Collector
    nodeid: str
    replay: Callable[[str, Any], str]
    on_failure: Callable[[str, str, str], None]
    max_elements: int
    replay_case: Any = None
    manifest: Manifest | None = None
    rules: tuple[str, ...] = ()
    strict_interface: bool = False

    def __repr__(self) -> str:
        # What Hypothesis prints in a falsifying example: which subject, not its whole state.
        return f"Subject({self.backend.name!r}, {self.device}, {self.dtype})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def rule_for(self, rule_id: str | None) -> str:
        """The rule an assertion records: the test's declared rule, or one of them named explicitly."""
        if rule_id is None:
            if len(self.rules) != 1:
                raise TypeError(f"this test declares rules {self.rules}: name the one an assertion checks")
            return self.rules[0]
        if self.rules and rule_id not in self.rules:
            raise ValueError(f"rule {rule_id!r} is not declared on this test (declared: {', '.join(self.rules)})")
        return rule_id

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.device)

    def forward(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        return self.backend.forward(x, w, eps)

    def inputs(self, batch: Batch, *, rows: int | None = None, salt: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """x and weight of ``batch`` on the subject's device (made on the CPU, so the same on any device)."""
        return self.to_device(batch.x(rows, salt)), self.to_device(batch.w())

    def replay_command(self, case: Any, rule_id: str) -> str:
        """One command, to run from any directory where the backend imports, that re-runs just this case."""
        return self.replay(rule_id, case)

    def gates(self, rule_id: str) -> bool:
        """Does a breach of this rule fail the run? Numerics rules always; interface rules only when strict."""
        return contract_rule(rule_id).severity == "numerics" or self.strict_interface

    def record(self, rule_id: str, case: Any, dim: int, passed: bool, detail: str,
               result: ToleranceResult | None = None) -> tuple[str, str | None]:
        """Send the verdict to the report; return the replay command and, if a manifest expects this
        breach, its reason."""
        replay = self.replay_command(case, rule_id)
        stats = {}
        if result is not None and result.problem is None:
            stats = {"max_abs": result.max_abs, "max_rel": result.max_rel, "max_ulp": result.max_ulp,
                     "margin": result.margin}
        expected = -1
        if self.manifest is not None:
            match = self.manifest.match(self.backend.name, str(self.device), self.dtype, rule_id)
            expected = -1 if match is None else match
        self.collector.add(Check(self.backend.name, str(self.device), self.dtype, dim, rule_id, passed,
                                 case=repr(case), detail="" if passed else detail,
                                 replay="" if passed else replay, expected=expected, size=case_size(case),
                                 severity=contract_rule(rule_id).severity, gating=self.gates(rule_id), **stats))
        reason = self.manifest.entries[expected].reason if expected >= 0 and self.manifest else None
        return replay, reason


def case_size(case: Any) -> int:
    """Elements in a case's batch: how a report picks the smallest failing case."""
    batch = getattr(case, "batch", None)
    return batch.rows * batch.dim if batch is not None else 0


class InterfaceWarning(UserWarning):
    """A breach of an interface rule (which exception, which words): reported, not failed, unless strict."""


def _fail(subject: Subject, rule_id: str, case: Any, what: str, detail: str,
          recorded: tuple[str, str | None]) -> None:
    """Fail the test with the rule, what differed, the case and the replay; xfail if the manifest expects it."""
    __tracebackhide__ = True
    replay, expected = recorded
    r = contract_rule(rule_id)
    message = (f"contract rule {rule_id} ({r.title}) broken by backend {subject.backend.name!r} on "
               f"{subject.device}, {subject.dtype}: {what}\n  {detail}\n  rule: {r.statement}\n"
               f"  minimal configuration: {case!r}\n  replay: {replay}")
    if expected is not None:
        pytest.xfail(f"expected breach ({expected}): {message}")
    if not subject.gates(rule_id):
        # An interface breach: in the report as a warning, with the same detail and replay; the test goes on.
        warnings.warn(InterfaceWarning(message), stacklevel=3)
        return
    subject.on_failure(rule_id, f"contract rule {rule_id} ({r.title}): {what}", replay)
    pytest.fail(message, pytrace=False)


def assert_bitwise(subject: Subject, case: Any, *, actual: torch.Tensor, expected: torch.Tensor, what: str,
                   dim: int, rule: str | None = None) -> BitwiseResult:
    """Fail unless ``actual`` and ``expected`` have identical bits; record the verdict either way."""
    __tracebackhide__ = True
    rule_id = subject.rule_for(rule)
    result = compare_bitwise(actual, expected)
    recorded = subject.record(rule_id, case, dim, result.equal, result.describe())
    if not result.equal:
        _fail(subject, rule_id, case, what, result.describe(), recorded)
    return result


def assert_within(subject: Subject, case: Any, *, actual: torch.Tensor, reference: torch.Tensor, what: str,
                  dim: int, bound: Any = None, correctly_rounded: torch.Tensor | None = None,
                  rule: str | None = None) -> ToleranceResult:
    """Fail unless ``actual`` meets ``bound`` (default: the profile's output bound for its dtype)."""
    __tracebackhide__ = True
    rule_id = subject.rule_for(rule)
    if bound is None:
        bound = subject.profile.output_bound(str(actual.dtype).removeprefix("torch."))
    result = compare_within(actual, reference, bound, correctly_rounded=correctly_rounded)
    recorded = subject.record(rule_id, case, dim, result.passed, result.describe(), result)
    if not result.passed:
        _fail(subject, rule_id, case, what, result.describe(), recorded)
    return result


def assert_holds(subject: Subject, case: Any, *, ok: bool, what: str, dim: int, rule: str | None = None) -> None:
    """Fail unless ``ok``; for rules with no numbers to report (errors raised, dtypes, purity)."""
    __tracebackhide__ = True
    rule_id = subject.rule_for(rule)
    recorded = subject.record(rule_id, case, dim, ok, what)
    if not ok:
        _fail(subject, rule_id, case, what, what, recorded)


def reference_fp32(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The contract's reference: fp32 RMSNorm of the very inputs the backend received, upcast."""
    return reference.reference_fp32(x.float(), w.float(), eps)


def correctly_rounded(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The fp64 oracle, for ULP bounds against the correctly rounded value."""
    return reference.oracle_fp64(x.float(), w.float(), eps)


def conformance(rules: str | Sequence[str], case_type: type, cases: Callable[[Subject], st.SearchStrategy[Any]],
                *, skip_reason: Callable[[Subject], str | None] | None = None) -> Callable[[Callable], Callable]:
    """Declare a conformance test: the contract rule(s) it checks and the cases it sweeps.

    The returned test is a Hypothesis test itself (``@given`` on the very function pytest collects), so
    ``--hypothesis-show-statistics``, ``--hypothesis-seed``, the falsifying example and
    ``@reproduce_failure`` work as users know them. Cases are drawn inside it with ``data.draw`` because
    the strategy depends on the subject (its dtype, and a smaller size budget for interpreted backends).
    Under ``--replay`` the one named case runs instead of a sweep, in tests that take its ``case_type``.
    ``skip_reason`` says why a subject cannot
    be held to this rule (e.g. no backward), and the test is skipped with that reason. The rule ids go on
    the ``conformance`` marker, so the rule -> test map is derived from the suites, never kept by hand.
    """
    declared = (rules,) if isinstance(rules, str) else tuple(rules)
    for rule_id in declared:
        rule(rule_id)  # an unknown id fails at import, naming the known ones

    def decorate(check: Callable[[Subject, Any], None]) -> Callable[..., None]:
        def test(subject: Subject, data: st.DataObject) -> None:
            reason = skip_reason(subject) if skip_reason else None
            if reason:
                pytest.skip(reason)
            if subject.replay_case is not None:
                case = subject.replay_case
            else:
                case = data.draw(cases(subject), label="case")
                for label in case_events(case):
                    event(label)
            subject.rules = declared
            check(subject, case)

        test.__name__ = check.__name__
        test.__qualname__ = check.__qualname__
        test.__module__ = check.__module__
        test.__doc__ = check.__doc__
        hypothesis_test = active_settings()(given(data=st.data())(test))
        marker = pytest.mark.conformance(rules=declared, case_types=(case_type.__name__,))
        return marker(hypothesis_test)

    return decorate


def case_events(case: Any) -> list[str]:
    """Labels for ``--hypothesis-show-statistics``: what kind of case was drawn, not its exact values."""
    batch = getattr(case, "batch", None)
    if batch is None:
        return []
    labels = [f"dim {batch.dim}" if batch.dim in TARGET_DIM_SET else "dim other", f"values {batch.values}"]
    rows = batch.rows
    labels.append("rows 1" if rows == 1 else "rows < 16" if rows < 16 else "rows >= 16")
    for name in ("layout", "content"):
        value = getattr(case, name, None)
        if value is not None:
            labels.append(f"{name} {value}")
    return labels
