"""The conformance harness, in five stages that data flows through one way:

``drawing``  (cases, strategies, thresholds, budget, sweeps, replay)
-> ``running``  (backends and their registry, devices, entry points, isolation, modes)
-> ``checking`` (subject, assertions, the ``conformance`` decorator, comparisons, rounding, known failures)
-> ``reporting`` (records, render, "Pick a kernel", pictures, merge)
with ``plugin`` (pytest options, fixtures, hooks, the run's report writer) driving them.

This module is the public face that suites and users import from. Names resolve lazily, so importing the
package (which pytest does for every run once the plugin is installed) costs nothing until one is used.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module (under this package) that defines it.
_EXPORTS: dict[str, str] = {
    # drawing
    "strategies": "drawing",
    "thresholds": "drawing",
    "Batch": "drawing.cases",
    "drawing_device": "drawing.cases",
    "AccuracyCase": "drawing.cases",
    "NonfiniteCase": "drawing.cases",
    "GradientCase": "drawing.cases",
    "lay_out_weight": "drawing.cases",
    # running
    "Backend": "running.backend",
    "BackendError": "running.backend",
    "OpBackend": "running.registry",
    "kernel_registry": "running.registry",
    "load_backend": "running.registry",
    "rmsnorm_backend": "running.adapters",
    # checking
    "Subject": "checking.checks",
    "conformance": "checking.checks",
    "run_check": "checking.checks",
    "assert_bitwise": "checking.checks",
    "assert_within": "checking.checks",
    "assert_holds": "checking.checks",
    "reference_fp32": "checking.checks",
    "correctly_rounded": "checking.checks",
    "explicit_cases": "checking.plans",
    "guard": "checking.bounds",
    "offset_room": "drawing.budget",
    "compare_bitwise": "checking.comparison",
    "compare_within": "checking.comparison",
    "ulp_distance": "checking.comparison",
    "rounding": "checking",
    "OutsideDeclaredLimits": "checking.refusals",
    "skip_outside_limits": "checking.refusals",
    "Refused": "checking.refusals",
    # used by the suites
    "WEIGHT_LAYOUTS": "drawing.cases",
    "BatchSizeCase": "drawing.cases",
    "FirstCallCase": "drawing.cases",
    "GradModeCase": "drawing.cases",
    "LeadingDimsCase": "drawing.cases",
    "PaddingCase": "drawing.cases",
    "PermutationCase": "drawing.cases",
    "PositionCase": "drawing.cases",
    "RepeatCase": "drawing.cases",
    "SliceCase": "drawing.cases",
    "StridedCase": "drawing.cases",
    "make_pad": "drawing.cases",
    "strided_layout": "drawing.cases",
    "call": "running.entry_points",
    "entry_points": "running.entry_points",
    "missing_reason": "running.entry_points",
    "first_call_plan": "running.fresh_process",
    "run_fresh": "running.fresh_process",
    "exception_text": "running",
    "ROUNDED_ENTRY_POINTS": "running.backend",
    "same_layout_copy": "running.backend",
    "EntryPoint": "running.entry_points",
    "ENTRY_POINTS": "running.entry_points",
    "FUSED_ADD": "running.entry_points",
    "OFFSET": "running.entry_points",
    "UNWEIGHTED": "running.entry_points",
    # the check set every entry point shares, and the tests generated from it
    "AXIS_A_CHECKS": "checking.entry_checks",
    "SEMANTIC_CHECKS": "checking.entry_checks",
    "FORWARD_GROUP": "checking.entry_checks",
    "VARIANT_BUDGET_SHARE": "checking.entry_checks",
    "VARIANT_GROUPS": "checking.entry_checks",
    "generate_tests": "checking.entry_checks",
    "variant_group": "checking.entry_checks",
    # reporting
    "Collector": "vocabulary.records",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{where}")
    # A name is an attribute of its module, or (``strategies`` from ``drawing``) a submodule of a package.
    value = getattr(module, name) if hasattr(module, name) else importlib.import_module(f"{module.__name__}.{name}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
