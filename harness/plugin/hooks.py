"""The pytest plugin's entry point (``pytest11``): the option group, the fixtures conformance tests ask for, and
the switch that makes a run a conformance run. pytest loads it in every run once the package is installed.

It imports neither torch, Hypothesis, numpy nor tabulate, nor anything that does: a run that is not a conformance
run stays as fast as without the plugin. The plugin is active, and ``active.py`` (the run's hooks, with torch)
is registered, when a conformance option is given or the arguments name the shipped suites (at configure), or
when a collected test asks for ``subject`` or ``parity`` (at collection); ``activation.py`` holds that rule.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from rmsnorm_conformance.contract import DEFAULT_PROFILE, PROFILES
from rmsnorm_conformance.harness.drawing.budget import (
    CPU_SWEEP_ELEMENTS,
    GPU_SWEEP_ELEMENTS,
    INTERPRETED_SWEEP_ELEMENTS,
)
from rmsnorm_conformance.harness.drawing.sweeps import SWEEPS
from rmsnorm_conformance.harness.plugin.activation import asks_for_conformance, explicit, targets_suites
from rmsnorm_conformance.harness.plugin.controller import register as register_controller
from rmsnorm_conformance.harness.plugin.device_lost import DeviceLossGuard
from rmsnorm_conformance.harness.plugin.state import WARM_UPS
from rmsnorm_conformance.harness.running.hangs import DEFAULT_CASE_TIMEOUT
from rmsnorm_conformance.harness.running.registry import known_backend_names

if TYPE_CHECKING:

    from rmsnorm_conformance.harness.checking.checks import Subject
    from rmsnorm_conformance.harness.plugin.active import Parity
    from rmsnorm_conformance.harness.plugin.options import RunOptions

# The name the run's hooks (active.py) are registered under once the run is a conformance run.
ACTIVE = "rmsnorm-conformance-run"


class JoinedList(argparse.Action):
    """A comma-list option given more than once keeps every value, as one comma list: ``--backend=mine
    --backend=native`` is ``--backend=mine,native``. argparse keeps the last value alone, and the run then passed on
    native's checks with the kernel named first never loaded, exit status 0."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        previous = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, f"{previous},{values}" if previous else values)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rmsnorm-conformance", "RMSNorm numerical-contract conformance")
    group.addoption(
        "--backend", action=JoinedList, default=None, metavar="SPEC",
        help="backends to hold to the contract: a name (" + ", ".join(known_backend_names()) + "), a comma "
             "list, 'all', or module.path:attr naming a backend class, factory or instance, a function "
             "(x, weight, eps), an nn.Module class, a torch.library op (module.path:namespace::name) or a partial, "
             "importable from the current directory (default: each of native, triton, cuda that can run here). "
             "Repeatable: the values are joined.")
    group.addoption(
        "--device", action=JoinedList, default=None, metavar="DEVICE",
        help="devices to run on: cpu, cuda, cuda:N, all, or a comma list (default: the CPU and every GPU; "
             "repeatable).")
    group.addoption(
        "--dtype", action=JoinedList, default=None, metavar="DTYPES",
        help="input dtypes to check: a comma list of float32, bfloat16, float16 (default: all three; repeatable).")
    group.addoption(
        "--rule", action=JoinedList, default=None, metavar="RULES",
        help="run only the tests of these contract rules: a comma list of rule ids or patterns such as "
             "'axis_a.*' (default: every rule; repeatable).")
    group.addoption(
        "--report", action="append", default=[], metavar="PATH",
        help="write the tolerance report to PATH: .json as JSON, .md or .markdown as markdown (repeatable).")
    group.addoption(
        "--bench-json", default=None, metavar="PATH",
        help="a benchmark JSON (benchmarks/bench.py) whose bandwidth and latency go into the report's 'Pick a "
             "kernel' section and pictures.")
    group.addoption(
        "--contract-profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES),
        help=f"the bounds to hold outputs to (default: {DEFAULT_PROFILE}).")
    group.addoption(
        "--strict-interface", action="store_true", default=False,
        help="fail the run on breaches of interface rules (which exception, which words), not only warn.")
    group.addoption(
        "--require-parity", action="append", default=[], metavar="A:B",
        help="require two backends (each optionally @device) to give bit-identical outputs for the same input "
             "bits under every Axis-A variant, dtype and shared entry point; a difference fails the run "
             "(repeatable; e.g. triton:cuda, native@cpu:native@cuda).")
    group.addoption(
        "--modes", default=None, metavar="MODES",
        help="also run each backend's forward under these execution modes over the full sweep and require bitwise "
             "parity with eager: a comma list of compile, cudagraph (skipped with the reason where a mode cannot "
             "run). Without it a sample of every entry point runs under torch.compile, no_grad, inference_mode "
             "and, on a GPU, CUDA-graph replay (axis_a.execution_mode); none turns that sample off.")
    group.addoption(
        "--sweep", default=None, choices=sorted(SWEEPS),
        help="how hard Hypothesis searches in conformance tests (and only there): "
             + "; ".join(f"{k}: {v.description}" for k, v in SWEEPS.items())
             + " (default: ci when $CI is set, else dev).")
    group.addoption(
        "--max-examples", type=int, default=None, metavar="N",
        help="examples per conformance test, overriding the sweep's count.")
    group.addoption(
        "--no-shrink", action="store_true",
        help="report a failing case as it was drawn, without Hypothesis shrinking it to the simplest failing "
             "configuration: a faster FAIL where the verdict is all that is wanted (its replay still reproduces "
             "it). The verdict is the same either way.")
    group.addoption(
        "--known-failures", default=None, metavar="PATH",
        help="a manifest (TOML or JSON) of expected breaches per backend, device and rule: they xfail "
             "instead of failing the run.")
    group.addoption(
        "--replay", default=None, metavar="CASE",
        help="run the selected conformance tests on this one case, as a failure printed it, instead of a sweep.")
    group.addoption(
        "--case-timeout", type=float, default=None, metavar="SECONDS",
        help="fail a backend's check when one case runs longer than this; the backend's other tests on that "
             f"device are then not run, and the run goes on (default: {DEFAULT_CASE_TIMEOUT:g}; 0: no deadline).")
    group.addoption(
        "--deadline", type=float, default=None, metavar="SECONDS",
        help="end the whole run after this many seconds, with a report of what finished and what did not: "
             "FAIL if something failed by then, else INCOMPLETE (default: no limit). Set it below the CI "
             "job's own timeout, so the report is written before the job is killed.")
    group.addoption(
        "--max-elements", type=int, default=None, metavar="N",
        help=f"largest batch (rows x dim) a case may draw, and the threshold checks build (default: on a GPU a "
             f"share of its free memory, the sweep at most {GPU_SWEEP_ELEMENTS}; on a CPU {CPU_SWEEP_ELEMENTS}, "
             f"{INTERPRETED_SWEEP_ELEMENTS} for interpreted backends, and more for the threshold checks).")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """A conformance run started from the command line runs one level down, under a process that exits with its
    verdict (``supervisor.py``); None: this process runs it."""
    from rmsnorm_conformance.harness.plugin import supervisor

    return supervisor.supervise(config) if supervisor.wanted(config) else None


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Any:
    """After every plugin's end of the session (the report written, the exit status settled): a supervised run
    tells its supervisor the exit status its verdict asks for."""
    yield
    from rmsnorm_conformance.harness.plugin import supervisor

    supervisor.write_status(session)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _check_hypothesis_profile(config)
    config.addinivalue_line("markers", "conformance(rules): a contract check run once per (backend, device, dtype)")
    config.pluginmanager.register(DeviceLossGuard(config), "rmsnorm-conformance-device-loss")
    if explicit(config) or targets_suites(config):
        _warm_up_early(config)
        if not hasattr(config, "workerinput") and register_controller(config, activate).defer:
            return  # resolved once xdist has started the workers (controller.py)
        activate(config)


