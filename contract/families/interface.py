"""Interface: how a kernel refuses bad input and declares itself to torch. A breach warns unless the run asks
for ``--strict-interface``.
"""

from __future__ import annotations

from ..rules import Rule

SHAPE_ERROR = Rule(
    "interface.shape_error", "shape error",
    "The error for a wrong-shaped weight is a ValueError naming both shapes.", severity="interface")

INPUT_ERRORS = Rule(
    "interface.input_errors", "input errors",
    "Dtypes the backend does not declare raise TypeError naming the dtype, and so does every (x dtype, "
    "weight dtype) pair it does not declare, naming both; mismatched devices raise "
    "ValueError naming both devices; an eps that is not a number raises TypeError or ValueError naming eps; "
    "a non-finite or non-positive eps raises ValueError naming eps.", severity="interface")

OPCHECK = Rule(
    "interface.opcheck", "torch.library op check",
    "A backend that is a torch.library op passes torch.library.opcheck: its schema matches what it does "
    "(no undeclared mutation or aliasing), its fake (meta) kernel gives the real output's shape, dtype and "
    "strides, and its autograd registration is sound.", severity="interface")

IN_PLACE_VERSION = Rule(
    "interface.in_place_version", "in-place version counters",
    "A fused add that declares fused_add_in_place moves the autograd version counters of x and residual "
    "when it writes them, as every in-place torch op does: a graph that saved either before the write then "
    "refuses to use it, where a kernel that writes through pointers alone lets a backward run on "
    "overwritten values.", severity="interface")

# The family in CONTRACT.md's order.
RULES: tuple[Rule, ...] = (
    SHAPE_ERROR,
    INPUT_ERRORS,
    OPCHECK,
    IN_PLACE_VERSION,
)
