"""The plugin's hooks and the fixtures' bodies for a conformance run: the run's options resolved, the
parametrization over (backend, device, dtype), the subjects tests run against, and each test's records.

``hooks.py`` registers this module once a run is a conformance run (``activation.py`` says when), so a pytest run
with the plugin installed and no conformance test never imports torch. What the options resolved to lives in
``options.RunOptions`` (in ``config.stash``, in every process); the report's hooks in ``reporter.Reporter``,
registered on the controller only.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from ...contract import (
    DEFAULT_PROFILE,
    MIXED_PAIR_AXES,
    PAIR_SWEPT_AXES,
    WEIGHTLESS_RULES,
    Profile,
)
from ...contract import profile as contract_profile
from ...contract import rule as contract_rule
from ...contract.families import parity as parity_rules
from ...contract.families import semantics
from ..checking import refusals
from ..checking.checks import Subject, apply_sweep
from ..checking.known_failures import manifest_rows
from ..drawing.budget import sweep_elements
from ..drawing.sweeps import SWEEPS
from ..reporting.ci_output import CiOutput
from ..running import device_faults, exception_text, fresh_process, isolation, warm_up
from ..running.backend import BackendError, dtype_name, plain_tensors
from ..running.devices import device_unavailable_reason, worker_device
from ..running.hangs import HangLedger
from ..running.isolation import CaseTimedOut, EndedByTimer, RunDeadlineReached
from ..vocabulary.records import Check, Collector
from . import options as given_options
from . import worker_exit
from .outcomes import (
    ENDED_PROPERTY,
    FAILURE_PROPERTY,
    RECORDS_PROPERTY,
    RULES_PROPERTY,
    SUBJECT_PROPERTY,
    subject_from_id,
)
from .outcomes import where as test_params
from .replay_commands import parity_replay_command, replay_command
from .reporter import Reporter, write_usage_error
from .run_options import RunOptions, resolve
from .state import (
    DECLARED_RULES,
    FAILURE,
    HANGS,
    HARNESS_WATCH,
    INTERRUPTS,
    LEDGER_PATH,
    OPTIONS,
    RECORDS,
    RUNNING,
    SUBJECT,
    WARM_UPS,
    WORKER_HANGS,
)


def run_options(config: pytest.Config) -> RunOptions:
    """The run's resolved options, resolved on first use. Resolving makes this a conformance run: the controller
    (or the only process) then registers the reporter. A usage error still replaces the report files it can,
    with a NOT RUN report that says why."""
    if OPTIONS not in config.stash:
        if INTERRUPTS not in config.stash:  # before any backend is imported or called (isolation.no_exit)
            config.stash[INTERRUPTS] = isolation.watch_interrupts()
            _tolerant_output()
        try:
            options = resolve(config)
        except pytest.UsageError as exc:
            write_usage_error(list(given_options.of(config).report), str(exc))
            raise
        config.stash[OPTIONS] = options
        workerinput = getattr(config, "workerinput", None)
        # A worker's ledger is the controller's file; the controller's is named when its first worker starts
        # (controller.py), before or after this.
        config.stash[HANGS] = HangLedger(workerinput.get(WORKER_HANGS) if workerinput
                                         else config.stash.get(LEDGER_PATH, None))
        if workerinput and workerinput.get(WORKER_HANGS):  # the run's shared folder: one first-call process
            fresh_process.SHARED_DIR = Path(workerinput[WORKER_HANGS]).parent
        if workerinput is None:
            reporter = Reporter(config, options)
            config.pluginmanager.register(reporter, "rmsnorm-conformance-reporter")
            config.pluginmanager.register(CiOutput(reporter), "rmsnorm-conformance-ci-output")
            config.pluginmanager.register(CrashesOnTheLedger(config), "rmsnorm-conformance-crashes")
            isolation.WATCHDOG.on_hang = lambda message: reporter.ended(message, _running_failure(config, message))
            if options.options.workers and not options.replay_case \
                    and WARM_UPS not in config.stash:  # not started early (plugin/hooks.py)
                config.stash[WARM_UPS] = warm_up.start(options.backends, options.devices, options.options.workers)
            deal_one_at_a_time(config)
        else:  # a worker the watchdog ends is replaced: the ledger spares its successor the same hang
            worker_exit.conformance_run()
            isolation.WATCHDOG.on_hang = lambda message: _note_hang(config, *config.stash.get(RUNNING, ({}, None)))
    return config.stash[OPTIONS]


def _tolerant_output() -> None:
    """The run's terminal output escapes what its encoding cannot write (``\\udcff``): a kernel's exception text
    that is no UTF-8 (a lone surrogate) printed raw bytes into the log, or ended the print."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]


