"""Which suite test checks which contract rule, read from the ``conformance`` markers the tests declare.

Nothing keeps this map by hand: a test declares its rules once (``@conformance("axis_a.padding", ...)``),
and tools that need the map (the defect meta-tests, the benchmarks) derive it here.
"""

from __future__ import annotations

import importlib
import pkgutil


def rule_tests() -> dict[str, list[str]]:
    """rule id -> ``module::test`` names of the suite tests that check it."""
    from .. import suites

    index: dict[str, list[str]] = {}
    for info in pkgutil.iter_modules(suites.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"{suites.__name__}.{info.name}")
        for name, obj in vars(module).items():
            for mark in getattr(obj, "pytestmark", []):
                if mark.name == "conformance":
                    for rule_id in mark.kwargs.get("rules", ()):
                        index.setdefault(rule_id, []).append(f"{info.name}.py::{name}")
    return index
