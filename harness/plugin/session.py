"""The state of one conformance run and the hooks that feed and write its report.

``plugin.py`` declares options and fixtures; this object, registered apart (the pytest-xdist way), holds
what the options resolved to, turns test reports into records, and prints and writes the report. It stays
inactive, printing and changing nothing, in a run that collects no conformance test and names none of the
harness's options: a user's own test run with the package installed behaves exactly as without it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import settings

from rmsnorm_conformance.contract import DTYPES, VERSION
from rmsnorm_conformance.harness.checking.known_failures import Manifest, entry_status, load_manifest, manifest_rows
from rmsnorm_conformance.harness.drawing.replay import ReplayError, parse_case
from rmsnorm_conformance.harness.drawing.sweeps import default_sweep, sweep_settings
from rmsnorm_conformance.harness.plugin.parity_gate import ParitySpec, parse_modes, parse_parity
from rmsnorm_conformance.harness.reporting.environment import fingerprint
from rmsnorm_conformance.harness.reporting.records import Collector
from rmsnorm_conformance.harness.reporting.render import REPORT_SUFFIXES, render_terminal, write_report
from rmsnorm_conformance.harness.running import isolation
from rmsnorm_conformance.harness.running.backend import Backend, BackendError, DeclarationError
from rmsnorm_conformance.harness.running.devices import (
    device_unavailable_reason,
    parse_device_option,
    worker_cpu_threads,
)
from rmsnorm_conformance.harness.running.modes import ModeBackend
from rmsnorm_conformance.harness.running.registry import BUILTIN_BACKENDS, load_backend, parse_backend_option

RECORDS_PROPERTY = "rmsnorm_conformance_records"
# Options whose presence on the command line makes a run a conformance run from the start.
CONFORMANCE_OPTIONS = ("backend", "device", "dtype", "rule", "report", "known_failures", "replay", "max_elements",
                       "sweep", "max_examples", "strict_interface", "case_timeout", "require_parity", "modes",
                       "bench_json")
# Seconds a single case may run before it fails with a timeout: generous, since a first call may compile a kernel.
DEFAULT_CASE_TIMEOUT = 300.0
# Bytes a case may need per element of its batch, across the tensors a check keeps alive (inputs, outputs,
# references, gradients, copies): the element budget must leave this much room in memory.
BYTES_PER_ELEMENT = 64

_ACTIVE_SETTINGS: list[settings] = []


def active_settings() -> settings:
    """The Hypothesis settings for conformance tests defined now: the run's sweep, or ``dev`` outside a run."""
    return _ACTIVE_SETTINGS[-1] if _ACTIVE_SETTINGS else sweep_settings("dev")


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


def _interpreter_needed(specs: list[str]) -> bool:
    """Triton reads TRITON_INTERPRET when its kernels are defined: set it only for a selected Triton backend on
    a machine with no GPU, and never when the user set it themselves."""
    return "triton" in specs and "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available()


