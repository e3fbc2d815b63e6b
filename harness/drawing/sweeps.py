"""Hypothesis settings for the harness's own sweeps: namespaced profiles applied to conformance tests only.

Loading the plugin never touches Hypothesis' global profile, so a user's own ``@given`` tests in the same
run keep their settings. ``--sweep`` picks one of these profiles for the conformance tests alone. The table is
plain data, read without importing Hypothesis (the plugin's option help lists it in every pytest run); the
profiles are registered with Hypothesis when a conformance test first asks for one.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from hypothesis import settings

PREFIX = "rmsnorm-conformance."


class Sweep(NamedTuple):
    """One ``--sweep`` profile."""

    description: str  # as ``--help`` and the README say it
    max_examples: int  # examples a Hypothesis sweep test runs
    derandomize: bool = False  # the same examples every run, and no example database


SWEEPS: dict[str, Sweep] = {
    "dev": Sweep("quick local runs: 10 examples a test, random each run, failures saved in the example database",
                 max_examples=10),
    "ci": Sweep("the same 12 examples every run (derandomized), no example database", max_examples=12,
                derandomize=True),
    "thorough": Sweep("a long sweep before shipping a kernel: 200 examples a test", max_examples=200),
}


@functools.cache
def register_profiles() -> None:
    """Register every sweep as a Hypothesis profile named ``PREFIX + name`` (once per process)."""
    from hypothesis import HealthCheck, settings

    # The subject fixture is function-scoped on purpose (one backend, device and dtype per test), case sizes vary
    # by design, and strategies filter by the size budget: none of these checks says anything useful here.
    health = (HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
              HealthCheck.filter_too_much, HealthCheck.differing_executors)
    for name, sweep in SWEEPS.items():
        fixed = {"derandomize": True, "database": None} if sweep.derandomize else {}
        settings.register_profile(PREFIX + name, max_examples=sweep.max_examples, deadline=None,
                                  suppress_health_check=health, print_blob=True, **fixed)


def default_sweep() -> str:
    """``ci`` where the ``CI`` environment variable is set (as CI services do), else ``dev``."""
    return "ci" if os.environ.get("CI") else "dev"


def sweep_settings(sweep: str, *, max_examples: int | None = None, replay: bool = False) -> settings:
    """The settings a conformance test runs under; ``replay`` runs exactly one example, the replayed case."""
    from hypothesis import Phase, settings

    if sweep not in SWEEPS:
        raise ValueError(f"unknown sweep {sweep!r}; known: {', '.join(SWEEPS)}")
    register_profiles()
    overrides: dict = {}
    if max_examples is not None:
        overrides["max_examples"] = max_examples
    if replay:
        overrides.update(max_examples=1, phases=(Phase.generate,), database=None, derandomize=True)
    return settings(settings.get_profile(PREFIX + sweep), **overrides)
