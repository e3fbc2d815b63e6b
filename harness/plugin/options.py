"""The harness's options, each declared once (name, type, default, help) and read once into one frozen ``Options``.

Every other module takes what it needs from ``Options`` (``options.of(config)``): nothing else asks pytest for an
option, so an option has one default and one parse, and a stage cannot see ``None`` where the run resolved a
default. The pytest options the harness reads as well (``-n``, ``-v``, ``-k``, ...) are read here too.

This module imports neither torch nor Hypothesis: pytest loads the plugin in every run, and the activation and the
supervisor read the options before a run is known to be a conformance run. What the options resolve to once the run
is one (the backends loaded, the devices asked) is ``run_options.RunOptions``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import Any

import pytest

from rmsnorm_conformance.contract import DEFAULT_PROFILE, PROFILES
from rmsnorm_conformance.harness.drawing.budget import (
    CPU_SWEEP_ELEMENTS,
    GPU_SWEEP_ELEMENTS,
    INTERPRETED_SWEEP_ELEMENTS,
)
from rmsnorm_conformance.harness.drawing.sweeps import SWEEPS, default_sweep
from rmsnorm_conformance.harness.running.hangs import DEFAULT_CASE_TIMEOUT
from rmsnorm_conformance.harness.running.registry import known_backend_names

GROUP = "rmsnorm-conformance"

# How an option takes its value on the command line.
VALUE = "value"  # --x=V; the last one given counts
JOINED = "joined"  # --x=a,b; given more than once, the values are joined into one comma list
APPEND = "append"  # --x=V, repeatable; every value kept, in order
FLAG = "flag"  # --x, no value


@dataclass(frozen=True)
class Declared:
    """One harness option as the command line takes it: how it parses, its metavar and its help."""

    help: str
    kind: str = VALUE
    metavar: str | None = None
    type: type | None = None
    choices: tuple[str, ...] | None = None
    default_text: str = ""  # the help's "(default: ...)", where the field's default does not say it
    activates: bool = True  # given, it makes the run a conformance run (activation.py)


def _declare(default: Any, help: str, **how: Any) -> Any:
    return field(default=default, metadata={"declared": Declared(help=help, **how)})


class JoinedList(argparse.Action):
    """A comma-list option given more than once keeps every value, as one comma list: ``--backend=mine
    --backend=native`` is ``--backend=mine,native``. argparse keeps the last value alone, and the run then passed on
    native's checks with the kernel named first never loaded, exit status 0."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        previous = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, f"{previous},{values}" if previous else values)


