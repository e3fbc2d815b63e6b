"""The harness's sweeps (``--sweep``): Hypothesis profiles applied to conformance tests only, and for ``smoke``
the share of the explicit checks it keeps. The table is plain data, read without importing Hypothesis (the
plugin's option help lists it in every pytest run); the profiles are registered when a test first asks for one.

Loading the plugin never touches Hypothesis' global profile, so a user's own ``@given`` tests in the same run
keep their settings. ``smoke`` is a pre-commit check, never the gate: 1 example a sweep test (the simplest), the
rules held bitwise (Axis-A, dx invariance, dw determinism) in float32 and bfloat16 and the others in bfloat16 (unless
``--dtype`` says otherwise), the weight in x's dtype except where a rule is about mixed pairs, and explicit cases
(thresholds, QK-norm shapes, first calls) for ``forward`` alone (not ``forward_fp32`` nor the variants), at
Qwen3-8B's dims (4096, 128) and one wide dim (16384), and heads (8, 32), within 2^18 elements. Every rule still
runs; its verdict reads ``PASS (smoke)``, and the report says what a full run adds.
"""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, NamedTuple

from ...contract import TARGET_DIMS
from ...contract.families import gradients
from ...contract.rmsnorm import THRESHOLD_DIMS

if TYPE_CHECKING:
    from hypothesis import settings

PREFIX = "rmsnorm-conformance."
_REGISTERED_WITH: set[int] = set()  # the Hypothesis settings classes the profiles are registered with


class Scope(NamedTuple):
    """What a sweep that is not the gate leaves out of a full run (``None``: nothing of that kind)."""

    dtypes: tuple[str, ...]  # the dtypes it checks the rules in, unless --dtype names others
    bitwise_rules: tuple[str, ...]  # rules (patterns) held bitwise: checked in ``bitwise_dtypes`` instead
    bitwise_dtypes: tuple[str, ...]
    threshold_dims: tuple[int, ...]  # of the contract's threshold dims, those whose explicit cases it runs
    qk_heads: tuple[int, ...]  # QK-norm head counts whose explicit shapes it runs
    threshold_elements: int  # at most this many elements in an explicit case, whatever the device's budget
    entries: tuple[str, ...]  # entry points whose explicit cases it runs (the variants keep their sweeps)

    def dtypes_for(self, rules: tuple[str, ...]) -> tuple[str, ...]:
        """The dtypes a test of ``rules`` runs in: ``bitwise_dtypes`` when every rule is held bitwise."""
        bitwise = bool(rules) and all(any(fnmatchcase(r, p) for p in self.bitwise_rules) for r in rules)
        return self.bitwise_dtypes if bitwise else self.dtypes

    def covers(self, case: Any) -> bool:
        """Does this scope keep ``case``, one of an explicit plan's cases?"""
        if getattr(case, "entry", "forward") not in self.entries:
            return False
        kind = type(case).__name__
        heads = case.shape[1] if kind == "LeadingDimsCase" and len(case.shape) > 1 else getattr(case, "heads", 1)
        if heads > 1 and heads not in self.qk_heads:
            return False
        dim = case.batch.dim
        return dim not in THRESHOLD_DIMS or dim in self.threshold_dims

    def leaves_out(self) -> str:
        """What a full run adds, in one line for the report."""
        dims = ", ".join(str(d) for d in THRESHOLD_DIMS if d not in self.threshold_dims)
        return (f"the rules held bitwise in dtypes other than {', '.join(self.bitwise_dtypes)} and the others in "
                f"dtypes other than {', '.join(self.dtypes)}, thresholds at dims {dims}, QK-norm shapes at other "
                f"head counts than {', '.join(map(str, self.qk_heads))}, explicit cases above "
                f"{self.threshold_elements} elements, the explicit cases (thresholds, QK-norm shapes, first "
                f"calls) of entry points other than {', '.join(self.entries)}, and weight dtypes other than x's "
                "outside the mixed-pair rules")


class Sweep(NamedTuple):
    """One ``--sweep`` profile."""

    description: str  # as ``--help`` and the README say it
    max_examples: int  # examples a Hypothesis sweep test runs
    derandomize: bool = False  # the same examples every run, and no example database
    scope: Scope | None = None  # what it leaves out of a full run; None: it is the gate (a full run)


