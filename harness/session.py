"""The state of one conformance run and the hooks that feed and write its report.

``plugin.py`` declares options and fixtures; this object, registered apart (the pytest-xdist way), holds
what the options resolved to, turns test reports into records, and prints and writes the report. It stays
inactive, printing and changing nothing, in a run that collects no conformance test and names none of the
harness's options: a user's own test run with the package installed behaves exactly as without it.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import settings

from rmsnorm_conformance.contract import DTYPES, VERSION

from .backend import Backend
from .devices import device_unavailable_reason, parse_device_option
from .environment import fingerprint
from .manifest import Manifest, entry_status, load_manifest, manifest_rows
from .records import Collector
from .registry import BUILTIN_BACKENDS, load_backend, parse_backend_option
from .render import render_terminal, write_report
from .replay import ReplayError, parse_case
from .sweeps import default_sweep, sweep_settings

RECORDS_PROPERTY = "rmsnorm_conformance_records"
# Options whose presence on the command line makes a run a conformance run from the start.
CONFORMANCE_OPTIONS = ("backend", "device", "dtype", "rule", "report", "known_failures", "replay", "max_elements",
                       "sweep", "max_examples", "strict_interface")

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
        """Parse and check every option; usage errors name the option and the value."""
        if self.resolved:
            return
        self.resolved = True
        self.active = True
        config = self.config
        try:
            self.devices = parse_device_option(config.getoption("--device"))
        except ValueError as exc:
            raise pytest.UsageError(f"--device: {exc}") from exc
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
        self.collector.environment = fingerprint(self.devices, {
            "contract profile": config.getoption("--contract-profile"),
            "interface rules": "gate (--strict-interface)" if config.getoption("--strict-interface") else "warn",
            "sweep": self.sweep + (f", {max_examples} examples a test" if max_examples else ""),
            "backends": ", ".join(b.name for b in self.backends) or "none",
            "command": "pytest " + shlex.join(config.invocation_params.args),
        })

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
            except (ImportError, RuntimeError, OSError) as exc:
                if ":" in spec:  # the user's own module: a typo should stop the run, not skip it
                    raise pytest.UsageError(f"--backend={spec}: {exc}") from exc
                backend = _unloadable(spec, f"{spec} cannot be loaded: {exc}")
            except (ValueError, TypeError) as exc:
                raise pytest.UsageError(f"--backend: {exc}") from exc
            if option:
                chosen.append(backend)
                continue
            reasons = {str(d): device_unavailable_reason(d) or backend.unavailable_reason(d) for d in self.devices}
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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if _is_worker(self.config) or not self.active:
            return  # the controller receives every worker's reports and records them once
        if report.when == "setup" and "conformance" in report.keywords:
            self.collector.conformance_tests += 1
        for name, value in report.user_properties:
            if name == RECORDS_PROPERTY:
                self.collector.merge_json(value)
        outcomes = self.collector.outcomes
        where = _where(report.nodeid)
        if hasattr(report, "wasxfail"):  # a breach the known-failure manifest expects
            outcomes[report.nodeid] = {"outcome": "xfailed", "reason": str(report.wasxfail)[:300], "where": where}
        elif report.passed and report.when == "call":
            self.collector.passed_tests += 1
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            outcomes[report.nodeid] = {"outcome": "skipped", "reason": reason.removeprefix("Skipped: "),
                                       "where": where}
        elif report.failed:
            failure = dict(_failure_property(report) or {})
            if not failure:
                lines = [_plain(ln) for ln in (report.longreprtext or "").splitlines() if _plain(ln)]
                failure = {"reason": lines[-1] if lines else "", "replay": ""}
            outcomes[report.nodeid] = {"outcome": "failed" if report.when == "call" else "error",
                                       "reason": failure["reason"][:300], "replay": failure.get("replay", ""),
                                       "where": where}

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if _is_worker(self.config) or not self.active:
            return
        if (self.collector.conformance_tests and not self.collector.checks
                and session.exitstatus == pytest.ExitCode.OK):
            # Every conformance test was skipped: nothing was shown to hold, so the run must not pass.
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
        seed = self.config.getoption("--hypothesis-seed", None)
        self.collector.environment["hypothesis seed"] = (
            seed or ("derandomized" if active_settings().derandomize else "random: printed by Hypothesis on failure"))
        self.collector.environment["exit status"] = int(session.exitstatus)
        outcomes = self.collector.outcomes.values()
        unrun = session.testscollected - len(outcomes) - self.collector.passed_tests
        if unrun > 0:
            # Stopped early (-x, Ctrl-C, a timeout): say how much of the run is missing from this report.
            self.collector.add_not_run("remaining tests", "all", f"{unrun} of {session.testscollected} collected "
                                       f"tests did not run: the run stopped early (exit status "
                                       f"{int(session.exitstatus)})")
        for path in self.config.getoption("--report"):
            self.written.append(str(write_report(self.collector, path)))

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
        for path in self.written:
            terminalreporter.write_line(f"report written: {path}")
        if not verbose and not self.written:
            terminalreporter.write_line("full tolerance tables: -v, or --report=PATH.md / PATH.json")


FAILURE_PROPERTY = "rmsnorm_conformance_failure"


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
