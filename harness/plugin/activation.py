"""When a pytest run is a conformance run, decided without importing torch or Hypothesis: pytest loads the plugin
in every run once the package is installed, and a run that is not a conformance run must not pay for them.

A run is a conformance run when one of the harness's options is given, when its arguments name the shipped
suites (by path, by package, or by the ``testpaths`` a run from this repository starts with), or, found only at
collection, when a collected test asks for a fixture only conformance tests use.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rmsnorm_conformance.harness.plugin import options

# Fixtures only conformance tests ask for: a test outside the shipped suites that takes one is a conformance test.
CONFORMANCE_FIXTURES = ("subject", "parity")


def explicit(opts: options.Options) -> bool:
    """Did the user give any of the harness's options that make a run a conformance run?"""
    return opts.activating


def targets_suites(config: pytest.Config, targets: list[str] | None = None) -> bool:
    """Do the run's arguments (or ``targets``, where pytest has not decided them yet) name the conformance suites
    (by package or by path)?"""
    from rmsnorm_conformance import suites  # a package of test modules: only its location is read here

    suites_dir = Path(suites.__file__).resolve().parent
    for arg in config.args if targets is None else targets:
        target = arg.split("::", 1)[0]
        if target.startswith("rmsnorm_conformance"):
            return True
        path = Path(config.invocation_params.dir, target).resolve()
        if path == suites_dir or suites_dir in path.parents or path in suites_dir.parents:
            return True
    return False


def asks_for_conformance(fixturenames: list[str]) -> bool:
    """Does a test that takes these fixtures hold a backend to the contract?"""
    return any(name in fixturenames for name in CONFORMANCE_FIXTURES)
