"""Axis-A: a row's output bits must not depend on what else is in the batch, in every dtype and through every
entry point the backend offers.

Each ``test_<variant>`` is one variant of CONTRACT.md's Axis-A table, swept by Hypothesis through ``forward``
and ``forward_fp32`` (the case says which); each ``test_<variant>_at_thresholds`` (and the QK-norm ones) runs
the contract's thresholds as explicit cases beside it, so that no threshold is reached only by chance. The
tests are generated from the one check set of harness/checking/entry_checks.py, which also generates the
variants' tests (test_variants.py): a check exists once for every entry point.
"""

from __future__ import annotations

from ..harness import AXIS_A_CHECKS, FORWARD_GROUP, generate_tests

globals().update(generate_tests(FORWARD_GROUP, __name__, AXIS_A_CHECKS))
