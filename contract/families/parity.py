"""Parity: two backends (or one and itself compiled or replayed) give the same bits. Checked only when a run
asks for it (``--require-parity``, ``--modes``): then it gates like any numerics rule.
"""

from __future__ import annotations

from ..rules import Rule

BITWISE = Rule(
    "parity.bitwise", "bitwise parity",
    "Two backends required to be at parity (or one backend and itself under torch.compile or CUDA-graph "
    "replay) give identical output bits for the same input bits, under every Axis-A variant, dtype and "
    "entry point both offer. A NaN matches any NaN in the same place: IEEE 754 leaves NaN sign and payload "
    "to the implementation, and devices differ in them.")

# The family in CONTRACT.md's order.
RULES: tuple[Rule, ...] = (
    BITWISE,
)