@dataclass(frozen=True)
class Options:
    """Every option the harness reads, as given or at its one default. The fields with a ``declared`` entry are
    the harness's own options, in the order ``--help`` lists them; the others are pytest's and its plugins'."""

    backend: str | None = _declare(
        None, kind=JOINED, metavar="SPEC",
        help="backends to hold to the contract: a name ({names}), a comma list, 'all', or module.path:attr naming a "
             "backend class, factory or instance, a function (x, weight, eps), an nn.Module class, a torch.library "
             "op (module.path:namespace::name) or a partial, importable from the current directory.",
        default_text="each of native, triton, cuda that can run here")
    device: str | None = _declare(
        None, kind=JOINED, metavar="DEVICE",
        help="devices to run on: cpu, cuda, cuda:N, all, or a comma list.",
        default_text="the CPU and every GPU")
    dtype: str | None = _declare(
        None, kind=JOINED, metavar="DTYPES",
        help="input dtypes to check: a comma list of float32, bfloat16, float16.",
        default_text="all three")
    rule: str | None = _declare(
        None, kind=JOINED, metavar="RULES",
        help="run only the tests of these contract rules: a comma list of rule ids or patterns such as 'axis_a.*'.",
        default_text="every rule")
    report: tuple[str, ...] = _declare(
        (), kind=APPEND, metavar="PATH",
        help="write the tolerance report to PATH: .json as JSON, .md or .markdown as markdown.")
    bench_json: str | None = _declare(
        None, metavar="PATH",
        help="a benchmark JSON (benchmarks/bench.py) whose bandwidth and latency go into the report's 'Pick a "
             "kernel' section and pictures.")
    contract_profile: str = _declare(
        DEFAULT_PROFILE, choices=tuple(sorted(PROFILES)), activates=False,
        help="the bounds to hold outputs to.")
    strict_interface: bool = _declare(
        False, kind=FLAG,
        help="fail the run on breaches of interface rules (which exception, which words), not only warn.")
    require_parity: tuple[str, ...] = _declare(
        (), kind=APPEND, metavar="A:B",
        help="require two backends (each optionally @device) to give bit-identical outputs for the same input bits "
             "under every Axis-A variant, dtype and shared entry point; a difference fails the run (e.g. "
             "triton:cuda, native@cpu:native@cuda).")
    modes: str | None = _declare(
        None, metavar="MODES",
        help="also run each backend's forward under these execution modes over the full sweep and require bitwise "
             "parity with eager: a comma list of compile, cudagraph (skipped with the reason where a mode cannot "
             "run). Without it a sample of every entry point runs under torch.compile, no_grad, inference_mode and, "
             "on a GPU, CUDA-graph replay (axis_a.execution_mode); none turns that sample off.")
    sweep: str = _declare(
        "", choices=tuple(sorted(SWEEPS)),
        help="how hard Hypothesis searches in conformance tests (and only there): "
             + "; ".join(f"{k}: {v.description}" for k, v in SWEEPS.items()) + ".",
        default_text="ci when $CI is set, else dev")
    dims: str | None = _declare(
        None, kind=JOINED, metavar="DIMS",
        help="a model's own last dims (its hidden size, head_dim, ...) as a comma list, e.g. 6144,128: the sweeps "
             "draw them beside the contract's, and the explicit checks (row thresholds, accuracy, 3-D views, first "
             "calls, the execution-mode sample) run at each.",
        default_text="the contract's dims only")
    max_examples: int | None = _declare(
        None, type=int, metavar="N",
        help="examples per conformance test, overriding the sweep's count.")
    no_shrink: bool = _declare(
        False, kind=FLAG, activates=False,
        help="report a failing case as it was drawn, without Hypothesis shrinking it to the simplest failing "
             "configuration: a faster FAIL where the verdict is all that is wanted (its replay still reproduces "
             "it). The verdict is the same either way.")
    known_failures: str | None = _declare(
        None, metavar="PATH",
        help="a manifest (TOML or JSON) of expected breaches per backend, device, dtype and rule (and, optionally, "
             "case): each such breach is reported as expected, and any other still fails the run, also in the same "
             "test; a test whose only breaches are listed xfails.")
    strict_known_failures: bool = _declare(
        False, kind=FLAG,
        help="fail the run on a --known-failures entry that was checked and never breached (as pytest's strict "
             "xfail fails an xpass): the manifest then lists exactly what is still broken.")
    write_known_failures: str | None = _declare(
        None, metavar="PATH",
        help="write every breach of this run to PATH as a known-failures manifest (TOML): the baseline a gate "
             "adopts with --known-failures=PATH, so that only new breaches fail it. Each case then runs to its end, "
             "so that one run lists every rule it breaks.")
    replay: str | None = _declare(
        None, metavar="CASE",
        help="run the selected conformance tests on this one case, as a failure printed it, instead of a sweep.")
    case_timeout: float = _declare(
        DEFAULT_CASE_TIMEOUT, type=float, metavar="SECONDS",
        help="fail a backend's check when one case runs longer than this; the backend's other tests on that device "
             "are then not run, and the run goes on (0: no deadline).")
    deadline: float = _declare(
        0.0, type=float, metavar="SECONDS",
        help="end the whole run after this many seconds, with a report of what finished and what did not: FAIL if "
             "something failed by then, else INCOMPLETE. Set it below the CI job's own timeout, so the report is "
             "written before the job is killed.",
        default_text="no limit")
    max_elements: int | None = _declare(
        None, type=int, metavar="N",
        help="largest batch (rows x dim) a case may draw, and the threshold checks build.",
        default_text=f"on a GPU a share of its free memory, the sweep at most {GPU_SWEEP_ELEMENTS}; on a CPU "
                     f"{CPU_SWEEP_ELEMENTS}, {INTERPRETED_SWEEP_ELEMENTS} for interpreted backends, and more for "
                     "the threshold checks")

    # pytest's and its plugins' options the harness reads.
    workers: Any = None  # pytest-xdist's -n as it holds it (a count, 'auto', 'logical'), None without it
    dist: str = "no"  # pytest-xdist's --dist
    verbose: int = 0
    keyword: str = ""
    markexpr: str = ""
    narrowing: tuple[str, ...] = ()  # --lf, --sw, --sw-skip as given
    deselect: tuple[str, ...] = ()
    hypothesis_seed: str | None = None
    hypothesis_profile: str | None = None
    help_or_version: bool = False
    given: frozenset[str] = frozenset()  # the harness's options given a value other than their default

    @property
    def activating(self) -> bool:
        """Was one of the options given that make a run a conformance run?"""
        return any(how.activates for name, _, how in declared() if name in self.given)

    @property
    def shrink(self) -> bool:
        return not self.no_shrink