# Held bitwise, so checked in float32, where a changed reduction order changes the bits of about half the rows
# (rounded to bfloat16 most such changes vanish: a first smoke in bfloat16 alone missed 14 of the zoo's 22 of them),
# and in bfloat16, the dtype models run in, whose code path a kernel may have of its own: a kernel that reduces in
# bfloat16 passed a float32-only smoke and failed three threshold tests in bfloat16 (native's smoke: 109 -> 182
# tests, 8.0-8.4 -> 9.2-9.8 s on an idle 2-core machine, reports/cpu/smoke.md).
SMOKE_BITWISE_RULES = ("axis_a.*", gradients.DX_BATCH_INVARIANCE.id, gradients.DW_DETERMINISM.id)
# One wide dim (Llama-3.1-405B's hidden): a wide row's own paths, at 16 rows within the smoke budget.
SMOKE_WIDE_DIM = 16384
# Qwen3-8B's QK-norm heads: 8 key/value heads and 32 query heads of head_dim 128.
SMOKE_QK_HEADS = (8, 32)
# 2^18 elements: 64 rows of 4096 (the decode thresholds) and 2048 of 128 (up to 1025 rows and 4 x 132 SMs).
SMOKE_THRESHOLD_ELEMENTS = 1 << 18
# Examples a smoke sweep test runs: Hypothesis' simplest case alone; a second, drawn example doubled the sweeps'
# time on the CPU (reports/cpu/smoke.md).
SMOKE_EXAMPLES = 1


SWEEPS: dict[str, Sweep] = {
    "dev": Sweep("quick local runs: 10 examples a test, random each run, failures saved in the example database",
                 max_examples=10),
    "ci": Sweep("the same 12 examples every run (derandomized), no example database", max_examples=12,
                derandomize=True),
    "thorough": Sweep("a long sweep before shipping a kernel: 200 examples a test", max_examples=200),
    "smoke": Sweep(
        f"a pre-commit check, never the gate: {SMOKE_EXAMPLES} example a test (the simplest), Axis-A in float32 "
        "and bfloat16 and the rest in bfloat16, the thresholds at Qwen3-8B's dims and 16384 only; its PASS reads "
        "'PASS (smoke)'",
        max_examples=SMOKE_EXAMPLES, derandomize=True,
        scope=Scope(dtypes=("bfloat16",), bitwise_rules=SMOKE_BITWISE_RULES,
                    bitwise_dtypes=("float32", "bfloat16"),
                    threshold_dims=(*TARGET_DIMS.values(), SMOKE_WIDE_DIM), qk_heads=SMOKE_QK_HEADS,
                    threshold_elements=SMOKE_THRESHOLD_ELEMENTS, entries=("forward",))),
}


def register_profiles() -> None:
    """Register every sweep as a Hypothesis profile named ``PREFIX + name``, once per import of Hypothesis (a
    pytest run in-process, as pytester's, can drop Hypothesis from sys.modules and import it anew)."""
    from hypothesis import HealthCheck, Phase, settings

    if id(settings) in _REGISTERED_WITH:
        return
    _REGISTERED_WITH.add(id(settings))

    # The subject fixture is function-scoped on purpose (one backend, device and dtype per test), case sizes vary
    # by design, and strategies filter by the size budget: none of these checks says anything useful here.
    health = (HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
              HealthCheck.filter_too_much, HealthCheck.differing_executors)
    # After a failure: shrink to the minimal configuration the report prints, and stop there. Hypothesis' explain
    # phase (which parts of the case could vary) re-ran a failing check about a hundred times for a line nobody
    # reads beside the minimal configuration and replay (20 of a zoo defect's 36 s), and generating on after the
    # first failure, looking for a second distinct bug, ran every remaining example of a test that had failed.
    phases = tuple(p for p in Phase if p is not Phase.explain)
    for name, sweep in SWEEPS.items():
        fixed: dict[str, Any] = {"derandomize": True, "database": None} if sweep.derandomize else {}
        settings.register_profile(PREFIX + name, max_examples=sweep.max_examples, deadline=None,
                                  suppress_health_check=health, print_blob=True, phases=phases,
                                  report_multiple_bugs=False, **fixed)


def default_sweep() -> str:
    """``ci`` where the ``CI`` environment variable is set (as CI services do), else ``dev``."""
    return "ci" if os.environ.get("CI") else "dev"


def sweep_settings(sweep: str, *, max_examples: int | None = None, replay: bool = False,
                   shrink: bool = True) -> settings:
    """The settings a conformance test runs under; ``replay`` runs exactly one example, the replayed case; without
    ``shrink`` a failing case is reported as drawn (shrinking finds the simplest one, and only re-runs the check
    on smaller cases: the verdict does not depend on it)."""
    from hypothesis import Phase, settings

    if sweep not in SWEEPS:
        raise ValueError(f"unknown sweep {sweep!r}; known: {', '.join(SWEEPS)}")
    register_profiles()
    overrides: dict = {}
    if max_examples is not None:
        overrides["max_examples"] = max_examples
    profile = settings.get_profile(PREFIX + sweep)
    if not shrink:
        overrides["phases"] = tuple(p for p in profile.phases if p is not Phase.shrink)
    if replay:
        overrides.update(max_examples=1, phases=(Phase.generate,), database=None, derandomize=True)
    return settings(profile, **overrides)
