"""``rmsnorm-conformance explain``, ``contract`` and ``--version``: the rules' text from the command line, read from
the contract, the defect zoo and the suites; the docs' rule pages are rendered by the same functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmsnorm_conformance import CONTRACT_VERSION, __version__, contract
from rmsnorm_conformance.__main__ import main
from rmsnorm_conformance.explain import defects_by_rule, family_pages
from rmsnorm_conformance.zoo import DEFECTS

ROOT = Path(__file__).resolve().parents[2]


def test_explain_prints_statement_severity_defects_tests_and_replay(capsys):
    assert main(["explain", "axis_a.padding"]) == 0
    out = capsys.readouterr().out
    rule = contract.rule("axis_a.padding")
    assert out.startswith("# `axis_a.padding`: padding\n")
    assert rule.statement in out
    assert "**Severity:** numerics: a breach fails the run." in out
    planted = [d.__name__ for d in DEFECTS if d.breaks == "axis_a.padding"]
    assert planted and all(f"rmsnorm_conformance.zoo:{name}" in out for name in planted)
    assert "suites/test_axis_a.py::test_padding" in out
    assert ("replay: pytest --pyargs rmsnorm_conformance.suites --backend=SPEC --device=DEVICE --dtype=DTYPE "
            "--rule=axis_a.padding --contract-profile=PROFILE --replay=\"CASE\"") in out
    assert (f"--backend=rmsnorm_conformance.zoo:{planted[0]} --rule=axis_a.padding -x") in out


def test_explain_of_an_interface_rule_says_it_warns(capsys):
    assert main(["explain", "interface.shape_error"]) == 0
    assert "**Severity:** interface: a breach is a warning" in capsys.readouterr().out


def test_explain_of_a_family_prints_each_of_its_rules(capsys):
    assert main(["explain", "gradients"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("# ")] == \
        [f"# `{r.id}`: {r.title}" for r in contract.GRADIENT_RULES]


@pytest.mark.parametrize(("typed", "meant"), [("axis_a.pading", "axis_a.padding"), ("padding", "axis_a.padding"),
                                              ("gradients.dw_tol", "gradients.dw_tolerance")])
def test_an_unknown_rule_exits_2_and_names_the_near_ones(capsys, typed, meant):
    assert main(["explain", typed]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"no contract rule {typed!r}; did you mean {meant}" in captured.err


def test_a_rule_like_none_exits_2_and_points_to_the_list(capsys):
    assert main(["explain", "zzz"]) == 2
    err = capsys.readouterr().err
    assert "no contract rule 'zzz'\n" in err and "explain --list" in err


def test_explain_lists_every_rule_by_family(capsys):
    assert main(["explain", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(r.id in out for r in contract.ALL_RULES)


def test_every_planted_defect_is_named_on_its_rules_page():
    pages = family_pages()
    for rule in contract.ALL_RULES:
        (page,) = [text for text in pages.values() if f"## `{rule.id}`: " in text]
        section = page.split(f"## `{rule.id}`: ", 1)[1].split("\n## `", 1)[0]
        assert rule.statement in section
        for defect in defects_by_rule().get(rule.id, []):
            assert defect.spec in section
    assert sum(len(d) for d in defects_by_rule().values()) >= len(DEFECTS)


def test_every_defect_of_the_zoos_modules_is_planted():
    """The defect list is derived from the zoo's modules; a module left out of it drops its defects from detection
    and from the rule pages alike (a star import once shadowed one module with a contract module of its name)."""
    import importlib

    for name in ("defects", "fp8"):
        module = importlib.import_module(f"rmsnorm_conformance.zoo.{name}")
        declared = [obj for obj in vars(module).values() if isinstance(obj, type)
                    and obj.__module__ == module.__name__ and isinstance(vars(obj).get("breaks"), str)]
        assert declared and all(cls in DEFECTS for cls in declared), name


def test_version_names_the_package_and_the_contract(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"rmsnorm-conformance {__version__} (contract {contract.VERSION})\n"
    assert CONTRACT_VERSION == contract.VERSION


def test_contract_alone_prints_the_shipped_contract(capsys):
    assert main(["contract"]) == 0
    assert capsys.readouterr().out == (ROOT / "CONTRACT.md").read_text()


def test_contract_check_fails_on_a_stale_table(tmp_path, capsys):
    stale = tmp_path / "CONTRACT.md"
    stale.write_text((ROOT / "CONTRACT.md").read_text().replace(f"- **Version:** {contract.VERSION}",
                                                                "- **Version:** 0.0.1"))
    assert main(["contract", "--check", str(stale)]) == 1
    assert "rmsnorm-conformance contract --write" in capsys.readouterr().out
    assert main(["contract", "--write", str(stale)]) == 0
    assert main(["contract", "--check", str(stale)]) == 0
