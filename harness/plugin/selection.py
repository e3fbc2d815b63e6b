"""What a run selected, against what the full gate checks: the rules, dtypes, devices and tests it left out, and
the thresholds its element budget did not reach, and what a sweep that is not the gate (smoke) leaves out. A run
that left anything out can pass only as ``PASS (partial)``, or ``PASS (smoke)``: the report says what the full
gate would add, and the JSON carries the selection as data. The run's target dims, and the ones a backend's declared
limits keep out, go with it: such a backend reads INCOMPLETE, naming them (records.Collector.coverage_gaps).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ...contract import DTYPES
from ..drawing.sweeps import SWEEPS
from ..running.devices import default_devices
from ..vocabulary.records import Collector
from . import options
from .activation import suites_dir
from .run_options import RunOptions


def selection(config: pytest.Config, options: RunOptions, collector: Collector) -> dict[str, Any]:
    """The run's selection as data, with ``full_gate_adds``: one line per thing the full gate would add."""
    adds: list[str] = []
    sweep = SWEEPS[options.sweep]
    if sweep.scope is not None:
        examples = options.max_examples or sweep.max_examples
        adds.append(f"the gate's sweep: --sweep={options.sweep} ran {examples} example{'s' * (examples != 1)} a "
                    f"sweep test where --sweep=ci runs {SWEEPS['ci'].max_examples}, and left out "
                    f"{sweep.scope.leaves_out()}")
    if options.rules:
        adds.append(f"rules: only {', '.join(options.rules)} ran; the full gate checks every rule")
    missing_dtypes = [d for d in DTYPES if d not in options.dtypes]
    if missing_dtypes:
        adds.append(f"dtypes: {', '.join(missing_dtypes)}")
    types = {d.type for d in options.devices}
    missing_devices = [str(d) for d in default_devices() if d.type not in types]
    if missing_devices:
        adds.append(f"devices: {', '.join(missing_devices)}")
    tests = narrowed_tests(config)
    if tests:
        adds.append(f"tests left out by {', '.join(tests)}")
    if options.replay_case is not None:
        adds.append("the sweeps: --replay ran one case")
    own = set(options.not_run)
    for entry in collector.not_run:  # what tests of this run said they left out (the threshold plans' budget)
        # A case outside a backend's declared limits (entry["limits"]) is outside what the full gate runs, too.
        if (entry["backend"], entry["device"], entry["reason"]) not in own and not entry.get("limits"):
            adds.append(f"{entry['backend']} on {entry['device']}: {entry['reason']}")
    # A kernel may decline the model's own shapes by its declared limits: not a selection (the full gate would not
    # run them either), but it cannot pass as if the target dims had been checked (Collector.coverage_gaps).
    gaps = {b.name: b.limits.target_gaps(options.target_dims) for b in options.backends
            if b.limits.target_gaps(options.target_dims)}
    return {"sweep": options.sweep, "sweep_is_gate": sweep.scope is None,
            "rules": list(options.rules) or "all", "dtypes": list(options.dtypes),
            "devices": [str(d) for d in options.devices], "tests": tests,
            "replay": repr(options.replay_case) if options.replay_case is not None else None,
            "full_gate_adds": adds, "target_gaps": gaps,
            "target_dims": {name: dim for name, dim in options.target_dims}}


def narrowed_tests(config: pytest.Config) -> list[str]:
    """The options and arguments that left conformance tests out: -k, -m, --lf, --sw, --deselect, and
    arguments that name less than the whole suites."""
    opts = options.of(config)
    found = []
    if opts.keyword:
        found.append(f"-k {opts.keyword!r}")
    if opts.markexpr:
        found.append(f"-m {opts.markexpr!r}")
    found += opts.narrowing
    if opts.deselect:
        found.append("--deselect")
    # An argument beside the whole suites (the project's own tests, `pytest suites tests`) leaves nothing out of
    # them; without the whole suites, every argument narrows the run.
    whole = any(_whole_suites(arg, config) for arg in config.args)
    found += [arg for arg in config.args if not _whole_suites(arg, config) and (not whole or _in_suites(arg, config))]
    return found


def _in_suites(arg: str, config: pytest.Config) -> bool:
    """Does ``arg`` name a part of the shipped suites (a module, a test)?"""
    target = arg.split("::", 1)[0]
    if target.startswith("rmsnorm_conformance.suites"):
        return True
    suites_dir, path = _suites_and(target, config)
    return path == suites_dir or suites_dir in path.parents


def _whole_suites(arg: str, config: pytest.Config) -> bool:
    if "::" in arg:
        return False
    if arg in ("rmsnorm_conformance", "rmsnorm_conformance.suites"):
        return True
    suites_dir, path = _suites_and(arg, config)
    return path == suites_dir or path in suites_dir.parents


def _suites_and(target: str, config: pytest.Config) -> tuple[Path, Path]:
    """The shipped suites' folder, and ``target`` as a path from where the run started."""
    return suites_dir(), Path(config.invocation_params.dir, target).resolve()
