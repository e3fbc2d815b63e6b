"""The long tier's list (tests/long_tier.py) names tests that exist: a renamed test would leave the tier unseen and
its entry would be dead."""

import subprocess
import sys
from pathlib import Path

from tests.long_tier import LONG_TESTS, is_long

ROOT = Path(__file__).resolve().parents[2]


def test_every_entry_of_the_long_tier_names_a_test_function_that_exists():
    missing = []
    for entry in LONG_TESTS:
        path, _, name = entry.split("[", 1)[0].partition("::")
        source = ROOT / path
        if not source.is_file() or f"def {name}(" not in source.read_text(encoding="utf-8"):
            missing.append(entry)
    assert not missing, missing
    assert len(set(LONG_TESTS)) == len(LONG_TESTS)


def test_a_parametrized_test_of_the_tier_is_long_in_every_parametrization():
    entry = "tests/plugin/test_supervisor.py::test_an_exit_hook_cannot_turn_a_fail_into_status_0"
    assert is_long(entry) and is_long(f"{entry}[two workers]")
    assert not is_long(f"{entry}_and_more") and not is_long("tests/plugin/test_supervisor.py::test_other")


def test_every_parametrization_the_tier_names_is_collected():
    """An entry of one parametrization names an id pytest collects: a renamed group would leave it in CI unseen."""
    entries = [e for e in LONG_TESTS if "[" in e]
    assert entries
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *entries],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert set(entries) <= set(done.stdout.splitlines()), done.stdout[-3000:]


def test_one_parametrization_of_a_test_can_join_the_tier_alone():
    entry = next(e for e in LONG_TESTS if "[" in e)
    assert is_long(entry) and not is_long(entry.split("[", 1)[0] + "[no-such-group]")
