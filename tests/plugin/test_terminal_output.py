"""What a run prints at default verbosity: a passing run fits a screen, and each note appears once."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A small passing run, as the quick start's: workers, a sweep that leaves cases out (so 'Did not run' has reasons),
# and pytest's -ra, whose skip lines would repeat those reasons.
ARGS = ("--pyargs", "rmsnorm_conformance.suites", "--backend=native", "--device=cpu", "--sweep=smoke",
        "--rule=axis_b.*,semantics.*", "-n", "2", "-ra", "-p", "no:cacheprovider")
# The most lines a passing run prints at default verbosity (header, progress, verdict, what did not run, the end).
MOST_LINES = 40


def test_a_passing_run_prints_at_most_forty_lines_each_note_once(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess(*ARGS)
    assert result.ret == 0, result.stdout.str()
    lines = result.outlines
    assert len(lines) <= MOST_LINES, "\n".join(lines)
    notes = [line for line in lines if line.strip() and not line.startswith(("=", "-", "."))]
    repeated = {line for line in notes if notes.count(line) > 1}
    assert not repeated, repeated
    assert not any(line.startswith("SKIPPED [") for line in lines), "-ra's skips repeat 'Did not run'"
    assert any(line.startswith("Did not run") for line in lines), "the reasons are summed up, not dropped"
    assert "RMSNorm conformance: PASS (smoke)" in result.stdout.str()


def test_verbose_prints_every_table(pytester, monkeypatch):
    """-v keeps what the quiet run leaves out: the environment line and every table."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess(*ARGS[:-6], "--rule=semantics.*", "-p", "no:cacheprovider", "-v")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["contract * profile * | sweep smoke*", "Tolerance: Axis-B*",
                                 "Other rules (pass/fail)"])