def declared() -> list[tuple[str, Any, Declared]]:
    """(name, default, declaration) of each of the harness's options, in ``--help``'s order."""
    return [(f.name, f.default, f.metadata["declared"]) for f in fields(Options) if "declared" in f.metadata]


def flag(name: str) -> str:
    """The command-line name of option ``name``."""
    return "--" + name.replace("_", "-")


REPEATS = {JOINED: "Repeatable: the values are joined.", APPEND: "Repeatable."}


def help_text(name: str, default: Any, how: Declared) -> str:
    """An option's help in the one style every option's follows: what it does, whether it repeats, its default."""
    text = how.help.replace("{names}", ", ".join(known_backend_names())) if name == "backend" else how.help
    return " ".join(part for part in (text, REPEATS.get(how.kind, ""), default_words(default, how)) if part)


def default_words(default: Any, how: Declared) -> str:
    """"Default: ..." where the option has a default worth saying (not a flag's off, nor an empty list)."""
    shown = how.default_text or ("" if how.kind in (FLAG, APPEND) or default in (None, "") else f"{default:g}"
                                 if isinstance(default, float) else str(default))
    return f"Default: {shown}." if shown else ""


def add_options(parser: pytest.Parser) -> None:
    """The harness's option group, every option declared on ``Options``."""
    group = parser.getgroup(GROUP, "RMSNorm numerical-contract conformance")
    for name, default, how in declared():
        attrs: dict[str, Any] = {"dest": name, "help": help_text(name, default, how)}
        if how.kind == FLAG:
            attrs.update(action="store_true", default=False)
        else:
            attrs.update(default=[] if how.kind == APPEND else None, metavar=how.metavar)
            if how.kind == JOINED:
                attrs["action"] = JoinedList
            elif how.kind == APPEND:
                attrs["action"] = "append"
            if how.type is not None:
                attrs["type"] = how.type
            if how.choices is not None:
                attrs.update(choices=list(how.choices), metavar=None)
        group.addoption(flag(name), **attrs)


# The key each process keeps its Options under, once read.
OPTIONS = pytest.StashKey[Options]()


def of(config: pytest.Config) -> Options:
    """The run's options, read once a process, at its configure at the earliest (pytest-xdist settles ``-n`` and
    ``--dist`` in its ``pytest_cmdline_main``)."""
    if OPTIONS not in config.stash:
        config.stash[OPTIONS] = read(config)
    return config.stash[OPTIONS]


def read(config: pytest.Config) -> Options:
    """The options as they stand now, with each default put in: for the supervisor, which decides before any
    plugin's configure (``of`` keeps the run's)."""
    values: dict[str, Any] = {}
    given = set()
    for name, default, how in declared():
        raw = config.getoption(name, None)
        if raw not in (None, [], False):  # as given: 0 for a count is the user's (and checked), not the default
            given.add(name)
        if raw is None or (how.kind == APPEND and not raw):
            values[name] = default
        else:
            values[name] = tuple(raw) if how.kind == APPEND else raw
    if not values["sweep"]:
        values["sweep"] = default_sweep()
    option = config.option
    return Options(
        **values, given=frozenset(given),
        workers=getattr(option, "numprocesses", None), dist=getattr(option, "dist", "no") or "no",
        verbose=config.getoption("verbose", 0) or 0, keyword=config.getoption("keyword", "") or "",
        markexpr=config.getoption("markexpr", "") or "",
        narrowing=tuple(word for dest, word in (("lf", "--lf"), ("stepwise", "--sw"), ("stepwise_skip", "--sw-skip"))
                        if config.getoption(dest, False)),
        deselect=tuple(config.getoption("deselect", None) or ()),
        hypothesis_seed=config.getoption("hypothesis_seed", None),
        hypothesis_profile=config.getoption("hypothesis_profile", None),
        help_or_version=bool(config.getoption("help", False) or config.getoption("version", False)))
