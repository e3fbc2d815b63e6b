"""The reusable GitHub Action (action.yml at the repository's root): a composite action with the inputs and outputs
the docs promise, whose gate passes --deadline and -n, whose reports are uploaded whatever the verdict, and whose
every step reads only inputs it declares."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
PROMISED_INPUTS = {"backend", "device", "sweep", "args", "deadline", "workers", "working-directory", "python-version",
                   "torch", "install", "report-name"}


def _steps() -> list[dict]:
    return ACTION["runs"]["steps"]


def _gate() -> dict:
    (step,) = [s for s in _steps() if s.get("id") == "gate"]
    return step


def test_a_composite_action_with_the_promised_inputs_and_outputs():
    assert ACTION["runs"]["using"] == "composite"
    assert ACTION["name"] and ACTION["description"]
    assert set(ACTION["inputs"]) == PROMISED_INPUTS
    assert ACTION["inputs"]["backend"]["required"] is True
    assert all(not spec.get("required") or name == "backend" for name, spec in ACTION["inputs"].items())
    assert all(spec.get("description") for spec in ACTION["inputs"].values())
    assert {"verdict", "exit-status", "report"} <= set(ACTION["outputs"])
    assert ACTION["outputs"]["verdict"]["value"] == "${{ steps.gate.outputs.verdict }}"


def test_every_input_a_step_reads_is_declared_and_every_shell_step_names_its_shell():
    text = (ROOT / "action.yml").read_text()
    read = set(re.findall(r"inputs\.([\w-]+)", text))
    assert read <= set(ACTION["inputs"]), read - set(ACTION["inputs"])
    assert set(ACTION["inputs"]) <= read, "an input no step reads"
    for step in _steps():
        assert ("run" in step) != ("uses" in step), step
        if "run" in step:
            assert step["shell"] == "bash", step


def test_the_gate_passes_deadline_and_workers_and_writes_the_verdict_output():
    run = _gate()["run"]
    assert '--deadline="$DEADLINE"' in run and '-n "$WORKERS"' in run
    env = _gate()["env"]
    assert env["DEADLINE"] == "${{ inputs.deadline }}" and env["WORKERS"] == "${{ inputs.workers }}"
    assert "--pyargs rmsnorm_conformance.suites" in run and "--report=conformance.json" in run
    assert 'echo "verdict=$verdict" >> "$GITHUB_OUTPUT"' in run
    # The gate's own failure does not end the action before the upload: its status is kept and given at the end.
    assert "|| status=$?" in run


def test_the_reports_are_uploaded_whatever_the_verdict_and_the_step_then_fails_on_it():
    names = [s.get("uses", "").split("@")[0] for s in _steps()]
    upload = _steps()[names.index("actions/upload-artifact")]
    assert upload["if"] == "always()"
    assert all(f"conformance.{ext}" in upload["with"]["path"] for ext in ("md", "json", "xml"))
    assert names.index("actions/upload-artifact") > [s.get("id") for s in _steps()].index("gate")
    last = _steps()[-1]
    assert last["run"].strip().endswith('exit "$STATUS"')
    assert last["env"]["STATUS"] == "${{ steps.gate.outputs.exit-status }}"


def test_the_gate_step_runs_and_gives_the_verdict_and_exit_status(tmp_path):
    """The gate step's script as the runner runs it (bash, the step's env with the inputs put in), on the native
    backend and one rule: its outputs name the verdict and the exit status, and the reports are where the upload
    step looks."""
    inputs = {"backend": "native", "device": "cpu", "sweep": "smoke", "deadline": "600", "workers": "0",
              "args": "--rule=axis_b.output --dtype=float32 --max-examples=2 -p no:cacheprovider"}
    env = {name: re.sub(r"\$\{\{ inputs\.([\w-]+) \}\}", lambda m: inputs[m.group(1)], value)
           for name, value in _gate()["env"].items()}
    output, summary = tmp_path / "output", tmp_path / "summary.md"
    done = subprocess.run(["bash", "-e", "-c", _gate()["run"]], cwd=tmp_path, capture_output=True, text=True,
                          check=False, env={**os.environ, **env, "GITHUB_OUTPUT": str(output),
                                            "GITHUB_STEP_SUMMARY": str(summary)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert dict(line.split("=", 1) for line in output.read_text().splitlines()) == {
        "exit-status": "0", "verdict": "PASS"}
    assert all((tmp_path / f"conformance.{ext}").is_file() for ext in ("md", "json", "xml"))