@dataclass(eq=False)  # registered as a plugin object, so hashed by identity
class ConformanceRun:
    """What the options resolved to, and the records of the run so far."""

    config: pytest.Config
    backends: list[Backend] = field(default_factory=list)
    devices: list[torch.device] = field(default_factory=list)
    dtypes: tuple[str, ...] = DTYPES
    rules: tuple[str, ...] = ()
    collector: Collector = field(default_factory=Collector)
    replay_case: Any = None
    manifest: Manifest | None = None
    sweep: str = "dev"
    written: list[str] = field(default_factory=list)
    resolved: bool = False
    active: bool = False
    explicit_backends: bool = False
    case_timeout: float = DEFAULT_CASE_TIMEOUT
    running: list[str] = field(default_factory=list)
    parity_pairs: list[ParityPair] = field(default_factory=list)
    interrupted_by: str = ""
    bench: dict[str, Any] | None = None  # --bench-json's data, for the report's speed columns and pictures
    _previous_sigterm: Any = None
    _last_write: float = float("-inf")  # time.monotonic() of the last progress write
    _write_pending: bool = False  # a start not yet written (a pytest-xdist controller throttles its writes)

    # --- resolving the options ---------------------------------------------------------------------

    def explicit(self) -> bool:
        """Did the user give any of the harness's options?"""
        return any(self.config.getoption(name, None) not in (None, [], False) for name in CONFORMANCE_OPTIONS)

    def targets_suites(self) -> bool:
        """Do the run's arguments name the conformance suites (by package or by path)?"""
        from rmsnorm_conformance import suites

        suites_dir = Path(suites.__file__).resolve().parent
        for arg in self.config.args:
            target = arg.split("::", 1)[0]
            if target.startswith("rmsnorm_conformance"):
                return True
            path = Path(self.config.invocation_params.dir, target).resolve()
            if path == suites_dir or suites_dir in path.parents or path in suites_dir.parents:
                return True
        return False

    def resolve(self) -> None:
        """Parse and check every option; usage errors name the option and the value. A usage error still replaces
        the report files it can, with a NOT RUN report that says why: a stale PASS must never look current."""
        if self.resolved:
            return
        self.resolved = True
        self.active = True
        try:
            self._resolve()
        except pytest.UsageError as exc:
            self.collector.usage_error = str(exc)
            for raw in self.config.getoption("--report"):
                if Path(raw).suffix in REPORT_SUFFIXES and not Path(raw).is_dir():
                    with contextlib.suppress(OSError):
                        write_report(self.collector, raw)
            raise

    def _resolve(self) -> None:
        config = self.config
        threads = worker_cpu_threads()
        if threads is not None:  # before any backend call: the global-state snapshots start from this
            torch.set_num_threads(threads)
        try:
            self.devices = parse_device_option(config.getoption("--device"))
        except ValueError as exc:
            raise pytest.UsageError(f"--device: {exc}") from exc
        if config.getoption("--device"):
            # A device the user named must exist: a gate that asked for cuda:7 must not pass on the CPU alone.
            for device in self.devices:
                reason = device_unavailable_reason(device)
                if reason:
                    raise pytest.UsageError(f"--device={config.getoption('--device')}: {device}: {reason}")
        self._check_reports(config.getoption("--report"))
        self.bench = _load_bench(config.getoption("--bench-json"))
        self._check_budget(config.getoption("--max-elements"))
        self.case_timeout = config.getoption("--case-timeout")
        if self.case_timeout is None:
            self.case_timeout = DEFAULT_CASE_TIMEOUT
        if self.case_timeout < 0:
            raise pytest.UsageError(f"--case-timeout={self.case_timeout:g}: must be 0 (no deadline) or more")
        self.dtypes = _parse_choice_list(config.getoption("--dtype"), DTYPES, "--dtype")
        from rmsnorm_conformance.contract import ALL_RULES

        self.rules = _parse_choice_list(config.getoption("--rule"), tuple(r.id for r in ALL_RULES), "--rule",
                                        patterns=True)
        self.sweep = config.getoption("--sweep") or default_sweep()
        max_examples = config.getoption("--max-examples")
        if max_examples is not None and max_examples < 1:
            raise pytest.UsageError(f"--max-examples={max_examples}: must be at least 1")
        replay = config.getoption("--replay")
        if replay:
            try:
                self.replay_case = parse_case(replay)
            except ReplayError as exc:
                raise pytest.UsageError(str(exc)) from exc
        _ACTIVE_SETTINGS.append(sweep_settings(self.sweep, max_examples=max_examples, replay=bool(replay)))
        manifest_path = config.getoption("--known-failures")
        if manifest_path:
            try:
                self.manifest = load_manifest(manifest_path)
            except (OSError, ValueError) as exc:
                raise pytest.UsageError(f"--known-failures: {exc}") from exc
            self.collector.expected = manifest_rows(self.manifest)
        self.backends = self._resolve_backends(config.getoption("--backend"))
        names = [b.name for b in self.backends]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise pytest.UsageError(f"--backend: two backends share the name {', '.join(map(repr, duplicates))}; "
                                    "names key the report, so each must be unique")
        if self.explicit_backends:
            self.collector.named_backends = names
        self.parity_pairs = self._resolve_parity(config.getoption("--require-parity"), config.getoption("--modes"))
        self.collector.environment = fingerprint(self.devices, {
            "contract profile": config.getoption("--contract-profile"),
            "interface rules": "gate (--strict-interface)" if config.getoption("--strict-interface") else "warn",
            "sweep": self.sweep + (f", {max_examples} examples a test" if max_examples else ""),
            "backends": ", ".join(b.name for b in self.backends) or "none",
            "command": "pytest " + shlex.join(config.invocation_params.args),
            "case timeout": f"{self.case_timeout:g} s" if self.case_timeout else "none",
        })
        from rmsnorm_conformance.harness.running.adapters import adapted_notes  # kernels in shipped shapes

        if adapted_notes(self.backends):
            self.collector.environment["adapted kernels"] = adapted_notes(self.backends)
        isolation.WATCHDOG.on_hang = self._hung

    def _resolve_parity(self, specs: list[str], modes_option: str | None) -> list[ParityPair]:
        """Every required pair on every device it runs on; names must be among the selected backends."""
        by_name = {b.name: b for b in self.backends}
        try:
            parsed = [parse_parity(v) for v in specs]
            modes = parse_modes(modes_option)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from exc
        for spec in parsed:
            for name in (spec.left, spec.right):
                if name not in by_name:
                    raise pytest.UsageError(f"--require-parity={spec.label.replace('=', ':')}: {name!r} is not a "
                                            f"selected backend (selected: {', '.join(by_name) or 'none'}); "
                                            "add it to --backend")
        pairs: list[ParityPair] = []
        for spec in parsed:
            for left_device, right_device in self._pair_devices(spec):
                pairs.append(ParityPair(spec, by_name[spec.left], by_name[spec.right], left_device, right_device))
        for mode in modes:
            for backend in self.backends:
                moded = Backend(ModeBackend(backend, mode), spec=backend.spec)
                spec = ParitySpec(backend.name, moded.name)
                for device in self.devices:
                    pairs.append(ParityPair(spec, backend, moded, device, device, mode=mode))
        return pairs

    def _pair_devices(self, spec: ParitySpec) -> list[tuple[torch.device, torch.device]]:
        if spec.left_device and spec.right_device:
            return [(torch.device(spec.left_device), torch.device(spec.right_device))]
        fixed = spec.left_device or spec.right_device
        if fixed:
            return [(torch.device(fixed), torch.device(fixed))]
        return [(d, d) for d in self.devices]

    def parity_replay_command(self, pair: ParityPair, dtype: str, case: Any) -> str:
        """One command that re-runs just this case of the parity gate."""
        specs = ",".join(dict.fromkeys((pair.left_backend.spec, pair.right_backend.spec if not pair.mode
                                        else pair.left_backend.spec)))
        gate = f"--modes={pair.mode}" if pair.mode else f"--require-parity={pair.spec.label.replace('=', ':')}"
        devices = ",".join(dict.fromkeys((str(pair.left_device), str(pair.right_device))))
        args = ["pytest", "--pyargs", "rmsnorm_conformance.suites", f"--backend={specs}", f"--device={devices}",
                f"--dtype={dtype}", "--rule=parity.bitwise", gate]
        return shlex.join(args) + " --replay=" + _double_quoted(repr(case))

    def _check_reports(self, paths: list[str]) -> None:
        """Every --report path: a known suffix and a writable place, checked before the run, not after it."""
        for raw in paths:
            path = Path(raw)
            if path.is_dir():
                raise pytest.UsageError(f"--report={raw}: is a directory")
            if path.suffix not in REPORT_SUFFIXES:
                raise pytest.UsageError(f"--report={raw}: unknown suffix {path.suffix or '(none)'!r}; use "
                                        + " or ".join(REPORT_SUFFIXES))
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                probe = path.parent / f".{path.name}.probe"
                probe.write_text("")
                probe.unlink()
            except OSError as exc:
                raise pytest.UsageError(f"--report={raw}: cannot write there: {exc.strerror or exc}") from None

    def _check_budget(self, max_elements: int | None) -> None:
        if max_elements is None:
            return
        bound = _memory_bound(self.devices)
        if not 1 <= max_elements <= bound:
            raise pytest.UsageError(f"--max-elements={max_elements}: must be between 1 and {bound} (the devices' "
                                    f"memory at {BYTES_PER_ELEMENT} bytes an element)")

    def _resolve_backends(self, option: str | None) -> list[Backend]:
        self.explicit_backends = bool(option)
        # By default: this project's own backends. Adapters and entry-point backends run when named or with 'all'.
        specs = parse_backend_option(option) if option else list(BUILTIN_BACKENDS)
        if _interpreter_needed(specs):
            os.environ["TRITON_INTERPRET"] = "1"
        # module:attr specs name the user's own code: import it from where pytest was started.
        invocation_dir = str(self.config.invocation_params.dir)
        if any(":" in s for s in specs) and invocation_dir not in sys.path:
            sys.path.insert(0, invocation_dir)
        chosen: list[Backend] = []
        for spec in specs:
            try:
                backend = load_backend(spec)
            except DeclarationError as exc:
                raise pytest.UsageError(f"--backend={spec}: {exc}") from exc
            except (ImportError, RuntimeError, OSError) as exc:
                if ":" in spec:  # the user's own module: a typo should stop the run, not skip it
                    raise pytest.UsageError(f"--backend={spec}: {exc}") from exc
                backend = _unloadable(spec, f"{spec} cannot be loaded: {exc}")
            except (ValueError, TypeError) as exc:
                raise pytest.UsageError(f"--backend: {exc}") from exc
            if option:
                chosen.append(backend)
                continue
            try:
                reasons = {str(d): device_unavailable_reason(d) or backend.unavailable_reason(d) for d in self.devices}
            except BackendError:
                chosen.append(backend)  # its tests fail with the probe's error: never a quiet skip
                continue
            if any(r is None for r in reasons.values()):
                chosen.append(backend)
            else:
                for device, reason in reasons.items():
                    self.collector.add_not_run(backend.name, device, str(reason))
        return chosen

    # --- replay commands ---------------------------------------------------------------------------

    def replay_command(self, backend: Backend, device: str, dtype: str, rule_id: str, case: Any) -> str:
        """One command that re-runs just this case, from any directory where the backend imports."""
        args = ["pytest", "--pyargs", "rmsnorm_conformance.suites", f"--backend={backend.spec}",
                f"--device={device}", f"--dtype={dtype}", f"--rule={rule_id}",
                f"--contract-profile={self.config.getoption('--contract-profile')}"]
        return shlex.join(args) + " --replay=" + _double_quoted(repr(case))

    # --- hooks -------------------------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        if not self.active:
            return None
        names = ", ".join(b.name for b in self.backends) or "none"
        lines = [f"rmsnorm-conformance: contract {VERSION}, profile {config.getoption('--contract-profile')}, "
                 f"sweep {self.sweep}",
                 f"rmsnorm-conformance: backends {names}; devices {', '.join(map(str, self.devices))}; "
                 f"dtypes {', '.join(self.dtypes)}"]
        if self.rules:
            lines.append(f"rmsnorm-conformance: rules {', '.join(self.rules)}")
        if self.replay_case is not None:
            lines.append(f"rmsnorm-conformance: replaying {self.replay_case!r}")
        return lines

    # --- progress: the report on disk always says how far the run got --------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if _is_worker(self.config) or not self.active:
            return
        self.collector.incomplete = "the run started and has not finished"
        self._write_reports()  # replaces a previous run's report at once: nothing stale looks current
        if threading_is_main():
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._terminate)

    def _terminate(self, signum: int, frame: Any) -> None:
        """SIGTERM (a CI timeout, `timeout`): stop as Ctrl-C does, so the report is written and the exit is not 0."""
        self.interrupted_by = "terminated by SIGTERM"
        raise KeyboardInterrupt("SIGTERM")

    def _hung(self, message: str) -> None:
        """Called by the watchdog just before it ends a process stuck in native code."""
        if _is_worker(self.config):
            return
        self.collector.incomplete = f"a case {message}"
        self.collector.unfinished = list(self.running)
        self._write_reports()

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        if _is_worker(self.config) or not self.active:
            return
        self.running.append(nodeid)
        self.collector.unfinished = list(self.running)
        # In one process every start is written: a crash that kills the process (a segfault, os._exit, SIGKILL)
        # leaves a report that says INCOMPLETE and names the test it died in. A pytest-xdist controller outlives
        # its workers' crashes and records them itself, so it writes at most every CONTROLLER_WRITE_INTERVAL
        # seconds: rendering the whole report at each of a thousand starts cost it a sixth of a core, taken from
        # the workers.
        if self._distributed() and time.monotonic() - self._last_write < CONTROLLER_WRITE_INTERVAL:
            self._write_pending = True
            return
        self._write_reports()

    def _distributed(self) -> bool:
        return getattr(self.config.option, "dist", "no") != "no"

    def _write_reports(self) -> None:
        self._last_write = time.monotonic()
        self._write_pending = False
        for path in self.config.getoption("--report"):
            with contextlib.suppress(OSError):  # checked writable at the start; a full disk must not stop the run
                write_report(self.collector, path, bench=self.bench)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if _is_worker(self.config) or not self.active:
            return  # the controller receives every worker's reports and records them once
        if report.when == "teardown" and report.nodeid in self.running:
            self.running.remove(report.nodeid)
            self.collector.unfinished = list(self.running)
            if self._write_pending and time.monotonic() - self._last_write >= CONTROLLER_WRITE_INTERVAL:
                self._write_reports()
        if report.when == "setup" and "conformance" in report.keywords:
            self.collector.conformance_tests += 1
        for name, value in report.user_properties:
            if name == RECORDS_PROPERTY:
                self.collector.merge_json(value)
        outcomes = self.collector.outcomes
        where = _where(report.nodeid)
        subject = _subject_property(report) or self._subject_from_id(report.nodeid, where)
        if hasattr(report, "wasxfail"):  # a breach the known-failure manifest expects
            outcomes[report.nodeid] = {"outcome": "xfailed", "reason": str(report.wasxfail)[:300], "where": where}
        elif report.passed and report.when == "call":
            self.collector.passed_tests += 1
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            outcomes[report.nodeid] = {"outcome": "skipped", "reason": reason.removeprefix("Skipped: "),
                                       "where": where, **subject}
        elif report.failed:
            failure = dict(_failure_property(report) or {})
            if not failure:
                lines = [_plain(ln) for ln in (report.longreprtext or "").splitlines() if _plain(ln)]
                failure = {"reason": lines[-1] if lines else "", "replay": ""}
            if report.nodeid in outcomes and outcomes[report.nodeid]["outcome"] in ("failed", "error"):
                return  # a teardown error after a failed call: the first failure is the one to show
            outcomes[report.nodeid] = {"outcome": "failed" if report.when == "call" else "error",
                                       "reason": failure["reason"][:300], "replay": failure.get("replay", ""),
                                       "where": where, **subject, "rule": failure.get("rule") or
                                       subject.get("rule", "")}

    def _subject_from_id(self, nodeid: str, where: str) -> dict[str, str]:
        """Backend, device and rule of a test that left no record of them: a worker that crashed (a segfault in
        a kernel, say) reports only the test id. Its params begin with a selected backend's name and the
        device; its rule is the test's own when it declares one (the suites' markers)."""
        if not where:
            return {}
        backend = next((b.name for b in sorted(self.backends, key=lambda b: -len(b.name))
                        if where.startswith(f"{b.name}-")), None)
        if backend is None:
            return {}
        subject = {"backend": backend, "device": where[len(backend) + 1:].split("-", 1)[0]}
        from rmsnorm_conformance.harness.checking.rule_index import rule_tests

        test = nodeid.rsplit("/", 1)[-1].split("[", 1)[0]
        rules = [rule for rule, tests in rule_tests().items() if test in tests]
        if len(rules) == 1:
            subject["rule"] = rules[0]
        return subject

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if _is_worker(self.config) or not self.active:
            return
        if self._previous_sigterm is not None and threading_is_main():
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        c = self.collector
        outcomes = c.outcomes.values()
        finished = len(outcomes) + c.passed_tests
        c.not_started = max(0, session.testscollected - finished - len(self.running))
        c.unfinished = list(self.running)
        status = session.exitstatus
        if status == pytest.ExitCode.INTERRUPTED or self.interrupted_by:
            c.incomplete = self.interrupted_by or "interrupted (Ctrl-C or a signal)"
        elif c.unfinished or c.not_started:
            c.incomplete = (f"stopped early (exit status {int(status)}): {c.not_started} of "
                            f"{session.testscollected} collected tests never ran")
        else:
            c.incomplete = ""
        verdict = c.verdict()
        if verdict == "INCOMPLETE" and status in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        elif verdict == "NOT RUN" and status == pytest.ExitCode.OK:
            # A named backend ran no check, or nothing ran at all: nothing was shown to hold.
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if c.checks else pytest.ExitCode.NO_TESTS_COLLECTED
        for name in c.named_but_not_run():
            c.add_not_run(name, "all", "named with --backend, but every one of its tests was skipped (see the "
                                       "reasons above): nothing about it was shown to hold")
        seed = self.config.getoption("--hypothesis-seed", None)
        self.collector.environment["hypothesis seed"] = (
            seed or ("derandomized" if active_settings().derandomize else "random: printed by Hypothesis on failure"))
        self.collector.environment["exit status"] = int(session.exitstatus)
        for path in self.config.getoption("--report"):
            try:
                # The last write: now the pictures are drawn beside a markdown report (never an error).
                self.written.append(str(write_report(self.collector, path, bench=self.bench, plots=True)))
            except OSError as exc:  # one unwritable report must not lose the others
                self.written.append(f"{path} could NOT be written: {exc.strerror or exc}")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if _is_worker(self.config) or not self.active or not (
                self.collector.conformance_tests or self.collector.checks or self.collector.parity):
            return
        verbose = self.config.getoption("verbose", 0) > 0
        terminalreporter.write_sep("=", "rmsnorm conformance report")
        width = getattr(terminalreporter, "_tw", None)
        for line in render_terminal(self.collector, verbose=verbose,
                                    width=width.fullwidth if width is not None else 120):
            terminalreporter.write_line(line)
        for e in self.collector.expected:
            if not e["breached"]:
                terminalreporter.write_line(
                    f"warning: known-failure entry for {e['backend']} on {e['device']}, {e['rule']}: "
                    f"{entry_status(e['breached'], e['passed'])}", yellow=True)
        if self.collector.verdict() == "NOT RUN":
            terminalreporter.write_line("")
            terminalreporter.write_line("no conformance check ran (see 'Did not run'): exit status 5", red=True)
        if self.collector.verdict() == "INCOMPLETE":
            terminalreporter.write_line("")
            terminalreporter.write_line(f"the run is INCOMPLETE: {self.collector.incomplete}", red=True)
        for name in self.collector.named_but_not_run():
            terminalreporter.write_line(f"backend {name!r} was named with --backend but ran no check: NOT RUN",
                                        red=True)
        for path in self.written:
            terminalreporter.write_line(f"report written: {path}")
        if not verbose and not self.written:
            terminalreporter.write_line("full tolerance tables: -v, or --report=PATH.md / PATH.json")


