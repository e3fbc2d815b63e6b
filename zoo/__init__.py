"""The planted-defect zoo: backends that each break one contract rule the way a real kernel does, and correct
backends the suites must pass. A defect is any backend here that declares the rule it breaks (``breaks``), so
the defect list is derived, never kept by hand; the harness's meta-tests and benchmarks import it from here.
"""

from __future__ import annotations

from rmsnorm_conformance.zoo import defects
from rmsnorm_conformance.zoo.defects import *  # noqa: F403 (every backend of the zoo, by name, as specs name them)

# Every backend of the zoo that declares the rule it breaks, in the order the zoo defines them.
DEFECTS: tuple[type, ...] = tuple(
    obj for obj in vars(defects).values()
    if isinstance(obj, type) and obj.__module__ == defects.__name__ and isinstance(vars(obj).get("breaks"), str))
