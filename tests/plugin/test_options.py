"""One home for an option: the options module declares, reads and defaults every option the harness reads; the
rest of the harness and the suites take the resolved ``Options``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rmsnorm_conformance.harness.plugin import options

ROOT = Path(__file__).resolve().parents[2]
OPTIONS_MODULE = ROOT / "harness" / "plugin" / "options.py"
# An option read from pytest by any route: getoption, getini, getvalue, or the namespace itself.
READS = re.compile(r"\.(getoption|getini|getvalue)\(|\.option\.(?!maxschedchunk\b)[a-z_]+(?!\s*=[^=])")


def _reads_outside() -> list[str]:
    found = []
    for folder in ("harness", "suites", "backends", "contract", "rmsnorm_conformance"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == OPTIONS_MODULE:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if READS.search(line) and not line.lstrip().startswith("#"):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_option_is_read_outside_the_options_module():
    assert _reads_outside() == []


def test_the_guard_sees_a_read(tmp_path):
    """The guard's pattern matches each way an option can be read, so a pass above means none is there."""
    for line in ('config.getoption("--sweep")', "request.config.getini('x')", "config.option.numprocesses",
                 "getattr(x, 'y') or config.getvalue('z')"):
        assert READS.search(line), line
    assert not READS.search("config.option.maxschedchunk = 1")


def test_each_option_has_one_default(pytester: pytest.Pytester):
    """Read from a run that gives no option, every declared option holds the default its field declares (the
    sweep's being the environment's)."""
    pytester.makeconftest("""
        import json
        from rmsnorm_conformance.harness.plugin import options

        def pytest_configure(config):
            o = options.of(config)
            config._seen = {n: getattr(o, n) for n, _, _ in options.declared()}

        def pytest_unconfigure(config):
            print("SEEN", json.dumps(config._seen, default=list))
    """)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:randomly")
    line = next(x for x in result.outlines if x.startswith("SEEN "))
    import json

    seen = json.loads(line[5:])
    for name, default, _ in options.declared():
        expected = list(default) if isinstance(default, tuple) else default
        if name == "sweep":
            assert seen[name] in ("ci", "dev")
        else:
            assert seen[name] == expected, name


def test_help_follows_one_style():
    """Every option's help starts lower-case and ends with a full stop; a repeatable one says so once."""
    for name, default, how in options.declared():
        text = options.help_text(name, default, how)
        assert text[0].islower() and text.endswith("."), name
        assert "repeatable" not in how.help.lower(), name


def test_the_options_page_is_the_options_modules_own():
    """docs/options.md is generated from the declarations: an option added, renamed or re-defaulted there shows
    here until the page is regenerated (``python -m rmsnorm_conformance.harness.plugin.options > docs/options.md``)."""
    assert (ROOT / "docs" / "options.md").read_text() == options.reference()
