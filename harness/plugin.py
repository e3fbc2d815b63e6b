"""The pytest plugin: one option group, the ``subject`` fixture that every conformance test runs against,
Hypothesis profiles, and the report at the end of the run (gathered from pytest-xdist workers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings

from contract import DEFAULT_PROFILE, DTYPES, PROFILES, profile

from .backend import Backend
from .cases import parse_case
from .checks import Subject
from .devices import device_unavailable_reason, parse_device_option, worker_device
from .environment import fingerprint
from .manifest import Manifest, entry_status, load_manifest, manifest_rows
from .registry import BUILTIN_BACKENDS, known_backend_names, load_backend, parse_backend_option
from .report import Collector, render_terminal
from .strategies import DEFAULT_MAX_ELEMENTS, INTERPRETED_MAX_ELEMENTS

# Triton reads this when its kernels are defined: on a machine with no GPU, run them in the interpreter.
if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

_HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
           HealthCheck.filter_too_much]
# dev: quick local runs; ci: the same examples every run (derandomized), no example database;
# thorough: a long sweep before shipping a kernel.
settings.register_profile("dev", max_examples=10, deadline=None, suppress_health_check=_HEALTH, print_blob=True)
settings.register_profile("ci", max_examples=12, deadline=None, suppress_health_check=_HEALTH,
                          derandomize=True, database=None, print_blob=True)
settings.register_profile("thorough", max_examples=200, deadline=None, suppress_health_check=_HEALTH,
                          print_blob=True)
DEFAULT_HYPOTHESIS_PROFILE = "ci" if os.environ.get("CI") else "dev"
settings.load_profile(DEFAULT_HYPOTHESIS_PROFILE)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rmsnorm-conformance", "RMSNorm numerical-contract conformance")
    group.addoption(
        "--backend", default=None, metavar="SPEC",
        help="backends to hold to the contract: a name (" + ", ".join(known_backend_names()) + "), a comma "
             "list, 'all', or module.path:attr naming a class, factory or instance "
             "(default: each of native, triton, cuda that can run here).")
    group.addoption(
        "--device", default=None, metavar="DEVICE",
        help="devices to run on: cpu, cuda, cuda:N, all, or a comma list (default: the CPU and every GPU).")
    group.addoption(
        "--report", action="append", default=[], metavar="PATH",
        help="write the tolerance report to PATH: .json as JSON, anything else as markdown (repeatable).")
    group.addoption(
        "--contract-profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES),
        help=f"the bounds to hold outputs to (default: {DEFAULT_PROFILE}).")
    group.addoption(
        "--known-failures", default=None, metavar="PATH",
        help="a manifest (TOML or JSON) of expected breaches per backend, device and rule: they xfail "
             "instead of failing the run.")
    group.addoption(
        "--replay", default=None, metavar="CASE",
        help="run the selected conformance tests on this one case, as a failure printed it, instead of a sweep.")
    group.addoption(
        "--max-elements", type=int, default=None, metavar="N",
        help=f"largest batch (rows x dim) a case may draw (default: {DEFAULT_MAX_ELEMENTS}; "
             f"{INTERPRETED_MAX_ELEMENTS} for interpreted backends).")


@dataclass
class RunState:
    """What the plugin resolved from the options, shared by the fixture and the report hooks."""

    backends: list[Backend] = field(default_factory=list)
    devices: list[torch.device] = field(default_factory=list)
    collector: Collector = field(default_factory=Collector)
    replay_case: Any = None
    manifest: Manifest | None = None
    written: list[str] = field(default_factory=list)


STATE = pytest.StashKey[RunState]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _unloadable(spec: str, reason: str) -> Backend:
    class Unloadable:
        name = spec
        devices = None

        def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
            raise RuntimeError(reason)

        def unavailable_reason(self, device: torch.device) -> str:
            return reason

    return Backend(Unloadable(), spec=spec)


def _resolve_backends(option: str | None, devices: list[torch.device], collector: Collector) -> list[Backend]:
    explicit = bool(option)
    # By default: this project's own backends. Adapters and entry-point backends run when named or with 'all'.
    specs = parse_backend_option(option) if explicit else list(BUILTIN_BACKENDS)
    chosen: list[Backend] = []
    for spec in specs:
        try:
            backend = load_backend(spec)
        except (ImportError, RuntimeError, OSError) as exc:
            if ":" in spec:  # the user's own module: a typo should stop the run, not skip it
                raise pytest.UsageError(f"--backend={spec}: {exc}") from exc
            backend = _unloadable(spec, f"{spec} cannot be loaded: {exc}")
        except (ValueError, TypeError) as exc:
            raise pytest.UsageError(f"--backend: {exc}") from exc
        if explicit:
            chosen.append(backend)
            continue
        reasons = {str(d): device_unavailable_reason(d) or backend.unavailable_reason(d) for d in devices}
        if any(r is None for r in reasons.values()):
            chosen.append(backend)
        else:
            for device, reason in reasons.items():
                collector.add_not_run(backend.name, device, str(reason))
    return chosen


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "conformance: a contract check run once per (backend, device, dtype)")
    state = RunState()
    try:
        state.devices = parse_device_option(config.getoption("--device"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc
    state.backends = _resolve_backends(config.getoption("--backend"), state.devices, state.collector)
    manifest_path = config.getoption("--known-failures")
    if manifest_path:
        try:
            state.manifest = load_manifest(manifest_path)
        except (OSError, ValueError) as exc:
            raise pytest.UsageError(f"--known-failures: {exc}") from exc
        state.collector.expected = manifest_rows(state.manifest)
    replay = config.getoption("--replay")
    if replay:
        try:
            state.replay_case = parse_case(replay)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from exc
    state.collector.environment = fingerprint(state.devices, {
        "contract profile": config.getoption("--contract-profile"),
        "hypothesis profile": config.getoption("--hypothesis-profile", None) or DEFAULT_HYPOTHESIS_PROFILE,
        "backends": ", ".join(b.name for b in state.backends) or "none",
        "command": "pytest " + " ".join(config.invocation_params.args),
    })
    config.stash[STATE] = state
    config.pluginmanager.register(ReportHooks(config, state), "rmsnorm-conformance-report")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = metafunc.config.stash[STATE]
    if "parity" in metafunc.fixturenames:
        pairs = [(device, dtype) for device in state.devices for dtype in DTYPES]
        metafunc.parametrize("parity", pairs, ids=[f"{d}-{t}" for d, t in pairs], indirect=True)
    if "subject" not in metafunc.fixturenames:
        return
    params, ids = [], []
    for backend in state.backends:
        for device in state.devices:
            for dtype in DTYPES:
                params.append((backend, device, dtype))
                ids.append(f"{backend.name}-{device}-{dtype}")
    metafunc.parametrize("subject", params, ids=ids, indirect=True)


@pytest.fixture
def subject(request: pytest.FixtureRequest) -> Subject:
    """The (backend, device, dtype) a conformance test runs against; skipped with the reason if it cannot run."""
    backend, device, dtype = request.param
    config = request.config
    device = worker_device(device)
    reason = device_unavailable_reason(device) or backend.unavailable_reason(device)
    if reason:
        pytest.skip(reason)
    if getattr(torch, dtype) not in backend.dtypes:
        pytest.skip(f"{backend.name} does not support {dtype}")
    interpreted = bool(getattr(backend.impl, "interpreted", False))
    max_elements = config.getoption("--max-elements") or (
        INTERPRETED_MAX_ELEMENTS if interpreted else DEFAULT_MAX_ELEMENTS)
    state = config.stash[STATE]
    options = [f"--backend={backend.spec}", f"--device={request.param[1]}",
               f"--contract-profile={config.getoption('--contract-profile')}"]
    return Subject(backend=backend, device=device, dtype=dtype,
                   profile=profile(config.getoption("--contract-profile")),
                   collector=_test_records(request, state), nodeid=request.node.nodeid, replay_options=options,
                   max_elements=max_elements, replay_case=state.replay_case, manifest=state.manifest)


@dataclass
class Parity:
    """Every selected backend that can run on one device, for the informational cross-backend table."""

    backends: list[Backend]
    device: torch.device
    dtype: str
    collector: Collector


@pytest.fixture
def parity(request: pytest.FixtureRequest) -> Parity:
    """The backends to compare with each other on one (device, dtype); skipped when fewer than two can run."""
    device, dtype = request.param
    device = worker_device(device)
    state = request.config.stash[STATE]
    reason = device_unavailable_reason(device)
    if reason:
        pytest.skip(reason)
    runnable = [b for b in state.backends
                if b.unavailable_reason(device) is None and getattr(torch, dtype) in b.dtypes]
    if len(runnable) < 2:
        pytest.skip(f"cross-backend parity needs two backends that run on {device}; "
                    f"have {', '.join(b.name for b in runnable) or 'none'}")
    return Parity(runnable, device, dtype, _test_records(request, state))


RECORDS = pytest.StashKey[Collector]()
RECORDS_PROPERTY = "rmsnorm_conformance_records"


def _test_records(request: pytest.FixtureRequest, state: RunState) -> Collector:
    """A collector for one test's checks. They travel to the report inside the test's own report
    (``user_properties``), so pytest-xdist carries them to the controller as each test ends, and an
    interrupted run still reports every test that finished."""
    records = Collector(expected=manifest_rows(state.manifest) if state.manifest else [])
    request.node.stash[RECORDS] = records
    return records


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    records = item.stash.get(RECORDS, None)
    if report.when == "call" and records is not None:
        report.user_properties.append((RECORDS_PROPERTY, records.to_json()))


def _where(nodeid: str) -> str:
    return nodeid.rsplit("[", 1)[1].rstrip("]") if "[" in nodeid else ""


def _plain(line: str) -> str:
    """A failure line without the `| ` margins pytest draws around exception groups (Hypothesis's
    FlakyFailure, when a nondeterministic kernel fails only some of the time)."""
    return line.strip().lstrip("|+-").strip()


def _replay_line(text: str) -> str:
    for line in map(_plain, text.splitlines()):
        if line.startswith("replay: "):
            return line.removeprefix("replay: ")
    return ""


class ReportHooks:
    """The hooks that feed and write the report; registered per run so they hold the run's state."""

    def __init__(self, config: pytest.Config, state: RunState) -> None:
        self.config = config
        self.state = state
        self.collector = state.collector
        self.is_worker = _is_worker(config)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:  # the controller receives every worker's reports and records them once
            return
        if report.when == "setup" and "conformance" in report.keywords:
            self.collector.conformance_tests += 1
        for name, value in report.user_properties:
            if name == RECORDS_PROPERTY:
                self.collector.merge_json(value)
        outcomes = self.collector.outcomes
        if hasattr(report, "wasxfail"):  # a breach the known-failure manifest expects
            outcomes[report.nodeid] = {"outcome": "xfailed", "reason": str(report.wasxfail)[:300],
                                       "where": _where(report.nodeid)}
        elif report.passed and report.when == "call":
            self.collector.passed_tests += 1
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            outcomes[report.nodeid] = {"outcome": "skipped", "reason": reason.removeprefix("Skipped: "),
                                       "where": _where(report.nodeid)}
        elif report.failed:
            text = report.longreprtext or ""
            lines = [_plain(ln) for ln in text.splitlines() if _plain(ln)]
            first = next((ln for ln in lines if "contract rule" in ln), lines[-1] if lines else "")
            outcomes[report.nodeid] = {
                "outcome": "failed" if report.when == "call" else "error",
                "reason": first[:300], "replay": _replay_line(text), "where": _where(report.nodeid)}

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            return
        if (self.collector.conformance_tests and not self.collector.checks
                and session.exitstatus == pytest.ExitCode.OK):
            # Every conformance test was skipped: nothing was shown to hold, so the run must not pass.
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
        seed = self.config.getoption("--hypothesis-seed", None)
        self.collector.environment["hypothesis seed"] = (
            seed or ("derandomized" if settings().derandomize else "random: printed by Hypothesis on failure"))
        self.collector.environment["exit status"] = int(session.exitstatus)
        outcomes = self.collector.outcomes.values()
        unrun = session.testscollected - len(outcomes) - self.collector.passed_tests
        if unrun > 0:
            # Stopped early (-x, Ctrl-C, a timeout): say how much of the run is missing from this report.
            self.collector.add_not_run("remaining tests", "all", f"{unrun} of {session.testscollected} collected "
                                       f"tests did not run: the run stopped early (exit status "
                                       f"{int(session.exitstatus)})")
        for path in self.config.getoption("--report"):
            self.state.written.append(str(self.collector.write(path)))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or not (self.collector.conformance_tests or self.collector.checks
                                  or self.collector.parity):
            return
        terminalreporter.write_sep("=", "rmsnorm conformance report")
        for line in render_terminal(self.collector):
            terminalreporter.write_line(line)
        for e in self.collector.expected:
            if not e["breached"]:
                terminalreporter.write_line(
                    f"warning: known-failure entry for {e['backend']} on {e['device']}, {e['rule']}: "
                    f"{entry_status(e['breached'], e['passed'])}", yellow=True)
        if self.collector.verdict() == "NOT RUN":
            terminalreporter.write_line("")
            terminalreporter.write_line("no conformance check ran (see 'Did not run'): exit status 5", red=True)
        for path in self.state.written:
            terminalreporter.write_line(f"report written: {path}")
