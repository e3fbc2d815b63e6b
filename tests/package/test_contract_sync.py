"""CONTRACT.md and contract/ say the same thing, and every rule is checked by some suite."""

from __future__ import annotations

from pathlib import Path

from rmsnorm_conformance import contract
from rmsnorm_conformance.contract.render import render

ROOT = Path(__file__).resolve().parents[2]


def test_contract_md_tables_match_the_module():
    text = (ROOT / "CONTRACT.md").read_text()
    assert render(text) == text, "CONTRACT.md is out of date: run `rmsnorm-conformance contract --write`"


def test_every_number_in_the_module_appears_in_contract_md():
    text = (ROOT / "CONTRACT.md").read_text()
    for prof in contract.PROFILES.values():
        for dtype in contract.DTYPES:
            assert prof.output_bound(dtype).describe() in text
            assert prof.gradient_bound(dtype).describe() in text
    assert contract.VERSION in text


def test_every_rule_is_checked_by_a_suite():
    from rmsnorm_conformance.suites.rule_index import rule_tests

    checked = rule_tests()  # read from the tests the suites declare (or generate from the shared check set)
    unchecked = [r.id for r in contract.ALL_RULES if r.id not in checked]
    assert not unchecked, f"rules no suite records: {unchecked}"


def test_profiles_cover_every_dtype():
    for prof in contract.PROFILES.values():
        for dtype in contract.DTYPES:
            prof.output_bound(dtype)
            prof.gradient_bound(dtype)
