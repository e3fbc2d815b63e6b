"""What a conformance test holds: the subject under test, the assertion helpers that record every verdict
for the report, and the decorator that turns a check into a Hypothesis sweep (or a replay of one case).
"""

from __future__ import annotations

import functools
import inspect
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from backends.native import NativeRMSNormOp, oracle_fp64
from contract import Profile, rule

from .backend import Backend
from .cases import Batch, torch_dtype
from .comparison import BitwiseResult, ToleranceResult, compare_bitwise, compare_within
from .manifest import Manifest
from .report import Check, Collector

REFERENCE = NativeRMSNormOp()


@dataclass
class Subject:
    """One (backend, device, dtype) under one contract profile, as a conformance test sees it."""

    backend: Backend
    device: torch.device
    dtype: str
    profile: Profile
    collector: Collector
    nodeid: str
    replay_options: list[str]
    max_elements: int
    replay_case: Any = None
    manifest: Manifest | None = None

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

    def replay_command(self, case: Any) -> str:
        """One command, to run from the project root, that re-runs just this case."""
        args = ["pytest", self.nodeid, *self.replay_options]
        return " ".join(shlex.quote(a) for a in args) + " --replay=" + _double_quoted(repr(case))

    def record(self, rule_id: str, case: Any, dim: int, passed: bool, detail: str,
               result: ToleranceResult | None = None) -> tuple[str, str | None]:
        """Send the verdict to the report; return the replay command and, if a manifest expects this
        breach, its reason."""
        replay = self.replay_command(case)
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
                                 **stats))
        reason = self.manifest.entries[expected].reason if expected >= 0 and self.manifest else None
        return replay, reason


def case_size(case: Any) -> int:
    """Elements in a case's batch: how a report picks the smallest failing case."""
    batch = getattr(case, "batch", None)
    return batch.rows * batch.dim if batch is not None else 0


def _double_quoted(text: str) -> str:
    """Case reprs hold only names, numbers and single-quoted words: double quotes keep them readable."""
    if any(ch in text for ch in '"$`\\!'):
        return shlex.quote(text)
    return f'"{text}"'


def _fail(subject: Subject, rule_id: str, case: Any, what: str, detail: str,
          recorded: tuple[str, str | None]) -> None:
    """Fail the test with the rule, what differed, the case and the replay; xfail if the manifest expects it."""
    __tracebackhide__ = True
    replay, expected = recorded
    r = rule(rule_id)
    message = (f"contract rule {rule_id} ({r.title}) broken by backend {subject.backend.name!r} on "
               f"{subject.device}, {subject.dtype}: {what}\n  {detail}\n  rule: {r.statement}\n"
               f"  minimal configuration: {case!r}\n  replay: {replay}")
    if expected is not None:
        pytest.xfail(f"expected breach ({expected}): {message}")
    pytest.fail(message, pytrace=False)


def assert_bitwise(subject: Subject, rule_id: str, case: Any, *, actual: torch.Tensor,
                   expected: torch.Tensor, what: str, dim: int) -> BitwiseResult:
    """Fail unless ``actual`` and ``expected`` have identical bits; record the verdict either way."""
    __tracebackhide__ = True
    result = compare_bitwise(actual, expected)
    recorded = subject.record(rule_id, case, dim, result.equal, result.describe())
    if not result.equal:
        _fail(subject, rule_id, case, what, result.describe(), recorded)
    return result


def assert_within(subject: Subject, rule_id: str, case: Any, *, actual: torch.Tensor,
                  reference: torch.Tensor, what: str, dim: int, bound: Any = None,
                  correctly_rounded: torch.Tensor | None = None) -> ToleranceResult:
    """Fail unless ``actual`` meets ``bound`` (default: the profile's output bound for its dtype)."""
    __tracebackhide__ = True
    if bound is None:
        bound = subject.profile.output_bound(str(actual.dtype).removeprefix("torch."))
    result = compare_within(actual, reference, bound, correctly_rounded=correctly_rounded)
    recorded = subject.record(rule_id, case, dim, result.passed, result.describe(), result)
    if not result.passed:
        _fail(subject, rule_id, case, what, result.describe(), recorded)
    return result


def assert_holds(subject: Subject, rule_id: str, case: Any, *, ok: bool, what: str, dim: int) -> None:
    """Fail unless ``ok``; for rules with no numbers to report (errors raised, dtypes, purity)."""
    __tracebackhide__ = True
    recorded = subject.record(rule_id, case, dim, ok, what)
    if not ok:
        _fail(subject, rule_id, case, what, what, recorded)


def reference_fp32(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The contract's reference: fp32 RMSNorm of the very inputs the backend received, upcast."""
    return REFERENCE.forward_fp32(x.float(), w.float(), eps)


def correctly_rounded(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The fp64 oracle, for ULP bounds against the correctly rounded value."""
    return oracle_fp64(x.float(), w.float(), eps)


def conformance(cases: Callable[[Subject], st.SearchStrategy[Any]],
                *, skip_reason: Callable[[Subject], str | None] | None = None) -> Callable[[Callable], Callable]:
    """Run ``check(subject, case)`` over cases drawn for the subject, or on the one ``--replay`` names.

    Cases are drawn inside the test because the strategy depends on the subject (its dtype, and a smaller
    size budget for interpreted backends). ``skip_reason`` says why a subject cannot be held to this rule
    (e.g. no backward), and the test is skipped with that reason.
    """

    def decorate(check: Callable[[Subject, Any], None]) -> Callable[[Subject], None]:
        @functools.wraps(check)
        def test(subject: Subject) -> None:
            reason = skip_reason(subject) if skip_reason else None
            if reason:
                pytest.skip(reason)
            if subject.replay_case is not None:
                check(subject, subject.replay_case)
                return

            @given(data=st.data())
            def sweep(data: st.DataObject) -> None:
                check(subject, data.draw(cases(subject), label="case"))

            # Every sweep shares this source; the node id keeps their example databases and seeds apart.
            sweep.hypothesis.inner_test._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
                subject.nodeid.encode())
            sweep()

        test.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter("subject", inspect.Parameter.POSITIONAL_OR_KEYWORD)])
        return pytest.mark.conformance(test)

    return decorate
