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
import sys
from dataclasses import dataclass, field, fields
from typing import Any

import pytest

from ...contract import DEFAULT_PROFILE, PROFILES
from ..drawing.budget import (
    CPU_SWEEP_ELEMENTS,
    GPU_SWEEP_ELEMENTS,
    INTERPRETED_SWEEP_ELEMENTS,
)
from ..drawing.sweeps import SWEEPS, default_sweep
from ..running.hangs import DEFAULT_CASE_TIMEOUT
from ..running.registry import known_backend_names
from .state import GIVEN_OPTIONS, WORKER_GIVEN

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
    in_files: bool = True  # settable in a configuration file; not what is for one command (a case to replay)


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
             "parity with eager: a comma list of compile, cudagraph, deterministic (skipped with the reason where a "
             "mode cannot run). Without it a sample of every entry point runs under torch.compile, deterministic "
             "algorithms, no_grad, inference_mode, on a CPU 1, 2, 4 and the machine's count of threads, and on a "
             "GPU CUDA-graph replay (axis_a.execution_mode); none turns that sample off.")
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
    target_dims: str | None = _declare(
        None, kind=JOINED, metavar="NAME=DIM",
        help="the model's own dims the verdict requires to be checked, as a comma list of NAME=DIM (or plain dims), "
             "e.g. hidden=5120,head_dim=128: a backend that refuses one of them, or declares limits that keep it out, "
             "reads INCOMPLETE naming it, never PASS.",
        default_text="the contract's, hidden=4096,head_dim=128")
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
        None, metavar="PATH", in_files=False,
        help="write every breach of this run to PATH as a known-failures manifest (TOML): the baseline a gate "
             "adopts with --known-failures=PATH, so that only new breaches fail it. Each case then runs to its end, "
             "so that one run lists every rule it breaks.")
    replay: str | None = _declare(
        None, metavar="CASE", in_files=False,
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
    given: frozenset[str] = frozenset()  # the harness's options the command line itself gave a value
    configured: dict[str, str] = field(default_factory=dict)  # the others set, each with where (a file, addopts)
    short_names: frozenset[str] = frozenset()  # the options that answer to their short name in this run
    problems: tuple[str, ...] = ()  # what is wrong in the configuration file's settings

    def flag(self, name: str) -> str:
        """The name that sets option ``name`` in this run: ``--backend`` where it is the harness's, else
        ``--rmsnorm-backend`` (a conftest of the project claimed ``--backend``)."""
        return short(name) if name in self.short_names else prefixed(name)

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


def prefixed(name: str) -> str:
    """The name option ``name`` always has: ``--rmsnorm-backend``."""
    return "--rmsnorm-" + name.replace("_", "-")


def short(name: str) -> str:
    """The short name option ``name`` has where nothing else claimed it: ``--backend``."""
    return "--" + name.replace("_", "-")


def dest(name: str) -> str:
    """Where pytest keeps option ``name``'s value, and its ini key: ``rmsnorm_backend``, a name no other suite's
    conftest is likely to take (``device`` is common in ML repositories)."""
    return "rmsnorm_" + name


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


# Settable in a configuration file only: pytest-xdist's -n for a conformance run (``apply_workers``).
WORKERS_HELP = "pytest-xdist workers (-n) for a conformance run whose command line gives no -n: a count or auto."
INI_TYPES = {FLAG: "bool", APPEND: "linelist"}


def add_options(parser: pytest.Parser, *, conftests_loaded: bool = False) -> None:
    """The harness's option group, every option declared on ``Options``: each under its prefixed name, and each
    as an ini key. The short names are claimed once the project's conftests have added their options (pytest's
    ``pytest_load_initial_conftests``), or here where they already have."""
    group = parser.getgroup(GROUP, "RMSNorm numerical-contract conformance")
    for name, default, how in declared():
        attrs: dict[str, Any] = {"dest": dest(name), "help": help_text(name, default, how)}
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
        group.addoption(prefixed(name), **attrs)
        if how.in_files:
            parser.addini(dest(name), f"as {prefixed(name)} (or {short(name)}) on the command line.",
                          type=INI_TYPES.get(how.kind, "string"), default=None)  # type: ignore[arg-type]
    parser.addini(dest("workers"), WORKERS_HELP, type="string", default=None)
    if conftests_loaded:
        claim_short_names(parser)


# pytest's option parser as pytest 8 and 9 keep it: the option strings taken, and adding a short name to one of
# this plugin's options. pytest offers no public way to ask whether a name is taken, nor to give it back.
def _arguments(parser: pytest.Parser) -> list[Any]:
    return [argument for group in getattr(parser, "_groups", []) for argument in group.options]


def _taken(parser: pytest.Parser) -> set[str]:
    taken = {name for argument in _arguments(parser) for name in argument.names()}
    actions = getattr(getattr(parser, "optparser", None), "_option_string_actions", None)  # pytest 9: core options
    return taken | set(actions or ())


def _ours(parser: pytest.Parser) -> dict[str, Any]:
    """This plugin's options by name, as pytest's parser holds them."""
    by_dest = {dest(name): name for name, _, _ in declared()}
    return {by_dest[a.dest]: a for a in _arguments(parser) if a.dest in by_dest and prefixed(by_dest[a.dest])
            in a.names()}


def _names_of(argument: Any) -> list[str] | None:
    """The list of option strings an option answers to, to add a name to or take one from (pytest 9 keeps the
    argparse action's, pytest 8 its own long options); None where pytest keeps them otherwise."""
    action = getattr(argument, "_action", None)
    names = getattr(action, "option_strings", None) if action is not None else getattr(argument, "_long_opts", None)
    return names if isinstance(names, list) else None


def claim_short_names(parser: pytest.Parser) -> None:
    """Give each of this plugin's options its short name (``--backend``) where no other option has it."""
    taken = _taken(parser)
    optparser = getattr(parser, "optparser", None)
    opt2dest = getattr(parser, "_opt2dest", None)
    if not isinstance(opt2dest, dict):  # a pytest that keeps its parser otherwise: the prefixed names only
        return
    for name, argument in _ours(parser).items():
        names = _names_of(argument)
        if names is None or short(name) in taken:
            continue
        names.append(short(name))
        opt2dest[short(name)] = argument.dest
        if optparser is not None:
            optparser._option_string_actions[short(name)] = argument._action


def has_short_name(config: pytest.Config, name: str) -> bool:
    """Does option ``name`` answer to its short name in this run?"""
    parser = getattr(config, "_parser", None)
    argument = _ours(parser).get(name) if parser is not None else None
    return argument is not None and short(name) in argument.names()


def of(config: pytest.Config) -> Options:
    """The run's options, read once a process, at its configure at the earliest (pytest-xdist settles ``-n`` and
    ``--dist`` in its ``pytest_cmdline_main``)."""
    if GIVEN_OPTIONS not in config.stash:
        config.stash[GIVEN_OPTIONS] = read(config)
    return config.stash[GIVEN_OPTIONS]


def read(config: pytest.Config) -> Options:
    """The options as they stand now, with each default put in: for the supervisor, which decides before any
    plugin's configure (``of`` keeps the run's). The command line (and pytest's addopts) comes first, then the
    configuration file's ``rmsnorm_*`` ini keys, then pyproject.toml's ``[tool.rmsnorm_conformance]`` table."""
    values: dict[str, Any] = {}
    typed = typed_on_command_line(config)
    given, configured, short_names = set(), {}, set()
    settings, problems = file_settings(config)
    for name, default, how in declared():
        if has_short_name(config, name):
            short_names.add(name)
        raw = config.getoption(dest(name), None)
        if raw is None or raw is False or (how.kind == APPEND and not raw):
            raw, source = settings.get(name, (None, ""))
            if raw is not None:
                configured[name] = source
        elif name not in typed:
            configured[name] = "addopts"
        if raw not in (None, [], False, ()) and name in typed:  # 0 for a count is checked, but not a trigger
            given.add(name)
        values[name] = default if raw is None else tuple(raw) if how.kind == APPEND else raw
    if not values["sweep"]:
        values["sweep"] = default_sweep()
    option = config.option
    return Options(
        **values, given=frozenset(given), configured=configured, short_names=frozenset(short_names),
        problems=tuple(problems),
        workers=getattr(option, "numprocesses", None), dist=getattr(option, "dist", "no") or "no",
        verbose=config.getoption("verbose", 0) or 0, keyword=config.getoption("keyword", "") or "",
        markexpr=config.getoption("markexpr", "") or "",
        narrowing=tuple(word for dest, word in (("lf", "--lf"), ("stepwise", "--sw"), ("stepwise_skip", "--sw-skip"))
                        if config.getoption(dest, False)),
        deselect=tuple(config.getoption("deselect", None) or ()),
        hypothesis_seed=config.getoption("hypothesis_seed", None),
        hypothesis_profile=config.getoption("hypothesis_profile", None),
        help_or_version=bool(config.getoption("help", False) or config.getoption("version", False)))


def typed_on_command_line(config: pytest.Config) -> frozenset[str]:
    """The harness's options the command line itself names (not addopts, PYTEST_ADDOPTS or a file): only those
    make a run a conformance run. A pytest-xdist worker has its controller's."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return frozenset(workerinput.get(WORKER_GIVEN, ()))
    words = {str(arg).split("=", 1)[0] for arg in config.invocation_params.args}
    return frozenset(name for name, _, _ in declared()
                     if prefixed(name) in words or (short(name) in words and has_short_name(config, name)))


def file_settings(config: pytest.Config) -> tuple[dict[str, tuple[Any, str]], list[str]]:
    """The options a configuration file sets, each with the file it came from; and what in them is wrong (a usage
    error once the run is a conformance run: a run of other tests must not fail for it)."""
    settings: dict[str, tuple[Any, str]] = {}
    problems: list[str] = []
    table, where = pyproject_table(config, problems)
    kinds = {name: how for name, _, how in declared()}
    for key, value in table.items():
        if key == "backends":  # backends' declared capabilities (running/adapters.py), not an option
            continue
        if key != "workers" and (key not in kinds or not kinds[key].in_files):
            known = sorted(k for k in [*kinds, "workers"] if k == "workers" or kinds[k].in_files)
            problems.append(f"{where}: unknown key {key!r}; known: {', '.join(known)}")
            continue
        settings[key] = (value, where)
    inifile = config.inipath.name if config.inipath is not None else "ini"
    for key in [*kinds, "workers"]:
        if key != "workers" and not kinds[key].in_files:
            continue
        try:
            value = config.getini(dest(key))
        except (ValueError, KeyError):
            continue
        if value not in (None, "", [], False):
            settings[key] = (value, f"{dest(key)} in {inifile}")
    typed: dict[str, tuple[Any, str]] = {}
    for key, (value, source) in settings.items():
        try:
            typed[key] = (_typed(value, kinds.get(key)), source)
        except (TypeError, ValueError) as exc:
            problems.append(f"{source}: {key} = {value!r}: {exc}")
    return typed, problems


def pyproject_table(config: pytest.Config, problems: list[str]) -> tuple[dict[str, Any], str]:
    """pyproject.toml's ``[tool.rmsnorm_conformance]`` table, from the file pytest took its configuration from, else
    the one in its rootdir; and how the report names where a setting came from."""
    path = config.inipath if config.inipath is not None and config.inipath.name == "pyproject.toml" \
        else config.rootpath / "pyproject.toml"
    where = f"[tool.{TABLE}] in {path.name}"
    if not path.is_file():
        return {}, where
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10: tomli, a dependency there
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as exc:
        problems.append(f"{path}: {exc}")
        return {}, where
    table = data.get("tool", {}).get(TABLE, {})
    if not isinstance(table, dict):
        problems.append(f"{where}: not a table")
        return {}, where
    return table, where


TABLE = "rmsnorm_conformance"


def _typed(value: Any, how: Declared | None) -> Any:
    """A file's value as the command line would have given it."""
    if how is None:  # workers: a count, or what pytest-xdist takes instead of one
        text = str(value).strip()
        if text in ("auto", "logical") or (text.isdigit() and not isinstance(value, bool)):
            return text
        raise ValueError("a count of workers, auto or logical")
    if how.kind == FLAG:
        return _flag_value(value)
    if how.kind in (APPEND, JOINED) and isinstance(value, (str, list)):
        items = [value] if isinstance(value, str) else value
        # Whole numbers too, for lists of them (dims = [6144, 128]).
        if not all(isinstance(i, (str, int)) and not isinstance(i, bool) for i in items):
            raise TypeError("a string or a list of strings")
        items = [str(i) for i in items]
        return tuple(items) if how.kind == APPEND else ",".join(items)
    if how.kind in (APPEND, JOINED) or isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError("a string or a number")
    if how.type is not None:
        try:
            return how.type(value)
        except ValueError:
            raise ValueError("not a whole number" if how.type is int else "not a number") from None
    if how.choices is not None and str(value) not in how.choices:
        raise ValueError(f"one of {', '.join(how.choices)}")
    return str(value)


def _flag_value(value: Any) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    if not isinstance(value, bool):
        raise TypeError("true or false")
    return value


def apply_workers(config: pytest.Config, args: list[str], conformance: bool) -> None:
    """A configuration file's ``workers``, as ``-n`` in ``args`` before pytest parses them for good: for a
    conformance run with pytest-xdist loaded whose command line chose no workers itself."""
    if not conformance or not config.pluginmanager.has_plugin("xdist"):
        return
    workers = file_settings(config)[0].get("workers")
    chosen = any(a.split("=", 1)[0] in ("-n", "--numprocesses", "--dist", "-d", "--tx") or
                 (a.startswith("-n") and a[2:].isalnum()) for a in map(str, args))
    if workers is not None and not chosen:
        args[:0] = ["-n", str(workers[0])]


def early_targets(config: pytest.Config) -> list[str]:
    """The run's targets as pytest will decide them (``Config._decide_args``), before it has: the arguments, else
    the ``testpaths`` of a run started in the rootdir."""
    typed = list(getattr(config.known_args_namespace, "file_or_dir", None) or ())
    if typed or config.invocation_params.dir != config.rootpath:
        return typed
    return list(config.getini("testpaths") or ())


def not_run_line(opts: Options) -> str:
    """The one line a run prints when the configuration sets conformance options but no conformance suite was
    selected, so that the settings do not read as a gate that passed."""
    values = {name: getattr(opts, name) for name in opts.configured}
    shown = ", ".join(f"{name}={','.join(v) if isinstance(v, tuple) else v}" for name, v in values.items())
    where = ", ".join(dict.fromkeys(opts.configured.values()))
    return (f"rmsnorm-conformance: {shown} set ({where}), but no conformance suite was selected, so none ran; run "
            "`pytest --pyargs rmsnorm_conformance.suites`")


def reference() -> str:
    """docs/options.md: every option's names, ini key, default and help, from the declarations above
    (``python -m rmsnorm_conformance.harness.plugin.options > docs/options.md``; a test keeps the page equal)."""
    lines = [
        "# Options",
        "",
        "<!-- Generated from harness/plugin/options.py: python -m rmsnorm_conformance.harness.plugin.options "
        "> docs/options.md -->",
        "",
        "Every option of the harness has a prefixed name (`--rmsnorm-backend`) that always works, and a short name",
        "(`--backend`) wherever no conftest or plugin of the project has claimed it. pytest refuses two options of",
        "one name: where a project's `conftest.py` adds `--device`, its own option keeps `--device`, and the",
        "harness's is `--rmsnorm-device`. The replay command a failure prints uses the names that work in that",
        "project.",
        "",
        "Each option can also be set in a configuration file: as an ini key (`rmsnorm_backend = \"native\"` under",
        "`[tool.pytest.ini_options]` in pyproject.toml, or `[pytest]` in pytest.ini), or in a",
        f"`[tool.{TABLE}]` table of pyproject.toml (`backend = \"native\"`; lists may be TOML lists). The command",
        "line comes first, then the ini key, then the table. A setting in a file never makes a run of the project's",
        "own tests a conformance run: the suites run only when they are selected (`pytest --pyargs",
        "rmsnorm_conformance.suites`, or `testpaths` naming them), and otherwise the run prints one line saying",
        "why no conformance test ran. A wrong value in the file is a usage error of a conformance run only.",
        "",
        "| Option | Short name | ini key / table key | Default | What it does |",
        "|---|---|---|---|---|",
    ]
    for name, default, how in declared():
        text = how.help.replace("{names}", "native, triton, cuda, or an installed adapter's entry-point name")
        repeats = REPEATS.get(how.kind, "")
        key = f"`{dest(name)}` / `{name}`" if how.in_files else "command line only"
        shown = default_words(default, how).removeprefix("Default: ").removesuffix(".") or "–"
        lines.append(f"| `{prefixed(name)}` | `{short(name)}` | {key} | {shown} | "
                     f"{' '.join(p for p in (text, repeats) if p).replace('|', '/')} |")
    lines.append(f"| – | – | `{dest('workers')}` / `workers` | – | {WORKERS_HELP} |")
    lines += [
        "",
        "A gate configured in pyproject.toml, run with a plain `pytest`:",
        "",
        "```toml",
        "[tool.pytest.ini_options]",
        'addopts = "--pyargs"',
        'testpaths = ["rmsnorm_conformance.suites"]',
        "",
        f"[tool.{TABLE}]",
        'backend = "mykernel:rms_norm"',
        'device = "cuda"',
        'sweep = "ci"',
        'report = ["conformance.md", "conformance.json"]',
        "deadline = 1500",
        "workers = 8",
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference(), end="")
