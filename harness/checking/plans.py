"""Conformance tests over explicit cases, beside the Hypothesis sweeps: the contract's thresholds, QK-norm's
shapes and first calls, which every run must check rather than reach by chance.

Hypothesis' ``@example`` cannot depend on the subject (its device's SM count, its budget, its entry points),
so these are plain tests over a plan of cases made for the subject. They declare their rule like the sweeps
do, record every check, and say in the report what the element budget left out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ...contract import rule
from ..drawing.budget import describe, threshold_elements
from ..drawing.sweeps import SWEEPS
from ..drawing.thresholds import Plan
from ..running.entry_points import entry_points
from .checks import run_check

PlanMaker = Callable[..., Plan]


def explicit_cases(rule_id: str, case_type: type, plan: PlanMaker, *, replayed_here: bool = False,
                   entries: Callable[[Any], Sequence[str]] = entry_points, budget_share: int = 1,
                   skip_reason: Callable[[Any], str | None] | None = None,
                   room: Callable[..., tuple[int, str]] | None = None
                   ) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Declare a test that runs ``check(subject, case, memo)`` on every case of ``plan``, in order, each as a
    sweep's example runs (its own deadline; a backend's exception fails the rule with that case's replay).

    ``plan(dtype, device, budget, source, entries, dims=...)`` makes the cases for the subject's dtype and device,
    the threshold budget (harness/drawing/budget.py), the entry points the backend offers and the dims the run
    checks at its thresholds (the contract's and a model's own: ``Subject.threshold_dims``). ``memo`` is one dict
    for the whole plan, so consecutive cases of one batch compute the whole batch once (``memo["plan"]`` lists every
    case, for checks that run several at once). Under ``--replay`` the
    replayed case runs here if ``replayed_here``, else in the sweep test of the same rule and case type,
    and this test is skipped. ``entries(backend)`` gives the entry points the plan is made for (default: the
    plain norm's), ``budget_share`` divides the threshold budget, and ``skip_reason`` says why a subject is
    not held to the plan, as for sweeps. ``room(device, interpreted=, option=)`` gives the budget and its source
    where a plan's memory needs differ from the threshold checks' (default: ``threshold_elements`` and
    ``describe``).
    """
    rule(rule_id)  # an unknown id fails at import, naming the known ones

    def decorate(check: Callable[..., None]) -> Callable[..., None]:
        def test(subject: Any, request: pytest.FixtureRequest) -> None:
            reason = skip_reason(subject) if skip_reason else None
            if reason:
                pytest.skip(reason)
            if subject.replay_case is not None:
                if not replayed_here:
                    pytest.skip(f"--replay runs the case in the sweep test of {rule_id}")
                cases: list[Any] = [subject.replay_case]
            else:
                sweep = subject.sweep
                offered = tuple(entries(subject.backend))
                budget, source = _budget(subject, subject.max_elements_option, budget_share, room, sweep, offered)
                made = plan(subject.dtype, subject.device, budget, source, offered, dims=subject.threshold_dims)
                cases = _planned_cases(subject, made, sweep)
            memo: dict[Any, Any] = {"plan": cases}
            if subject.replay_case is None:
                # The same plan for other entry points (a budget share each), for checks that make several
                # entry points' cases at once: the first calls, one fresh process for all of them.
                memo["plan_for"] = functools.partial(_plan_for, subject, request.config, plan, room)
            for case in cases:
                run_check(subject, (rule_id,), case, functools.partial(check, subject, case, memo))

        test.__name__ = check.__name__
        test.__qualname__ = check.__qualname__
        test.__module__ = check.__module__
        test.__doc__ = check.__doc__
        return pytest.mark.conformance(rules=(rule_id,), case_types=(case_type.__name__,))(test)

    return decorate


def _plan_for(subject: Any, config: pytest.Config, plan: PlanMaker, room: Callable[..., tuple[int, str]] | None,
              entries: Sequence[str], budget_share: int) -> list[Any]:
    """The cases ``plan`` makes for ``entries`` under ``budget_share``, as a test of those entry points makes them
    for this subject; none where the sweep's scope leaves them all out."""
    sweep = subject.sweep
    budget, source = _budget(subject, subject.max_elements_option, budget_share, room, sweep, entries)
    made = plan(subject.dtype, subject.device, budget, source, tuple(entries), dims=subject.threshold_dims)
    scope = _scope(sweep)
    return [subject.with_weight_dtype(c) for c in made.cases if scope is None or scope.covers(c)]


def _scope(sweep: str | None) -> Any:
    """The share of the plans a sweep that is not the gate keeps (smoke's), or None for the whole of them."""
    return SWEEPS[sweep].scope if sweep else None


def _budget(subject: Any, option: int | None, budget_share: int,
            room: Callable[..., tuple[int, str]] | None, sweep: str | None = None,
            entries: Sequence[str] = ()) -> tuple[int, str]:
    """The elements a plan may use on the subject's device, and where that number comes from: ``room``'s, else
    the threshold checks' budget, capped by the sweep's scope, divided by ``budget_share`` (the entry points
    ``entries`` share it)."""
    interpreted = bool(getattr(subject.backend.impl, "interpreted", False))
    if room is None:
        budget = threshold_elements(subject.device, interpreted=interpreted, option=option)
        source = describe(subject.device, interpreted=interpreted, option=option)
    else:
        budget, source = room(subject.device, interpreted=interpreted, option=option)
    scope = _scope(sweep)
    if scope is not None and budget > scope.threshold_elements:
        budget, source = scope.threshold_elements, f"--sweep={sweep}"
    budget //= budget_share
    if budget_share > 1:
        named = f" ({', '.join(entries)})" if entries else ""
        source += f", 1/{budget_share} of it for each of the entry points that share it{named}"
    return budget, source


def _planned_cases(subject: Any, made: Plan, sweep: str | None = None) -> list[Any]:
    """The plan's cases (those the sweep's scope keeps) in the subject's weight dtype; what the budget left out is
    said in the report as not run, and a plan with nothing in reach skips the test with the reason rather than
    passing it vacuously."""
    if made.skipped and not made.cases:
        pytest.skip(made.skipped)
    scope = _scope(sweep)
    kept = [c for c in made.cases if scope is None or scope.covers(c)]
    if scope is not None and not kept:
        pytest.skip(f"--sweep={sweep} leaves out these cases; a full run adds {scope.leaves_out()}")
    if made.skipped:
        subject.collector.add_not_run(subject.backend.name, str(subject.device), made.skipped)
    # Plans are made in x's dtype; the weight's (of a declared pair) goes into each case, as in sweeps.
    return [subject.with_weight_dtype(c) for c in kept]
