"""When a pytest run is a conformance run, decided without importing torch or Hypothesis: pytest loads the plugin
in every run once the package is installed, and a run that is not a conformance run must not pay for them.

A run is a conformance run when one of the harness's options is given, when its arguments name the shipped
suites (by path, by package, or by the ``testpaths`` a run from this repository starts with), or, found only at
collection, when a collected test asks for a fixture only conformance tests use.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import pytest

from . import options

# Fixtures only conformance tests ask for: a test outside the shipped suites that takes one is a conformance test.
CONFORMANCE_FIXTURES = ("subject", "parity")


def explicit(opts: options.Options) -> bool:
    """Did the user give any of the harness's options that make a run a conformance run?"""
    return opts.activating


@cache
def suites_dir() -> Path:
    """The shipped suites' folder, found without importing them: the suites import the harness, never the other
    way round, and importing a package of test modules here would only be to read where it is."""
    spec = importlib.util.find_spec(f"{__name__.partition('.')[0]}.suites")
    assert spec is not None and spec.submodule_search_locations, "the package ships its suites"
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def targets_suites(config: pytest.Config, targets: list[str] | None = None) -> bool:
    """Do the run's arguments (or ``targets``, where pytest has not decided them yet) name the conformance suites
    (by package or by path)?"""
    suites = suites_dir()
    for arg in config.args if targets is None else targets:
        target = arg.split("::", 1)[0]
        if target.startswith("rmsnorm_conformance"):
            return True
        path = Path(config.invocation_params.dir, target).resolve()
        if path == suites or suites in path.parents or path in suites.parents:
            return True
    return False


def asks_for_conformance(fixturenames: list[str]) -> bool:
    """Does a test that takes these fixtures hold a backend to the contract?"""
    return any(name in fixturenames for name in CONFORMANCE_FIXTURES)