def _warm_up_early(config: pytest.Config) -> None:
    """pytest-xdist's controller starts the backends' warm-up from the options as typed, before it imports torch
    (running/warm_up.py); where it cannot tell from them, it starts it once the options are resolved."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None) \
            or config.getoption("--replay"):
        return
    from rmsnorm_conformance.harness.running import warm_up
    from rmsnorm_conformance.harness.running.registry import BUILTIN_BACKENDS

    processes = warm_up.start_early(config.getoption("--backend"), config.getoption("--device"), BUILTIN_BACKENDS,
                                    config.option.numprocesses)
    if processes:
        config.stash[WARM_UPS] = processes


def activate(config: pytest.Config) -> RunOptions:
    """Make this run a conformance run: register the run's hooks (once) and resolve its options."""
    active = _import_active()
    if not config.pluginmanager.has_plugin(ACTIVE):
        config.pluginmanager.register(active, ACTIVE)
    return active.run_options(config)


def _import_active() -> ModuleType:
    """``active.py``, the run's first import of torch, such that a Ctrl-C meanwhile still interrupts the run.

    torch's C extension imports numpy during torch's own import and turns any exception of that import into a
    warning ("Failed to initialize NumPy"), a KeyboardInterrupt among them: a SIGINT that landed there, about half a
    second into a run on two CPU cores, was lost, and the run went on to PASS with exit status 0."""
    return import_interruptibly("rmsnorm_conformance.harness.plugin.active")


def import_interruptibly(name: str) -> ModuleType:
    """Module ``name``, imported with SIGINT noted: if one arrived and the import came back all the same (the
    KeyboardInterrupt lost inside it), the interrupt is raised here."""
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler) or threading.current_thread() is not threading.main_thread() or name in sys.modules:
        return importlib.import_module(name)
    caught: list[int] = []

    def note(signum: int, frame: FrameType | None) -> Any:
        caught.append(signum)
        return handler(signum, frame)

    signal.signal(signal.SIGINT, note)
    try:
        module = importlib.import_module(name)
    finally:
        signal.signal(signal.SIGINT, handler)
    if caught:
        raise KeyboardInterrupt(f"SIGINT while importing {name}, which the import did not pass on")
    return module


def _check_hypothesis_profile(config: pytest.Config) -> None:
    """An unknown --hypothesis-profile is a usage error here, before Hypothesis' own plugin turns it into an
    INTERNALERROR."""
    name = config.getoption("--hypothesis-profile", None)
    if not name:
        return
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    try:
        settings.get_profile(name)
    except InvalidArgument:
        raise pytest.UsageError(f"--hypothesis-profile={name}: no such Hypothesis profile (the harness's own "
                                f"sweeps are chosen with --sweep={'|'.join(SWEEPS)})") from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not asks_for_conformance(metafunc.fixturenames):
        return
    activate(metafunc.config)
    from rmsnorm_conformance.harness.plugin import active

    active.generate_tests(metafunc)


@pytest.fixture
def subject(request: pytest.FixtureRequest) -> Subject:
    """The (backend, device, dtype) a conformance test runs against; skipped with the reason if it cannot run.
    For the parity gate, a pair of them: the subject calls the left side, ``subject.other`` the right."""
    from rmsnorm_conformance.harness.plugin import active

    return active.subject(request)


@pytest.fixture
def parity(request: pytest.FixtureRequest) -> Parity:
    """The backends to compare with each other on one (device, dtype); skipped when fewer than two can run."""
    from rmsnorm_conformance.harness.plugin import active

    return active.parity(request)