def pytest_unconfigure(config: pytest.Config) -> None:
    config.stash.get(INTERRUPTS, lambda: None)()
    warm_ups = config.stash.get(WARM_UPS, None)
    if warm_ups:
        warm_up.stop(warm_ups)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Past the run's --deadline, no test starts: the run stops, and the report says what never ran."""
    options = item.config.stash.get(OPTIONS, None)
    if options is None or not options.run_ends_at or time.time() < options.run_ends_at:
        return None
    item.session.shouldstop = f"the run's deadline (--deadline={options.deadline:g}) passed"
    return True


def pytest_collection_finish(session: pytest.Session) -> None:
    """The suites' functions are watched as the harness's are from their collection on, and the harness modules
    they imported (both import after the backends do)."""
    watch = session.config.stash.get(HARNESS_WATCH, None)
    if watch is not None:
        watch.add_modules(("harness", "contract", "suites"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A conformance test fails where code run in it replaced the harness's own functions, each put back now: with
    ``checks.assert_holds`` made a no-op every later check had passed, with ``json.dumps`` patched the JSON report
    said PASS of a run that failed. Read at the test's end (``isolation.HarnessWatch``), not around each call."""
    watch = item.config.stash.get(HARNESS_WATCH, None)
    if watch is None or not {"subject", "parity"} & set(getattr(item, "fixturenames", ())):
        return (yield)
    try:
        result = yield
    except refusals.OutsideDeclaredLimits as exc:
        # A call from the test's own body, not through a check (which notes it and goes on), at a shape the backend
        # declares it does not take: the test is not run, with the limit, never an error of the backend's.
        _harness_intact(watch)
        subject = getattr(item, "funcargs", {}).get("subject")
        if subject is not None:
            refusals.skip_outside_limits(subject, exc)
        pytest.skip(str(exc))
    except refusals.Refused as refused:
        # A clean refusal of a valid input, met in the test's own body: recorded as refused (failing only under
        # --strict-interface), and the test, which could not go on, is not run.
        _harness_intact(watch)
        subject = getattr(item, "funcargs", {}).get("subject")
        if subject is not None:
            refusals.record(subject, subject.rules or _declared_rules(item), subject.current_case, refused.found)
        pytest.skip(f"not run: {refused}")
    except BaseException:
        _harness_intact(watch)
        raise
    _harness_intact(watch)
    return result


def _declared_rules(item: pytest.Item) -> tuple[str, ...]:
    marker = item.get_closest_marker("conformance")
    return tuple(marker.kwargs.get("rules", ())) if marker is not None else (refusals.REFUSED,)


def _harness_intact(watch: isolation.HarnessWatch) -> None:
    replaced = watch.replaced()
    if replaced:
        pytest.fail(f"contract rule semantics.global_state broken: code run in this test replaced the harness's "
                    f"own functions ({watch.shown(replaced)}); put back now. A kernel under test may not change the "
                    "harness that checks it.", pytrace=False)


def _note_hang(config: pytest.Config, key: dict, subject: Subject | None, test: str = "") -> None:
    """Put the backend (or parity pair) on the hang ledger, with the case it hung at."""
    if not key or subject is None:
        return
    where = repr(subject.current_case) + (f" in {test}" if test else "")
    config.stash[HANGS].note(key["backend"], key["device"], where)


def _running_failure(config: pytest.Config, message: str) -> dict[str, str] | None:
    """The running case as a failure of its test's rule, with its replay, for a process about to be ended."""
    key, subject = config.stash.get(RUNNING, ({}, None))
    if subject is None or not subject.rules:
        return None
    rule, case = subject.rules[0], subject.current_case
    return {"nodeid": subject.nodeid, "rule": rule, "replay": subject.replay_command(case, rule),
            "reason": f"contract rule {rule}: {subject.backend.name} {message}: {case!r}"[:300], **key}


def _skip_if_hung(request: pytest.FixtureRequest) -> None:
    key = request.node.stash[SUBJECT]
    why = request.config.stash[HANGS].given_up(key["backend"], key["device"])
    if why:
        pytest.skip(f"not run: {key['backend']} {why}")


class CrashesOnTheLedger:
    """On a pytest-xdist controller: a worker that died in a backend's test (a segfault, an abort, os._exit) puts
    that backend and device on the hang ledger, so its later tests there are skipped ("not run: ... crashed its
    process on cpu at ...") instead of killing one worker after another until xdist stops the run. The crashed test
    itself still fails (xdist's report, pinned on the backend, device and rule by the reporter). A worker ended on
    purpose after a device fault (device_lost.py) is no crash of the backend's and is left alone."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True, trylast=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        if any(name == ENDED_PROPERTY for name, _ in report.user_properties):
            return
        options, ledger = self.config.stash.get(OPTIONS, None), self.config.stash.get(HANGS, None)
        if options is None or ledger is None:
            return
        subject = subject_from_id(crashitem, test_params(crashitem), options.backends,
                                  self.config.stash.get(DECLARED_RULES, {}))
        where = crashitem.rsplit("/", 1)[-1]
        if subject:
            ledger.note(subject["backend"], subject["device"], where, "crashed its process")
            return
        calling = ledger.crashed_in(crashitem)  # a test of several backends: the one it was calling
        if calling:
            ledger.note(*calling, where, "crashed its process")
            report.longrepr = f"{report.longrepr} (calling {calling[0]} on {calling[1]})"


def generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize a conformance test over the run's (backend, device, dtype), its parity pairs or its devices."""
    run = run_options(metafunc.config)
    marker = metafunc.definition.get_closest_marker("conformance")
    if marker is not None and parity_rules.BITWISE.id in marker.kwargs.get("rules", ()):
        pairs = [(pair, dtype) for pair in run.parity_pairs for dtype in run.dtypes]
        if not pairs:  # said in words, not as pytest's "got empty parameter set"
            reason = "the parity gate runs only for pairs asked for with --require-parity=A:B or --modes"
            metafunc.parametrize("subject", [pytest.param(None, marks=pytest.mark.skip(reason=reason))],
                                 ids=["no-pairs"], indirect=True)
            return
        metafunc.parametrize("subject", pairs, ids=[f"{p.label}-{t}" for p, t in pairs], indirect=True)
        return
    if "parity" in metafunc.fixturenames:
        devices = [(device, dtype) for device in run.devices for dtype in run.dtypes]
        metafunc.parametrize("parity", devices, ids=[f"{d}-{t}" for d, t in devices], indirect=True)
        return
    rules = marker.kwargs.get("rules", ()) if marker else ()
    # A sweep that is not the gate (smoke) sweeps the other declared pairs only for the mixed-pair rules, and
    # each test in the dtypes its scope gives its rules unless --dtype named them.
    scope = SWEEPS[run.sweep].scope
    every_pair = scope is None and any(
        r.split(".", 1)[0] in PAIR_SWEPT_AXES and r not in WEIGHTLESS_RULES for r in rules)
    dtypes = run.dtypes
    if scope is not None and not run.options.dtype:
        dtypes = tuple(d for d in run.dtypes if d in scope.dtypes_for(tuple(rules)))
    mixed_only = bool(rules) and all(r.split(".", 1)[0] in MIXED_PAIR_AXES for r in rules)
    params, ids = [], []
    for backend in run.backends:
        for device in run.devices:
            for dtype in dtypes:
                # Each declared (x dtype, weight dtype) pair, for the rules swept over pairs; the primary one
                # (the weight in x's dtype, if declared) for the others, and its id stays the plain dtype.
                weights = [dtype_name(w) for w in backend.weight_dtypes(getattr(torch, dtype))] or [dtype]
                chosen = weights if every_pair else weights[:1]
                if mixed_only:  # the other pairs, or the primary one to skip with its reason
                    chosen = [w for w in weights if w != dtype] or weights[:1]
                for weight_dtype in chosen:
                    params.append((backend, device, dtype, weight_dtype))
                    ids.append(f"{backend.name}-{device}-{dtype}"
                               + (f"-w_{weight_dtype}" if weight_dtype != dtype else ""))
    metafunc.parametrize("subject", params, ids=ids, indirect=True)


@pytest.hookimpl(tryfirst=True)  # before a conftest's own order (the project's tests start its long ones first)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each conformance test gets its sweep's settings; under pytest-xdist the longest tests go first;
    ``--rule`` keeps the tests whose ``conformance`` marker names a matching rule; ``--replay`` keeps the tests
    that take the replayed case's type and dtype."""
    if OPTIONS not in config.stash:
        return
    run = config.stash[OPTIONS]
    for item in items:
        if item.get_closest_marker("conformance") is not None:
            apply_sweep(item.obj, run.settings)  # type: ignore[attr-defined]  # a pytest.Function
    if getattr(config, "workerinput", None) is not None:
        longest_first(items)
    if run.rules or run.replay_case is not None:
        _select(config, run, items)


def _select(config: pytest.Config, run: RunOptions, items: list[pytest.Item]) -> None:
    """Keep the tests of ``--rule`` and ``--replay``; deselect the rest."""
    from fnmatch import fnmatchcase

    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("conformance")
        if marker is None:
            drop.append(item)
            continue
        rules = marker.kwargs.get("rules", ())
        ok = not run.rules or any(fnmatchcase(r, p) for r in rules for p in run.rules)
        if ok and run.replay_case is not None:
            ok = _takes_case(item, run.replay_case)
        (keep if ok else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if run.replay_case is not None and not keep:
        case = run.replay_case
        raise pytest.UsageError(
            f"--replay: no selected conformance test takes {type(case).__name__} in "
            f"{getattr(getattr(case, 'batch', None), 'dtype', '?')}; select the test and dtype the failure named "
            "(--rule, --dtype)")


# Words of the names of the suites' longest tests, longest first: the parity gate's pairs of a backend and its own
# compiled or captured path compile every shape they compare (7.6-22.2 s a test on an H200 in the RL command; dealt
# last, they ran one after another for the last 93 s of the run while the other workers had ended); each first-call test
# waits on a fresh process (torch's import, and on a GPU the device's start and every compile), and the others draw
# large batches, build graphs or sweep every dim. On an H200 under -n 8 they took 4-13 s a test, the others 2 s or less
# (a Triton run's junit); on two CPU cores native's threshold plans took 5-12 s and its first calls 2.6 s, against 1.6 s
# and less for the others (CI's junit).
LONGEST = ("test_bitwise_parity", "first_call", "test_bounds", "test_isolation", "_past_int32_offsets",
           "test_dx_batch_invariance", "test_gradient_accuracy", "execution_mode", "_at_thresholds",
           "test_dw_determinism", "_qk_norm")


def deal_one_at_a_time(config: pytest.Config) -> None:
    """pytest-xdist's controller deals the tests one at a time (``--maxschedchunk=1``), unless told otherwise.

    Its ``load`` scheduling otherwise starts each worker on a run of consecutive tests, a quarter of its share: the
    first worker got the first run, and with the longest tests first (``longest_first``) that was all of them. Under
    the RL command the parity gate's 20 tests (178 worker-seconds) ran one after another on one worker, the last of
    them ending 33 s after the other workers had run out of tests (on an H200). Dealt one at a time, each worker
    holds two tests and takes the next longest as it finishes one. A ``--maxschedchunk`` given, or another
    ``--dist``, is kept."""
    option = config.option
    if getattr(option, "dist", None) == "load" and getattr(option, "maxschedchunk", 0) is None:
        option.maxschedchunk = 1


def longest_first(items: list[pytest.Item]) -> None:
    """Order a pytest-xdist worker's collection so that the longest tests are handed out first (every worker
    collects the same order; the controller deals from it): begun last, one of them holds up the end of the
    run while the other workers wait. Only the order changes, never what runs."""
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("conformance") is None:
            return len(LONGEST)
        return next((i for i, word in enumerate(LONGEST) if word in item.name), len(LONGEST))

    items.sort(key=rank)


def _takes_case(item: pytest.Item, case: Any) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "subject" not in callspec.params:
        return False
    params = callspec.params["subject"]
    # (backend, device, x dtype, weight dtype), or the parity gate's (pair, dtype)
    dtype, weight_dtype = (params[2], params[3]) if len(params) == 4 else (params[-1], params[-1])
    batch = getattr(case, "batch", None)
    if batch is None or batch.dtype != dtype or batch.weight_dtype != weight_dtype:
        return False
    marker = item.get_closest_marker("conformance")
    case_types = marker.kwargs.get("case_types", ()) if marker else ()
    return not case_types or type(case).__name__ in case_types


def subject(request: pytest.FixtureRequest) -> Subject:
    """The (backend, device, dtype) a conformance test runs against; skipped with the reason if it cannot run.
    For the parity gate, a pair of them: the subject calls the left side, ``subject.other`` the right."""
    config = request.config
    run = config.stash[OPTIONS]
    if len(request.param) == 2:
        return _pair_subject(request, run)
    backend, device, dtype, weight_dtype = request.param
    request.node.stash[SUBJECT] = {"backend": backend.name, "device": str(device)}
    _skip_if_hung(request)
    device = worker_device(device)
    try:
        reason = device_unavailable_reason(device) or _probe(backend, device, _test_records(request, run), dtype,
                                                             request.node.nodeid, own=request)
    except BackendError as exc:
        pytest.fail(f"backend {backend.name!r} cannot say whether it runs on {device}: {exc}", pytrace=False)
    if reason:
        pytest.skip(reason)
    if getattr(torch, dtype) not in backend.dtypes:
        pytest.skip(f"{backend.name} does not support {dtype}")
    if getattr(torch, weight_dtype) not in backend.weight_dtypes(getattr(torch, dtype)):
        pytest.skip(f"{backend.name} declares no {weight_dtype} weight with {dtype} x")
    interpreted = bool(getattr(backend.impl, "interpreted", False))
    max_elements = sweep_elements(device, interpreted=interpreted, option=run.options.max_elements)
    hypothesis_test = getattr(request.node.obj, "hypothesis", None)
    if hypothesis_test is not None:
        # Each (backend, device, dtype) gets its own example database key and, under a derandomized sweep, its
        # own examples; the key leaves out the path, so the examples are the same from a clone or a wheel.
        hypothesis_test.inner_test._hypothesis_internal_add_digest = request.node.name.encode()
    device_option = str(request.param[1])

    def replay(rule_id: str, case: Any) -> str:
        return replay_command(backend, device_option, dtype, rule_id, case, run.contract_profile,
                              run.options.flag)

    def on_failure(rule_id: str, reason: str, replay_line: str) -> None:
        request.node.stash[FAILURE] = {"rule": rule_id, "reason": reason, "replay": replay_line}

    made = Subject(backend=backend, device=device, dtype=dtype, weight_dtype=weight_dtype,
                   profile=contract_profile(run.contract_profile),
                   collector=_test_records(request, run), nodeid=request.node.nodeid, replay=replay,
                   on_failure=on_failure, max_elements=max_elements, replay_case=run.replay_case,
                   manifest=run.manifest, strict_interface=run.strict_interface,
                   case_timeout=run.case_timeout, run_ends_at=run.run_ends_at, mode_sample=run.mode_sample,
                   shrink=run.shrink, sweep=run.sweep, max_elements_option=run.options.max_elements,
                   record_all=bool(run.options.write_known_failures), model_dims=run.model_dims)
    config.stash[RUNNING] = (request.node.stash[SUBJECT], made)
    return made


def _pair_subject(request: pytest.FixtureRequest, run: RunOptions) -> Subject:
    pair, dtype = request.param
    config = request.config
    sides = []
    for backend, device in ((pair.left_backend, pair.left_device), (pair.right_backend, pair.right_device)):
        device = worker_device(device)
        try:
            reason = device_unavailable_reason(device) or backend.unavailable_reason(device)
        except BackendError as exc:
            pytest.fail(f"backend {backend.name!r} cannot say whether it runs on {device}: {exc}", pytrace=False)
        if reason:
            pytest.skip(f"parity {pair.label}: {reason}")
        if getattr(torch, dtype) not in backend.dtypes:
            pytest.skip(f"parity {pair.label}: {backend.name} does not support {dtype}")
        sides.append((backend, device))
    request.node.stash[SUBJECT] = {"backend": pair.label, "device": pair.device_label}
    _skip_if_hung(request)
    records = _test_records(request, run)
    profile_ = contract_profile(run.contract_profile)
    max_elements = min(sweep_elements(d, interpreted=bool(getattr(b.impl, "interpreted", False)),
                                      option=run.options.max_elements) for b, d in sides)

    def on_failure(rule_id: str, reason: str, replay_line: str) -> None:
        request.node.stash[FAILURE] = {"rule": rule_id, "reason": reason, "replay": replay_line}

    def replay(rule_id: str, case: Any) -> str:
        return parity_replay_command(pair, dtype, case, run.options.flag)

    def make(backend: Any, device: torch.device) -> Subject:
        return Subject(backend=backend, device=device, dtype=dtype, profile=profile_, collector=records,
                       nodeid=request.node.nodeid, replay=replay, on_failure=on_failure, max_elements=max_elements,
                       replay_case=run.replay_case, manifest=run.manifest, case_timeout=run.case_timeout,
                       run_ends_at=run.run_ends_at, shrink=run.shrink, sweep=run.sweep,
                       max_elements_option=run.options.max_elements, strict_interface=run.strict_interface,
                       record_all=bool(run.options.write_known_failures))

    left, right = make(*sides[0]), make(*sides[1])
    left.other = right
    left.record_as = (pair.label, pair.device_label)
    config.stash[RUNNING] = (request.node.stash[SUBJECT], left)
    return left


class Parity:
    """Every selected backend that can run on one device, for the informational cross-backend table."""

    def __init__(self, backends: list, device: torch.device, dtype: str, collector: Collector, *,
                 case_timeout: float = 0.0, hangs: HangLedger | None = None, device_key: str = "",
                 nodeid: str = "", profile: Profile | None = None, strict_interface: bool = False) -> None:
        self.backends = backends
        self.profile = profile or contract_profile(DEFAULT_PROFILE)  # the bounds the run holds outputs to
        self.strict_interface = strict_interface
        self.nodeid = nodeid
        self.device = device
        self.dtype = dtype
        self.collector = collector
        self.case_timeout = case_timeout
        self.hangs = hangs
        self.device_key = device_key or str(device)

    def taking(self, x: torch.Tensor, w: torch.Tensor) -> list:
        """The backends whose declared limits take ``x`` and ``w``: a kernel is compared only on the inputs it says
        it takes, as its own tests hold it only to those."""
        return [b for b in self.backends if b.limits.outside(("x", "weight"), (x, w)) is None]

    def forward(self, backend: Any, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor | None:
        """``backend.forward`` under the case deadline; a backend that hangs goes on the hang ledger, and one whose
        fault loses the device ends the comparison as not run (its own tests record the fault against it). A clean
        refusal of the input is recorded as refused and gives None (the backend sits out this shape). Any other
        exception, an exit, or torch's global state left changed fails the comparison naming the backend."""
        what = f"{backend.name} on {self.device}, {self.dtype}, cross-backend parity at {tuple(x.shape)}"
        in_flight = self.hangs.in_flight(backend.name, self.device_key, self.nodeid) if self.hangs is not None \
            else contextlib.nullcontext()
        before = isolation.global_state()
        try:
            with in_flight, isolation.no_exit(backend.name), isolation.deadline(self.case_timeout, what), \
                    device_faults.calling(backend.name, self.device, "forward"):
                out = backend.forward(x.clone(), w.clone(), eps)  # one that writes its inputs spoils no other's
                plain_tensors(backend.name, "forward", out)
                device_faults.settle(self.device)
            diff = isolation.put_back(before)  # inside the try: a device lost shows where the state is read
        except CaseTimedOut:
            if self.hangs is not None:
                self.hangs.note(backend.name, self.device_key, what)
            raise
        except Exception as exc:
            lost = device_faults.context_lost(self.device, exc)  # asked first: a lost context fails every read
            if lost is not None:
                self._lost(backend, x, f"{backend.name} raised {type(exc).__name__} during cross-backend parity at "
                                       f"{tuple(x.shape)}; {lost}")
            self._put_back(backend, before, what)
            found = refusals.refusal("forward", (x, w), exc)
            if found is None:
                raise AssertionError(f"{what}: {backend.name} raised {exception_text.described(exc)}") from exc
            self._refused(backend, found)
            return None
        if diff:
            raise AssertionError(f"{what}: {backend.name} left torch's global state changed: {'; '.join(diff)}")
        return out

    def _lost(self, backend: Any, x: torch.Tensor, detail: str) -> None:
        """``backend``'s call lost the device: ``semantics.device_fault`` fails for it alone, the process ends after
        this test, and the table is not run ("not run: the device was lost")."""
        rule_id = semantics.DEVICE_FAULT.id
        self.collector.add(Check(backend.name, str(self.device), self.dtype, x.shape[-1] if x.dim() else 0, rule_id,
                                 False, case=f"cross-backend parity at {tuple(x.shape)}", detail=detail,
                                 severity=contract_rule(rule_id).severity, gating=True))
        device_faults.declare_lost(device_faults.Lost(detail, backend.name, str(self.device), self.nodeid))
        pytest.skip(f"{device_faults.NOT_RUN_REASON}: {detail}")

    def _refused(self, backend: Any, found: refusals.Refusal) -> None:
        """A clean refusal of the table's input: recorded as refused, and the backend left out of that shape's
        comparison; under --strict-interface it fails the table, as a refusal fails any check then."""
        refusals.record_refused(self.collector, backend.name, str(self.device), self.dtype, "cross-backend parity",
                                found, gating=self.strict_interface)
        if self.strict_interface:
            pytest.fail(f"refused input (fails under --strict-interface): {backend.name} on {self.device}, "
                        f"{self.dtype}, cross-backend parity: {found.method} with {found.input} raised "
                        f"{found.exception}", pytrace=False)

    @staticmethod
    def _put_back(backend: Any, before: dict[str, Any], what: str) -> None:
        """torch's global state as it was before ``backend``'s call, as every other check's calls leave it
        (``Subject.isolated``): a change fails the comparison naming the backend, so that no later backend's check
        in this process runs under it."""
        diff = isolation.put_back(before)
        if diff:
            raise AssertionError(f"{what}: {backend.name} left torch's global state changed: {'; '.join(diff)}")


def parity(request: pytest.FixtureRequest) -> Parity:
    """The backends to compare with each other on one (device, dtype); skipped when fewer than two can run."""
    device, dtype = request.param
    device = worker_device(device)
    run = request.config.stash[OPTIONS]
    reason = device_unavailable_reason(device)
    if reason:
        pytest.skip(reason)
    hangs = request.config.stash[HANGS]
    key = str(request.param[0])
    records = _test_records(request, run)
    runnable = [b for b in run.backends if _runs_on(b, device, records, dtype, request.node.nodeid)
                and getattr(torch, dtype) in b.dtypes and not hangs.hung(b.name, key)]
    if len(runnable) < 2:
        pytest.skip(f"cross-backend parity needs two backends that run on {device} (and have not hung or crashed); "
                    f"have {', '.join(b.name for b in runnable) or 'none'}")
    return Parity(runnable, device, dtype, records, case_timeout=run.case_timeout, hangs=hangs,
                  device_key=key, nodeid=request.node.nodeid, profile=contract_profile(run.contract_profile),
                  strict_interface=run.strict_interface)


def _runs_on(backend: Any, device: torch.device, records: Collector, dtype: str, nodeid: str) -> bool:
    try:
        return _probe(backend, device, records, dtype, nodeid) is None
    except BackendError:
        return False  # its own tests fail with the probe's error


def _probe(backend: Any, device: torch.device, records: Collector, dtype: str, nodeid: str,
           own: pytest.FixtureRequest | None = None) -> str | None:
    """``backend.unavailable_reason(device)``, a call of the backend's like any other: where its error leaves the
    device lost (a probe that launches a kernel), ``semantics.device_fault`` fails for it and the process ends
    after this test. The backend's ``own`` test fails on it; a test of others (the cross-backend table) is not run
    ("not run: the device was lost"), never failed on a context they did not break."""
    try:
        with device_faults.calling(backend.name, device, "unavailable_reason"):
            return backend.unavailable_reason(device)
    except BackendError as exc:
        lost = device_faults.context_lost(device, exc.__cause__ or exc)
        if lost is None:
            raise
        rule_id = semantics.DEVICE_FAULT.id
        detail = f"{exc}; {lost}"
        records.add(Check(backend.name, str(device), dtype, 0, rule_id, False, case="its availability probe",
                          detail=detail, severity=contract_rule(rule_id).severity, gating=True))
        device_faults.declare_lost(device_faults.Lost(detail, backend.name, str(device), nodeid))
        if own is not None:
            reason = f"contract rule {rule_id} ({contract_rule(rule_id).title}): {detail}"
            own.node.stash[FAILURE] = {"rule": rule_id, "reason": reason, "replay": ""}
            pytest.fail(reason, pytrace=False)
        pytest.skip(f"{device_faults.NOT_RUN_REASON}: {backend.name}'s availability probe lost it ({detail})")


def _test_records(request: pytest.FixtureRequest, run: RunOptions) -> Collector:
    """A collector for one test's checks. They travel to the report inside the test's own report
    (``user_properties``), so pytest-xdist carries them to the controller as each test ends, and an
    interrupted run still reports every test that finished."""
    records = Collector(expected=manifest_rows(run.manifest) if run.manifest else [])
    request.node.stash[RECORDS] = records
    return records


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    _make_printable(call)
    outcome = yield
    report = outcome.get_result()
    _fill_report(item, call, report)
    _make_encodable(report)


_PYTEST_OUTCOMES = (pytest.fail.Exception, pytest.skip.Exception, pytest.xfail.Exception, pytest.exit.Exception)


def _make_printable(call: pytest.CallInfo) -> None:
    """The test's exception, and each one chained to it, as pytest can print them, before it formats them: a
    kernel's exception whose ``str()`` raised ended the run in pytest's internal error, the other backends' tests
    unrun, and one of 10 MB went whole into the log (``exception_text``). pytest's own outcomes stay what they
    are."""
    if call.excinfo is None:
        return
    value = call.excinfo.value
    shown = exception_text.printable(value, keep_first=isinstance(value, _PYTEST_OUTCOMES))
    if shown is not value and shown.__traceback__ is not None:
        call.excinfo = pytest.ExceptionInfo.from_exception(shown)


def _make_encodable(report: pytest.TestReport) -> None:
    """Text a kernel put into a report (an exception's message, what it printed) that is no UTF-8, a lone surrogate,
    escaped (``\\udcff``): pytest-xdist could not send such a report to the controller, the worker stopped with an
    internal error and the run ended INCOMPLETE, every other backend's tests with it."""
    if not _encodable(report.longrepr):
        report.longrepr = _escaped(str(report.longrepr))
    report.sections = [(_escaped(title), _escaped(text)) for title, text in report.sections]
    report.user_properties = [(name, _escaped_tree(value)) for name, value in report.user_properties]


@pytest.hookimpl(tryfirst=True)
def pytest_warning_recorded(warning_message: Any, when: str, nodeid: str, location: Any) -> None:
    """A warning's text escaped as a report's is (``_make_encodable``), before pytest-xdist sends it on: an
    interface warning quoting a kernel's exception, or a kernel's own warning, that is no UTF-8 had ended the
    worker."""
    message = warning_message.message
    text = str(message)
    if _escaped(text) == text:
        return
    if isinstance(message, Warning):
        message.args = (_escaped(text),)
    else:
        warning_message.message = _escaped(text)


def _encodable(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, tuple):
        return all(_encodable(v) for v in value)
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escaped(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _escaped_tree(value: Any) -> Any:
    if isinstance(value, str):
        return _escaped(value)
    if isinstance(value, dict):
        return {_escaped_tree(k): _escaped_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_escaped_tree(v) for v in value)
    return value


def _fill_report(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    subject = item.stash.get(SUBJECT, None)
    if subject is not None:
        _attach_subject(item, report, subject)
    if call.excinfo is not None and isinstance(call.excinfo.value, (CaseTimedOut, EndedByTimer)):
        report.longrepr = f"{item.name}: {call.excinfo.value}"
    if call.excinfo is not None and isinstance(call.excinfo.value, CaseTimedOut) and report.when == "call":
        _note_hang(item.config, item.stash.get(SUBJECT, {}), getattr(item, "funcargs", {}).get("subject"),
                   item.name)
    if call.excinfo is not None and isinstance(call.excinfo.value, RunDeadlineReached):
        # Cut short by the run's deadline: not finished, and no finding about the backend.
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"not finished: {call.excinfo.value}")
    if report.when == "setup" and not report.passed:
        _attach_records(item, report)  # what a fixture found before the test could run (a probe's device fault)
    if report.when != "call":
        return
    notes = getattr(call.excinfo.value, "__notes__", None) if call.excinfo is not None else None
    if report.failed and notes and "Falsifying example" not in report.longreprtext:
        # A contract failure prints without a traceback; keep Hypothesis' falsifying example and
        # @reproduce_failure blob, which it attaches to the exception as notes.
        report.longrepr = report.longreprtext + "\n\n" + "\n".join(str(n) for n in notes)
    records = item.stash.get(RECORDS, None)
    if records is not None:
        _expected_only(report, records)
    _attach_records(item, report)


def _attach_records(item: pytest.Item, report: pytest.TestReport) -> None:
    """The test's records and its failure, into the report that carries them to the controller."""
    records = item.stash.get(RECORDS, None)
    if records is not None:
        report.user_properties.append((RECORDS_PROPERTY, records.to_json()))
    failure = item.stash.get(FAILURE, None)
    if failure is not None and report.failed:
        report.user_properties.append((FAILURE_PROPERTY, failure))


def _expected_only(report: pytest.TestReport, records: Collector) -> None:
    """A test that passed every check but those the known-failure manifest expects reads as xfailed, naming the
    entries it met; one with an unexpected breach failed on it (with its replay) whatever else it met. Under
    --write-known-failures a breach does not end its test: the test fails here, listing each rule it broke."""
    met = [e for e in records.expected if e["breached"]]
    broken = [s for s in records.summaries.values() if s.failures]
    if report.passed and broken:
        report.outcome = "failed"
        report.longrepr = "\n".join(
            f"contract rule {s.rule} broken by backend {s.backend!r} on {s.device}, {s.dtype} in {s.failures} "
            f"checks (every case ran to its end: --write-known-failures)\n  {s.failing_detail}\n"
            f"  smallest failing configuration: {s.failing_case}\n  replay: {s.replay}" for s in broken)
    elif report.passed and met:
        report.outcome = "skipped"
        report.wasxfail = "expected breach: " + "; ".join(
            f"{e['rule']} on {e['backend']}, {e['device']} ({e['reason']})" for e in met)


def _attach_subject(item: pytest.Item, report: pytest.TestReport, subject: dict) -> None:
    """The test's backend, device and rule on its report, for the controller's records; on the teardown report, as
    the flat strings JUnit XML writes instead. Where pytest left the file out of the node id (``--pyargs
    'module::test'`` run from outside the package gives ``::test_x[...]``), the suite's module goes with them, so
    that the report still names the test as ``--pyargs`` takes it."""
    if report.when == "teardown":
        report.user_properties += _junit_properties(item, subject)
        return
    if report.nodeid.startswith("::"):
        subject = {**subject, "suite": item.path.stem}
    report.user_properties.append((SUBJECT_PROPERTY, subject))
    marker = item.get_closest_marker("conformance")
    if report.when == "setup" and marker is not None:
        report.user_properties.append((RULES_PROPERTY, list(marker.kwargs.get("rules", ()))))


def _junit_properties(item: pytest.Item, subject: dict) -> list[tuple[str, str]]:
    """rule, backend, device, dtype, severity, replay and interface warnings of a test, for its <testcase>."""
    from ..reporting.ci_output import junit_properties

    marker = item.get_closest_marker("conformance")
    callspec = getattr(item, "callspec", None)
    params = callspec.params.get("subject") if callspec is not None else None
    dtype = ""
    if isinstance(params, tuple) and len(params) == 4:  # (backend, device, x dtype, weight dtype)
        dtype = params[2] if params[3] == params[2] else f"{params[2]}-w_{params[3]}"
    elif isinstance(params, tuple) and len(params) == 2:  # the parity gate's (pair, dtype)
        dtype = str(params[1])
    return junit_properties(rules=tuple(marker.kwargs.get("rules", ())) if marker else (),
                            backend=subject["backend"], device=subject["device"], dtype=dtype,
                            failure=item.stash.get(FAILURE, None), records=item.stash.get(RECORDS, None))
