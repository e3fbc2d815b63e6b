"""The pytest plugin's entry point (``pytest11``): the option group, the fixtures conformance tests ask for, and
the switch that makes a run a conformance run. pytest loads it in every run once the package is installed.

It imports neither torch, Hypothesis, numpy nor tabulate, nor anything that does: a run that is not a conformance
run stays as fast as without the plugin. The plugin is active, and ``active.py`` (the run's hooks, with torch)
is registered, when a conformance option is given or the arguments name the shipped suites (at configure), or
when a collected test asks for ``subject`` or ``parity`` (at collection); ``activation.py`` holds that rule.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from ..drawing.sweeps import SWEEPS
from . import options, suite_modules
from .activation import asks_for_conformance, explicit, targets_suites
from .controller import register as register_controller
from .device_lost import DeviceLossGuard
from .state import WARM_UPS

if TYPE_CHECKING:

    from ..checking.checks import Subject
    from .active import Parity
    from .run_options import RunOptions

# The name the run's hooks (active.py) are registered under once the run is a conformance run.
ACTIVE = "rmsnorm-conformance-run"


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    # Loaded by a conftest's pytest_plugins, the plugin comes after the conftests' options: it claims its short
    # names at once. Loaded as pytest loads plugins (pytest11, -p), it claims them once the conftests are loaded.
    options.add_options(parser, conftests_loaded=bool(getattr(pluginmanager, "_conftest_plugins", None)))


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> Any:
    """After the project's conftests have added their options, the harness's short names (``--backend``) where
    none took them: pytest refuses a second option of one name, and a conftest adding ``--device`` stopped every
    run of its project. The prefixed ones (``--rmsnorm-backend``) always work. Then, before pytest parses the
    command line for good, a configuration file's ``workers`` becomes ``-n`` for a conformance run."""
    try:
        return (yield)
    finally:
        options.claim_short_names(parser)
        options.apply_workers(early_config, args, bool(options.typed_on_command_line(early_config))
                              or targets_suites(early_config, options.early_targets(early_config)))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line where the configuration sets conformance options and no conformance test ran: the run of the
    project's own tests stays as it is, and says why it was not a conformance run."""
    if not config.pluginmanager.has_plugin(ACTIVE) and options.of(config).configured:
        terminalreporter.write_line(options.not_run_line(options.of(config)))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """A conformance run started from the command line runs one level down, under a process that exits with its
    verdict (``supervisor.py``); None: this process runs it."""
    from . import supervisor

    return supervisor.supervise(config) if supervisor.wanted(config) else None


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Any:
    """After every plugin's end of the session (the report written, the exit status settled): a supervised run
    tells its supervisor the exit status its verdict asks for."""
    yield
    from . import supervisor

    supervisor.write_status(session)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """The shipped suites' modules, imported by their package name (``suite_modules.py``)."""
    return suite_modules.collect_module(module_path, parent)


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """The shipped suites' folder, its ``__init__`` imported by the package's name (``suite_modules.py``)."""
    return suite_modules.collect_package(path, parent)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    _check_hypothesis_profile(config)
    config.addinivalue_line("markers", "conformance(rules): a contract check run once per (backend, device, dtype)")
    config.pluginmanager.register(DeviceLossGuard(config), "rmsnorm-conformance-device-loss")
    if explicit(options.of(config)) or targets_suites(config):
        _warm_up_early(config)
        if not hasattr(config, "workerinput") and register_controller(config, activate).defer:
            return  # resolved once xdist has started the workers (controller.py)
        activate(config)


def _warm_up_early(config: pytest.Config) -> None:
    """pytest-xdist's controller starts the backends' warm-up from the options as typed, before it imports torch
    (running/warm_up.py); where it cannot tell from them, it starts it once the options are resolved."""
    opts = options.of(config)
    if hasattr(config, "workerinput") or not opts.workers or opts.replay:
        return
    from ..running import warm_up
    from ..running.registry import BUILTIN_BACKENDS

    processes = warm_up.start_early(opts.backend, opts.device, BUILTIN_BACKENDS, opts.workers)
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
    name = options.of(config).hypothesis_profile
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
    from . import active

    active.generate_tests(metafunc)


@pytest.fixture
def subject(request: pytest.FixtureRequest) -> Subject:
    """The (backend, device, dtype) a conformance test runs against; skipped with the reason if it cannot run.
    For the parity gate, a pair of them: the subject calls the left side, ``subject.other`` the right."""
    from . import active

    return active.subject(request)


@pytest.fixture
def parity(request: pytest.FixtureRequest) -> Parity:
    """The backends to compare with each other on one (device, dtype); skipped when fewer than two can run."""
    from . import active

    return active.parity(request)

