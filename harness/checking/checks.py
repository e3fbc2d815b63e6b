"""What a conformance test holds: the subject under test, the assertion helpers that record every verdict
for the report, and the decorator that turns a check into a Hypothesis sweep (or a replay of one case).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException, UnsatisfiedAssumption

from ...contract import TARGET_DIMS, Profile, reference, rule
from ...contract import rule as contract_rule
from ...contract.families import semantics, variants
from ...contract.rmsnorm import THRESHOLD_DIMS
from ..drawing.cases import Batch, drawing_device, torch_dtype
from ..drawing.sweeps import sweep_settings
from ..running import device_faults, exception_text, isolation
from ..running.backend import Backend, plain_tensors
from ..running.entry_points import ENTRY_POINTS
from ..vocabulary.records import Check, Collector
from . import bounds, diagnosis, refusals
from .comparison import (
    BitwiseResult,
    ToleranceResult,
    compare_bitwise,
    compare_within,
    equal_flag,
    read_flags,
    same_bits_flag,
)
from .known_failures import Manifest

TARGET_DIM_SET = frozenset(TARGET_DIMS.values())
# Rules every backend call is held to, whichever test makes the call.
CROSS_CUTTING_RULES = frozenset({semantics.GLOBAL_STATE.id, semantics.FRESH_OUTPUT.id, semantics.PURITY.id,
                                 variants.PURITY.id, semantics.BOUNDS.id, semantics.DEVICE_FAULT.id})


def _dim(case: Any) -> int:
    batch = getattr(case, "batch", None)
    return batch.dim if batch is not None else 0


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
    case_timeout: float = 0.0
    run_ends_at: float = 0.0  # time.time() at which the run's --deadline passes (0: none)
    sweep: str = ""  # the run's sweep (--sweep, or its default): its scope may leave out explicit cases
    max_elements_option: int | None = None  # --max-elements as given; None: each budget's own default
    current_case: Any = None
    # The last call's method and its outputs, each with a fingerprint taken at once: the next call must not
    # change them (fresh_output).
    _last_output: tuple[str, list[tuple[str, torch.Tensor, torch.Tensor]]] | None = None
    # The parity gate: the other side of the pair, and the (pair label, devices) its checks are recorded under.
    other: Subject | None = None
    record_as: tuple[str, str] | None = None
    weight_dtype: str = ""  # the weight's dtype, when the backend declares that pair; default x's
    # (entry point, dim, dtypes, device) keys already called once: the Axis-A checks warm each up first.
    warmed: set[tuple[Any, ...]] = dataclasses.field(default_factory=set)
    # Inside ``judging_exceptions()``: the check judges its calls' exceptions itself, so they are no refusals.
    _judging: bool = False
    mode_sample: bool = True  # run the execution-mode sample (axis_a.execution_mode); --modes=none turns it off
    shrink: bool = True  # a failing drawn case is shrunk to the simplest one (--no-shrink: reported as drawn)
    # --write-known-failures: every breach is recorded and the test goes on to its end, so that the baseline lists
    # each breach the sweep meets, not only the first of each test; the plugin fails the test afterwards.
    record_all: bool = False
    records: int = 0  # checks recorded so far: a case that ran out of memory is tried again only if it recorded none
    failed: bool = False  # a gating breach was recorded and the test went on (``record_all``)
    model_dims: tuple[int, ...] = ()  # a model's own dims (--dims): drawn by the sweeps, checked at the thresholds
    # The diagnoses of this test's bitwise breaches (checking/diagnosis.py), one per (rule, entry point, output).
    diagnoses: dict[tuple[str, ...], Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.weight_dtype = self.weight_dtype or self.dtype

    def __repr__(self) -> str:
        # What Hypothesis prints in a falsifying example: which subject, not its whole state.
        return f"Subject({self.backend.name!r}, {self.device}, {self.dtype_label})"

    @property
    def threshold_dims(self) -> tuple[int, ...]:
        """The dims the explicit cases run at: the contract's threshold dims, then the model's own (``--dims``)."""
        return tuple(dict.fromkeys((*THRESHOLD_DIMS, *self.model_dims)))

    @property
    def dtype_label(self) -> str:
        """The dtype as reports show it: x's, and the weight's where it differs (as in the test id)."""
        return self.dtype if self.weight_dtype == self.dtype else f"{self.dtype}-w_{self.weight_dtype}"

    def with_weight_dtype(self, case: Any) -> Any:
        """``case`` with its batch's weight in the subject's weight dtype: strategies draw x's dtype only. For a
        kernel that takes no eps (``fixed_eps``, see running/adapters.py), the batch's eps is the one it uses."""
        batch: Any = getattr(case, "batch", None)
        fixed_eps = getattr(self.backend.impl, "fixed_eps", None) if hasattr(self.backend, "impl") else None
        changes: dict[str, Any] = {}
        if batch is not None and batch.weight_dtype != self.weight_dtype:
            changes["weight_dtype"] = self.weight_dtype
        if batch is not None and fixed_eps is not None and batch.eps != fixed_eps:
            changes["eps"] = fixed_eps
        if not changes:
            return case
        return dataclasses.replace(case, batch=dataclasses.replace(batch, **changes))

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def rule_for(self, rule_id: str | None) -> str:
        """The rule an assertion records: the test's declared rule, or one of them named explicitly (or a
        cross-cutting rule every call is held to)."""
        if rule_id is None:
            if len(self.rules) != 1:
                raise TypeError(f"this test declares rules {self.rules}: name the one an assertion checks")
            return self.rules[0]
        if self.rules and rule_id not in self.rules and rule_id not in CROSS_CUTTING_RULES:
            raise ValueError(f"rule {rule_id!r} is not declared on this test (declared: {', '.join(self.rules)})")
        return rule_id

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    def to_device(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.device)

    def forward(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        """The backend's forward, isolated and watched (see :meth:`call`)."""
        return self.call("forward", x, w, eps)

    def forward_fp32(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        return self.call("forward_fp32", x, w, eps)

    @contextlib.contextmanager
    def isolated(self, what: str) -> Iterator[None]:
        """Run backend code with torch's global state watched and exits refused. A change of global state is
        put back and fails ``semantics.global_state``."""
        __tracebackhide__ = True
        before = isolation.global_state()
        with isolation.no_exit(self.backend.name), device_faults.watch(self.backend.name, self.device, what):
            yield
            diff = isolation.put_back(before)  # inside the watch: a device lost shows where the state is read
        if diff:
            kept = device_faults.lost_where_kept(before, f"{self.backend.name}.{what}", self.backend.name,
                                                 str(self.device), self.nodeid)
            assert_holds(self, self.current_case, ok=False, rule=semantics.GLOBAL_STATE.id, dim=_dim(self.current_case),
                         what=f"{self.backend.name}.{what} left torch's global state changed: {'; '.join(diff)}"
                              + (" (not put back: this process ends after this test)" if kept else ""))

    def call(self, method: str, *args: Any) -> Any:
        """Call ``backend.method(*args)`` isolated; check that it returned tensors, changed none of its inputs
        (unless it declares that it writes them) and did not change any output it returned last time. A backend
        that writes into its caller's tensors thus fails its purity rule at that very call, and one that reuses
        an output buffer fails ``semantics.fresh_output`` at its next call, before any Axis-A comparison could
        blame the overwritten bits on the batch."""
        __tracebackhide__ = True
        entry = ENTRY_POINTS.get(method)
        refusals.check_limits(self.backend, method, args)  # outside what it declares it takes: not run
        watched = [(i, a, isolation.fingerprint(a)) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        guarded = bounds.GuardedCall(method, args)  # every tensor argument inside guard zones (semantics.bounds)
        try:
            with self.isolated(method):
                out = getattr(self.backend, method)(*guarded.args)
        except Exception as exc:
            self._refused(method, args, exc, guarded, watched)
            raise
        # What the call may have broken, read back from the device at once (comparison.read_flags): its guard zones'
        # canaries, whether it wrote into its arguments' views, its earlier outputs' and its inputs' fingerprints.
        zones = guarded.watched(out)
        earlier = self._last_output[1] if self._last_output is not None else []
        # An in-place entry point's adapter hands it copies (harness/running/backend.py): the caller's inputs stay.
        pure = entry is not None and not entry.writes_in_place(self.backend)
        values = iter(read_flags([
            *(z.intact(t) for z, t, _ in zones),
            *(same_bits_flag(z.view, z.original) for z in guarded.zones),
            *(equal_flag(isolation.fingerprint(t), then) for _, t, then in earlier),
            *(equal_flag(isolation.fingerprint(t), then) for _, t, then in (watched if pure else ())),
        ]))
        intact = [next(values) for _ in zones]
        views_kept = [next(values) for _ in guarded.zones]
        earlier_kept: list[bool] | None = [next(values) for _ in earlier]
        inputs_kept: list[bool] | None = [next(values) for _ in (watched if pure else ())]
        self._check_bounds(method, bounds.located(zones, intact))
        out = guarded.release(out, views_kept)  # what the call wrote into its arguments reaches the caller's tensors
        if not all(views_kept):  # a copy back may have changed what the fingerprints were taken of: read them again
            earlier_kept = inputs_kept = None
        tensors = plain_tensors(self.backend.name, method, out)
        if pure:
            self._check_pure(entry, args, watched, inputs_kept)
        self._check_fresh(method, earlier_kept)
        names = entry.outputs if entry is not None and len(entry.outputs) == len(tensors) else [
            f"output {i}" for i in range(len(tensors))]
        self._last_output = (method, [(name, t, isolation.fingerprint(t))
                                     for name, t in zip(names, tensors, strict=True)])
        return out

    def backward(self, y: torch.Tensor, grad: torch.Tensor, zones: Sequence[Any] = ()) -> None:
        """``y.backward(grad)`` through the backend's backward, isolated and watched as a call is: a clean exception
        there is a refusal of the input, as in a forward call, unless it wrote into one of the guard ``zones``."""
        __tracebackhide__ = True
        try:
            with self.isolated("backward"):
                y.backward(grad)
        except Exception as exc:
            if not any(z.written() for z in zones):
                self._refused("backward", (y, grad), exc)
            raise

    @contextlib.contextmanager
    def judging_exceptions(self) -> Iterator[None]:
        """The check judges the exceptions of the calls made inside itself: input the contract says the backend must
        reject (a wrong-shaped weight, a bad eps, a dtype it does not take), or an empty batch of a dim the backend
        just took. An exception there is the check's answer, never a refusal."""
        self._judging = True
        try:
            yield
        finally:
            self._judging = False

    def _refused(self, method: str, args: Sequence[Any], error: Exception, guarded: bounds.GuardedCall | None = None,
                 watched: Sequence[tuple[int, torch.Tensor, Any]] = ()) -> None:
        """Raise :class:`refusals.Refused` in place of ``error`` where it is a clean refusal of a valid input: the one
        place every check's calls are judged so, whatever the check does with the exceptions it expects."""
        __tracebackhide__ = True
        found = None if self._judging else refusals.refusal(method, args, error, guarded, watched)
        if found is not None:
            raise refusals.Refused(found) from error

    def _check_pure(self, entry: Any, args: tuple[Any, ...], watched: list[tuple[int, torch.Tensor, Any]],
                    same: list[bool] | None = None) -> None:
        """The purity check of an entry point that does not write in place. ``same``: whether each watched input's
        fingerprint is unchanged, where the caller read it already."""
        __tracebackhide__ = True
        names = [*entry.rows, "weight"] if entry.weighted else list(entry.rows)
        if same is None:
            same = read_flags([equal_flag(isolation.fingerprint(t), then) for _, t, then in watched])
        changed = [names[i] if i < len(names) else f"argument {i}"
                   for (i, _, _), kept in zip(watched, same, strict=True) if not kept]
        if changed:
            assert_holds(self, self.current_case, ok=False, rule=entry.purity_rule, dim=_dim(self.current_case),
                         what=f"{self.backend.name}.{entry.name} changed its input {', '.join(changed)} during the "
                              "call, and does not declare that it writes it")

    def _check_bounds(self, method: str, breaches: list[str]) -> None:
        __tracebackhide__ = True
        if breaches:
            assert_holds(self, self.current_case, ok=False, rule=semantics.BOUNDS.id, dim=_dim(self.current_case),
                         what=f"{self.backend.name}.{method} wrote outside the tensors it was given: "
                              + "; ".join(breaches))

    def _check_fresh(self, method: str, same: list[bool] | None = None) -> None:
        """``same``: whether each earlier output's fingerprint is unchanged, where the caller read it already."""
        __tracebackhide__ = True
        if self._last_output is None:
            return
        earlier, outputs = self._last_output
        self._last_output = None
        if same is None:
            same = read_flags([equal_flag(isolation.fingerprint(t), print_then) for _, t, print_then in outputs])
        changed = [name for (name, _, _), kept in zip(outputs, same, strict=True) if not kept]
        if changed:
            assert_holds(self, self.current_case, ok=False, rule=semantics.FRESH_OUTPUT.id, dim=_dim(self.current_case),
                         what=f"{', '.join(changed)} that an earlier {earlier} call returned changed during a later "
                              f"{method} call: the backend reuses its output buffer")

    def inputs(self, batch: Batch, *, rows: int | None = None, salt: int = 0,
               drawn_on_device: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """x and weight of ``batch`` on the subject's device, made on the CPU, so the same on any device, unless x
        is large enough to be drawn on the GPU itself (cases.drawing_device). ``drawn_on_device`` draws x on the
        device whatever its size: for batches of billions of elements that would take minutes to draw on the host,
        in checks that compare rows of one device with each other."""
        where = self.device if drawn_on_device else drawing_device(
            (rows if rows is not None else batch.rows) * batch.dim, self.device)
        return self.to_device(batch.x(rows, salt, device=where)), self.to_device(batch.w())

    def replay_command(self, case: Any, rule_id: str) -> str:
        """One command, to run from any directory where the backend imports, that re-runs just this case in this
        test (selected by the test's own rule, also when the breach is of a cross-cutting rule)."""
        declared = rule_id if rule_id in self.rules or not self.rules else self.rules[0]
        return self.replay(declared, case)

    def gates(self, rule_id: str) -> bool:
        """Does a breach of this rule fail the run? Numerics rules always; interface rules only when strict."""
        return contract_rule(rule_id).severity == "numerics" or self.strict_interface

    def record(self, rule_id: str, case: Any, dim: int, passed: bool, detail: str,
               result: ToleranceResult | None = None, diagnosis: dict | None = None) -> tuple[str, str | None]:
        """Send the verdict to the report; return the replay command and, if a manifest expects this
        breach, its reason."""
        replay = self.replay_command(case, rule_id)
        stats: dict[str, Any] = {}
        if result is not None and result.problem is None:
            stats = {"max_abs": result.max_abs, "max_rel": result.max_rel, "max_ulp": result.max_ulp,
                     "margin": result.margin}
            if rule_id.startswith("axis_b.") and result.ulp_hist:
                stats["ulp_hist"] = list(result.ulp_hist)  # the report's ULP-error histogram
        backend_name, device_name = self.record_as or (self.backend.name, str(self.device))
        expected = self._expected(rule_id, case, backend_name, device_name)
        self.records += 1
        self.collector.add(Check(backend_name, device_name, self.dtype_label, dim, rule_id, passed,
                                 case=repr(case), detail="" if passed else detail,
                                 replay="" if passed else replay, expected=expected, size=case_size(case),
                                 severity=contract_rule(rule_id).severity, gating=self.gates(rule_id),
                                 diagnosis=diagnosis, **stats))
        reason = self.manifest.entries[expected].reason if expected >= 0 and self.manifest else None
        return replay, reason

    def _expected(self, rule_id: str, case: Any, backend_name: str, device_name: str) -> int:
        """The index of the manifest entry that expects a breach of ``rule_id`` on ``case``, or -1. A parity pair's
        checks match its own backend's name or the pair's label ("a=b"), under which a baseline lists them."""
        if self.manifest is None:
            return -1
        shown = repr(case)
        for backend, device in dict.fromkeys([(self.backend.name, str(self.device)), (backend_name, device_name)]):
            match = self.manifest.match(backend, device, self.dtype_label, rule_id, shown)
            if match is not None:
                return match
        return -1


def case_size(case: Any) -> int:
    """Elements in a case's batch: how a report picks the smallest failing case."""
    batch = getattr(case, "batch", None)
    return batch.rows * batch.dim if batch is not None else 0


def _fail(subject: Subject, rule_id: str, case: Any, what: str, detail: str,
          recorded: tuple[str, str | None]) -> None:
    """Fail the test with the rule, what differed, the case and the replay. A breach the manifest expects is noted
    and the test goes on, as after an interface warning: whether it breaks anything else is decided check by check
    (the plugin reads a test whose only breaches were expected as xfailed)."""
    __tracebackhide__ = True
    replay, expected = recorded
    r = contract_rule(rule_id)
    message = (f"contract rule {rule_id} ({r.title}) broken by backend {subject.backend.name!r} on "
               f"{subject.device}, {subject.dtype_label}: {what}\n  {detail}\n  rule: {r.statement}\n"
               f"  {'minimal' if subject.shrink else 'failing (not shrunk: --no-shrink)'} configuration: {case!r}\n"
               f"  replay: {replay}")
    if expected is not None:
        return
    if subject.record_all and subject.gates(rule_id):
        if not subject.failed:
            subject.on_failure(rule_id, f"contract rule {rule_id} ({r.title}): {what}", replay)
        subject.failed = True
        return
    if not subject.gates(rule_id):
        # An interface breach: recorded, and the test goes on. No pytest warning a case: the run's summary sums
        # them up per backend and rule (hundreds of warnings buried the verdict), and the report has each one.
        return
    subject.on_failure(rule_id, f"contract rule {rule_id} ({r.title}): {what}", replay)
    pytest.fail(message, pytrace=False)


def assert_bitwise(subject: Subject, case: Any, *, actual: torch.Tensor, expected: torch.Tensor, what: str,
                   dim: int, rule: str | None = None, nan_payloads: bool = True,
                   upstream: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> BitwiseResult:
    """Fail unless ``actual`` and ``expected`` have identical bits (NaN payloads ignored when ``nan_payloads``
    is False); record the verdict either way. ``upstream``: the same calls' outputs that ``actual`` is computed
    from, by name, as (actual, expected): a breach's diagnosis names the stage of the first of them that differs."""
    __tracebackhide__ = True
    rule_id = subject.rule_for(rule)
    result = compare_bitwise(actual, expected, nan_payloads=nan_payloads)
    found = None if result.equal else diagnosis.for_breach(subject, case, rule_id, actual, expected, what,
                                                           upstream=upstream)
    recorded = subject.record(rule_id, case, dim, result.equal, result.describe(),
                              diagnosis=found.to_dict() if found is not None else None)
    if not result.equal:
        _fail(subject, rule_id, case, what, result.describe() + (f"\n  {found.text()}" if found else ""), recorded)
    return result


def assert_within(subject: Subject, case: Any, *, actual: torch.Tensor, reference: torch.Tensor, what: str,
                  dim: int, bound: Any = None, correctly_rounded: torch.Tensor | None = None,
                  rule: str | None = None, terms: torch.Tensor | None = None) -> ToleranceResult:
    """Fail unless ``actual`` meets ``bound`` (default: the profile's output bound for its dtype); ``terms`` is the
    size of the terms each element sums, for a bound that allows roundings of them (the gradients')."""
    __tracebackhide__ = True
    rule_id = subject.rule_for(rule)
    if bound is None:
        bound = subject.profile.output_bound(str(actual.dtype).removeprefix("torch."))
    result = compare_within(actual, reference, bound, correctly_rounded=correctly_rounded, terms=terms)
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
    """The contract's reference: fp32 RMSNorm of the very inputs the backend received, upcast (by the reference
    itself, exactly: no fp32 copy of x first; an fp32 weight is a pair the reference takes with any x)."""
    return reference.reference_fp32(x, w.float(), eps)


def correctly_rounded(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """The fp64 oracle, for ULP bounds against the correctly rounded value."""
    return reference.oracle_fp64(x.float(), w.float(), eps)


def conformance(rules: str | Sequence[str], case_type: type | tuple[type, ...],
                cases: Callable[[Subject], st.SearchStrategy[Any]],
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
    # Strategies draw x's dtype; the subject's weight dtype goes into each drawn case here, outside the test's
    # own body, whose source Hypothesis hashes into the derandomized examples of the ci sweep.
    cases = _in_weight_dtype(cases)

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
            run_check(subject, declared, case, lambda: check(subject, case))

        test.__name__ = check.__name__
        test.__qualname__ = check.__qualname__
        test.__module__ = check.__module__
        test.__doc__ = check.__doc__
        hypothesis_test = sweep_settings("dev")(given(data=st.data())(test))
        case_types = case_type if isinstance(case_type, tuple) else (case_type,)
        marker = pytest.mark.conformance(rules=declared, case_types=tuple(t.__name__ for t in case_types))
        return marker(hypothesis_test)

    return decorate


def apply_sweep(test: Callable[..., Any], sweep: settings) -> None:
    """Hold a collected conformance test to the run's sweep (``--sweep``, ``--max-examples``, ``--replay``).

    The suites are imported before any run's options are known, so a test is defined under the ``dev`` sweep and
    the plugin sets the run's settings on it at collection. Hypothesis reads them from the test when it runs;
    ``@settings`` itself refuses a second application, hence the attribute.
    """
    cap = getattr(test, "_rmsnorm_conformance_max_examples", None)
    if cap is not None and sweep.max_examples > cap:
        sweep = settings(sweep, max_examples=cap)
    test._hypothesis_internal_use_settings = sweep  # type: ignore[attr-defined]


def cap_examples(test: Callable[..., Any], max_examples: int) -> None:
    """Hold a sweep test to at most ``max_examples`` drawn examples under any sweep (``apply_sweep`` reads it):
    for samples whose every example is costly, such as the execution modes' compiles."""
    test._rmsnorm_conformance_max_examples = max_examples  # type: ignore[attr-defined]


def _in_weight_dtype(cases: Callable[[Subject], st.SearchStrategy[Any]]) -> Callable[[Subject], st.SearchStrategy]:
    def drawn(subject: Subject) -> st.SearchStrategy[Any]:
        return cases(subject).map(subject.with_weight_dtype)

    return drawn


# Out of memory is tried again, the cache emptied and a pause between tries: pytest-xdist workers share a GPU, and
# one's peak can leave another's case a few MiB short (three correct backends once failed a check each on
# an H200 shared by 16 workers, with 11-320 MiB free). A case that runs out of memory on every try fails, as before.
OOM_TRIES = 3
OOM_PAUSE_S = 0.5


def run_check(subject: Subject, declared: tuple[str, ...], case: Any, check: Callable[[], None]) -> None:
    """Run one case's check as every conformance test does (a sweep's example or an explicit case): under the
    case deadline, with the backend's exceptions and timeouts recorded as failures of the declared rule."""
    __tracebackhide__ = True
    subject.rules = declared
    subject.current_case = case
    what = f"{subject.backend.name} on {subject.device}, {subject.dtype_label}, {case!r}"
    seconds, cut_by_run = _seconds_allowed(subject, what)
    for attempt in range(1, OOM_TRIES + 1):
        try:
            error = _run_once(subject, declared, case, check, what, seconds, cut_by_run, attempt=attempt)
        finally:
            device_faults.give_back_surplus(subject.device)  # what it kept beyond its share, others may need
        if error is None:
            return
        # Out of memory before the case recorded anything: the same case again, with the memory given back.
        device_faults.start_clean(error, subject.device)
        if attempt == 1:  # counted once a case
            backend, device = subject.record_as or (subject.backend.name, str(subject.device))
            subject.collector.add_retried(backend, device, subject.dtype_label, declared[0])
        time.sleep(OOM_PAUSE_S * attempt)


def _run_once(subject: Subject, declared: tuple[str, ...], case: Any, check: Callable[[], None], what: str,
              seconds: float, cut_by_run: bool, *, attempt: int) -> BaseException | None:
    """Try ``attempt`` of ``run_check``: the out-of-memory error, where it is not the last try and the case
    recorded nothing before it (a try again would count its checks twice); else None, whatever the case gave."""
    __tracebackhide__ = True
    records = subject.records
    subject._last_output = None
    try:
        with isolation.deadline(seconds, what):
            check()
    except refusals.OutsideDeclaredLimits as exc:
        refusals.skip_outside_limits(subject, exc)  # declared: not run, with the limit as the reason
    except refusals.Refused as refused:
        refusals.record(subject, declared, case, refused.found)  # a clear exception on a valid input: not a breach
    except isolation.CaseTimedOut as exc:
        if cut_by_run:  # the run's deadline, not the case's: no finding about the backend
            raise isolation.RunDeadlineReached(f"the run's deadline (--deadline) passed during {what}") from None
        # Recorded, then raised past Hypothesis: shrinking would run more cases that may hang as long.
        _record_failure(subject, declared[0], case, f"{subject.backend.name} {exc}")
        raise
    except device_faults.DeviceFault as fault:
        # Recorded against the backend that raised it, then past Hypothesis: the process ends after this test.
        record_device_fault(subject, declared, case, fault)
        raise
    except (HypothesisException, UnsatisfiedAssumption):
        raise
    except Exception as exc:
        return _raised(subject, declared, case, exc, tries=attempt,
                       retry=attempt < OOM_TRIES and subject.records == records)
    except BaseException as exc:
        if not getattr(exc, "ended_by_timer", False):
            raise
        # Another plugin's timer (pytest-timeout) ended the case (its handler ran and said so): the case is
        # recorded against the declared rule with its replay, as a case timeout is, and the test ends here.
        detail = f"{subject.backend.name} was ended by a test timeout during {case!r}: {exc}"
        _record_failure(subject, declared[0], case, detail)
        raise isolation.EndedByTimer(detail) from exc
    return None


def _raised(subject: Subject, declared: tuple[str, ...], case: Any, exc: Exception, *, tries: int,
            retry: bool) -> BaseException | None:
    """A case's exception (a refusal came as :class:`refusals.Refused`, recorded before): out of memory, where
    ``retry``, returned to be tried again; anything else a failure of the declared rule."""
    __tracebackhide__ = True
    if retry and device_faults.out_of_memory(exc):
        return exc
    # The backend raised (or returned something that is not a tensor): a failure of this check,
    # with the exception, the case and a replay, never a quiet error outside the verdict.
    detail, recorded = _record_raised(subject, declared[0], case, exc, tries=tries)
    try:
        _fail(subject, declared[0], case, f"{subject.backend.name} {detail}", detail, recorded)
    except (pytest.fail.Exception, pytest.xfail.Exception) as failed:
        # Chained to the backend's exception, shown under it; Hypothesis formats that chain inside the test, before
        # any hook of the run's could: one that cannot be shown (its str() raises) goes as exception_text shows it.
        shown = exception_text.printable(exc)
        if shown is exc:
            raise
        raise failed from shown
    return None


def _seconds_allowed(subject: Subject, what: str) -> tuple[float, bool]:
    """The seconds the case may run, and whether the run's deadline (--deadline), nearer than the case's own,
    set them; the run's deadline passed already ends the run here."""
    __tracebackhide__ = True
    seconds, cut_by_run = subject.case_timeout, False
    if subject.run_ends_at:
        left = subject.run_ends_at - time.time()
        if left <= 0:
            raise isolation.RunDeadlineReached(f"the run's deadline (--deadline) passed before {what}")
        if not seconds or left < seconds:
            seconds, cut_by_run = left, True
    return seconds, cut_by_run


def _record_failure(subject: Subject, rule_id: str, case: Any, detail: str) -> None:
    """A case that failed the declared rule and ends the test by an exception raised on past Hypothesis: recorded,
    and its failure and replay handed on for the report."""
    subject.record(rule_id, case, _dim(case), False, detail)
    subject.on_failure(rule_id, f"contract rule {rule_id}: {detail}", subject.replay_command(case, rule_id))


def _record_raised(subject: Subject, rule_id: str, case: Any, exc: Exception,
                   tries: int = 1) -> tuple[str, tuple[str, str | None]]:
    """What the backend raised, recorded against the declared rule, and the device made clean for the next case:
    (the detail, the record's replay and expected breach). A device context lost before any backend call fails
    nobody's check: the test is skipped as not run."""
    __tracebackhide__ = True
    where = traceback.extract_tb(exc.__traceback__)[-1]
    detail = (f"raised {exception_text.described(exc)} (at {where.filename.rsplit('/', 1)[-1]}:"
              f"{where.lineno})")
    lost = device_faults.context_lost(subject.device, exc)
    if lost is not None:  # raised outside any backend call, on a context already gone: nobody's check fails
        device_faults.declare_lost(device_faults.Lost(f"{detail}; {lost}", device=str(subject.device),
                                                      nodeid=subject.nodeid))
        reason = f"{device_faults.NOT_RUN_REASON} before {subject.nodeid} ({detail}; {lost})"
        subject.collector.add_not_run(subject.backend.name, str(subject.device), reason)
        pytest.skip(reason)
    if device_faults.out_of_memory(exc):
        detail += (f" (out of memory on each of {tries} tries, the cache emptied between them; the run goes on)"
                   if tries > 1 else " (out of memory: the cache was emptied and the run goes on)")
    recorded = subject.record(rule_id, case, _dim(case), False, detail)
    device_faults.start_clean(exc, subject.device)
    return detail, recorded


def record_device_fault(subject: Subject, declared: tuple[str, ...], case: Any,
                        fault: device_faults.DeviceFault) -> None:
    """``semantics.device_fault`` failed, for the backend that raised the fault (one side of a parity pair is
    named as itself), with the error, the case and a replay; the process is marked lost."""
    replay = subject.replay_command(case, declared[0])
    rule_id = semantics.DEVICE_FAULT.id
    subject.collector.add(Check(fault.backend, fault.device, subject.dtype_label, _dim(case), rule_id, False,
                                case=repr(case), detail=fault.describe(), replay=replay, size=case_size(case),
                                severity=contract_rule(rule_id).severity, gating=True))
    subject.on_failure(rule_id, f"contract rule {rule_id} ({contract_rule(rule_id).title}): {fault.describe()}",
                       replay)
    device_faults.declare_lost(device_faults.Lost(fault.describe(), fault.backend, fault.device, subject.nodeid))


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
