"""The planted-defect zoo: backends that each break one contract rule the way a real kernel does, and correct
backends the suites must pass. A defect is any backend here that declares the rule it breaks (``breaks``), so
the defect list is derived, never kept by hand; the harness's meta-tests and benchmarks import it from here.
``zoo.faults`` holds the device and memory faults apart: they need a GPU or a simulated device loss, and
tests/faults/test_faults.py runs them.
"""

from __future__ import annotations

# Aliased: the star imports below bring in the contract's fp8 family module, which would shadow a plain ``fp8``.
from . import defects as _defects
from . import fp8 as _fp8
from .defects import *  # noqa: F403 (every backend of the zoo, by name, as specs name them)
from .fp8 import *  # noqa: F403

# Every backend of the zoo that declares the rule it breaks, in the order the zoo's modules define them.
DEFECTS: tuple[type, ...] = tuple(
    obj for module in (_defects, _fp8) for obj in vars(module).values()
    if isinstance(obj, type) and obj.__module__ == module.__name__ and isinstance(vars(obj).get("breaks"), str))