@dataclass(frozen=True)
class ParityPair:
    """One required pair on concrete devices, as the parity gate's tests are parametrized."""

    spec: ParitySpec
    left_backend: Backend
    right_backend: Backend
    left_device: torch.device
    right_device: torch.device
    mode: str = ""

    @property
    def label(self) -> str:
        return f"{self.left_backend.name}={self.right_backend.name}"

    @property
    def device_label(self) -> str:
        if self.left_device == self.right_device:
            return str(self.left_device)
        return f"{self.left_device}/{self.right_device}"


FAILURE_PROPERTY = "rmsnorm_conformance_failure"
SUBJECT_PROPERTY = "rmsnorm_conformance_subject"
# Seconds between a pytest-xdist controller's progress writes of the report (one process writes at every start).
CONTROLLER_WRITE_INTERVAL = 2.0


def threading_is_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _subject_property(report: pytest.TestReport) -> dict[str, str]:
    for name, value in report.user_properties:
        if name == SUBJECT_PROPERTY:
            return dict(value)
    return {}


def _load_bench(path: str | None) -> dict[str, Any] | None:
    """--bench-json's data; a missing or malformed file is a usage error before the run, not a report without
    the speed columns the user asked for."""
    if not path:
        return None
    import json

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--bench-json={path}: cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise pytest.UsageError(f"--bench-json={path}: not a benchmark JSON (benchmarks/bench.py writes "
                                "{'records': [...], 'environment': {...}})")
    return data


