"""Hypothesis settings for the harness's own sweeps: namespaced profiles applied to conformance tests only.

Loading the plugin never touches Hypothesis' global profile, so a user's own ``@given`` tests in the same
run keep their settings. ``--sweep`` picks one of these profiles for the conformance tests alone.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PREFIX = "rmsnorm-conformance."
# The subject fixture is function-scoped on purpose (one backend, device and dtype per test), case sizes vary
# by design, and strategies filter by the size budget: none of these checks says anything useful here.
_HEALTH = (HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
           HealthCheck.filter_too_much, HealthCheck.differing_executors)
SWEEPS: dict[str, str] = {
    "dev": "quick local runs: 10 examples a test, random each run, failures saved in the example database",
    "ci": "the same 12 examples every run (derandomized), no example database",
    "thorough": "a long sweep before shipping a kernel: 200 examples a test",
}
settings.register_profile(PREFIX + "dev", max_examples=10, deadline=None, suppress_health_check=_HEALTH,
                          print_blob=True)
settings.register_profile(PREFIX + "ci", max_examples=12, deadline=None, suppress_health_check=_HEALTH,
                          derandomize=True, database=None, print_blob=True)
settings.register_profile(PREFIX + "thorough", max_examples=200, deadline=None, suppress_health_check=_HEALTH,
                          print_blob=True)


def default_sweep() -> str:
    """``ci`` where the ``CI`` environment variable is set (as CI services do), else ``dev``."""
    return "ci" if os.environ.get("CI") else "dev"


def sweep_settings(sweep: str, *, max_examples: int | None = None, replay: bool = False) -> settings:
    """The settings a conformance test runs under; ``replay`` runs exactly one example, the replayed case."""
    if sweep not in SWEEPS:
        raise ValueError(f"unknown sweep {sweep!r}; known: {', '.join(SWEEPS)}")
    overrides: dict = {}
    if max_examples is not None:
        overrides["max_examples"] = max_examples
    if replay:
        overrides.update(max_examples=1, phases=(Phase.generate,), database=None, derandomize=True)
    return settings(settings.get_profile(PREFIX + sweep), **overrides)
