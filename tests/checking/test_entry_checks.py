"""The shared check set: every entry point gets every check of the table, under the rule it should be named
by, and a case names the entry point it calls (so a replay calls it again)."""

from __future__ import annotations

import pytest
import torch

from rmsnorm_conformance.harness.checking.entry_checks import ENTRY_CHECKS, _with_nonfinite
from rmsnorm_conformance.harness.drawing.cases import Batch, BatchSizeCase, NonfiniteCase
from rmsnorm_conformance.harness.drawing.replay import parse_case
from rmsnorm_conformance.harness.running.entry_points import ENTRY_POINTS
from rmsnorm_conformance.suites.rule_index import rule_tests

# Where each entry point's generated tests live, and their name prefix.
GENERATED = {"forward": ("test_axis_a.py", ""), "fused_add": ("test_variants.py", "fused_add_"),
             "forward_offset": ("test_variants.py", "offset_"),
             "forward_unweighted": ("test_variants.py", "unweighted_")}


def _rule(check, entry):
    own = ENTRY_POINTS[entry].rule
    return own if check.per_entry_rule and own else check.rule


def test_every_entry_point_gets_every_check_under_its_rule():
    index = rule_tests()
    for entry, (module, prefix) in GENERATED.items():
        for check in ENTRY_CHECKS:
            module_here = "test_semantics.py" if entry == "forward" and not check.axis_a else module
            names = [f"{module_here}::test_{prefix}{check.name}{suffix}" for suffix, _, _ in check.plans]
            if check.strategy is not None:
                names.append(f"{module_here}::test_{prefix}{check.name}")
            for name in names:
                assert name in index[_rule(check, entry)], f"{name} is not generated under {_rule(check, entry)}"


def test_first_calls_purity_and_fresh_outputs_keep_their_own_rule_for_every_entry_point():
    index = rule_tests()
    assert {"test_variants.py::test_fused_add_first_call", "test_axis_a.py::test_first_call"} <= set(
        index["axis_a.first_call"])
    assert "test_variants.py::test_unweighted_nonfinite_confined" in index["semantics.nonfinite_confined"]
    for entry in ENTRY_POINTS.values():
        assert entry.purity_rule in index


def test_a_case_names_the_variant_it_calls_and_replays_it():
    text = "BatchSizeCase(batch=Batch(dim=8, rows=4, dtype='bfloat16'), length=2, entry='fused_add')"
    case = parse_case(text)
    assert isinstance(case, BatchSizeCase) and case.entry == "fused_add"
    assert "entry='fused_add'" in repr(case)


@pytest.mark.parametrize(("dim", "rows", "rows_hit", "count"),
                         [(1, 300_000, 150_000, 1), (4096, 64, 32, 4096), (128, 4000, 1999, 64), (5, 7, 3, 2)])
def test_nonfinite_values_land_in_the_hit_rows_alone_and_the_same_every_time(dim, rows, rows_hit, count):
    """The planted values: ``count`` distinct columns of each of ``rows_hit`` rows (many hit rows included, which
    the planting once visited one at a time), nothing else changed, the same tensor for the same case."""
    batch = Batch(dim=dim, rows=rows, dtype="float32", values="normal", weight="around_one", seed=7)
    case = NonfiniteCase(batch, "neg_inf", rows_hit, count)
    x = torch.randn(rows, dim)
    dirty, hit = _with_nonfinite(case, x)
    planted = torch.isneginf(dirty)
    assert int(hit.sum()) == rows_hit and planted.any(1).equal(hit)
    assert (planted.sum(1)[hit] == count).all()
    assert torch.equal(dirty[~planted], x[~planted]) and not torch.isneginf(x).any()
    again, _ = _with_nonfinite(case, x)
    assert torch.equal(torch.isneginf(again), planted)