def _memory_bound(devices: list[torch.device]) -> int:
    """The largest element budget every device's memory can hold."""
    sizes = []
    for device in devices:
        if device.type == "cuda" and torch.cuda.is_available():
            sizes.append(torch.cuda.get_device_properties(device.index or 0).total_memory)
        else:
            with contextlib.suppress(ValueError, OSError, AttributeError):
                sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return max(1, min(sizes or [1 << 36]) // BYTES_PER_ELEMENT)


def _failure_property(report: pytest.TestReport) -> dict[str, str] | None:
    for name, value in report.user_properties:
        if name == FAILURE_PROPERTY:
            return value
    return None


def _parse_choice_list(value: str | None, known: tuple[str, ...], option: str, *,
                       patterns: bool = False) -> tuple[str, ...]:
    if not value:
        return known if not patterns else ()
    chosen = tuple(v.strip() for v in value.split(",") if v.strip())
    from fnmatch import fnmatchcase

    for item in chosen:
        ok = any(fnmatchcase(k, item) for k in known) if patterns else item in known
        if not ok:
            raise pytest.UsageError(f"{option}={item}: unknown; known: {', '.join(known)}")
    return chosen


def _where(nodeid: str) -> str:
    return nodeid.rsplit("[", 1)[1].rstrip("]") if "[" in nodeid else ""


def _plain(line: str) -> str:
    """A failure line without the `| ` margins pytest draws around exception groups."""
    return line.strip().lstrip("|+-").strip()


def _double_quoted(text: str) -> str:
    """Case reprs hold only names, numbers and single-quoted words: double quotes keep them readable."""
    if any(ch in text for ch in '"$`\\!'):
        return shlex.quote(text)
    return f'"{text}"'
