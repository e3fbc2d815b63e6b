"""The example's GitHub Actions workflow (examples/gate-your-kernel/ci.yml) gates the kernel through the harness's
action (action.yml at the repository's root) with inputs the action declares, under a timeout its deadline fits in;
its local script (ci/gate.sh) passes the same options the action does. tests/package/test_wheel_install.py runs that
script in a fresh environment, in a copy of the example and inside a clone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gate-your-kernel"


def _uncommented(text: str) -> str:
    """The workflow with its commented-out job's lines as they read uncommented (the GPU job)."""
    return "\n".join(line.replace("# ", "", 1) if re.match(r"^  # (gate-gpu:|  )", line) else line
                     for line in text.splitlines())


def _gate_step(job: dict) -> dict:
    (step,) = [s for s in job["steps"] if s.get("uses") == "./"]
    return step


def test_the_workflow_gates_the_kernel_with_the_action_under_a_timeout():
    text = (EXAMPLE / "ci.yml").read_text()
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    workflow = yaml.safe_load(text)
    assert list(workflow["jobs"]) == ["gate-cpu"], "one job runs as written: the CPU one"
    everything = yaml.safe_load(_uncommented(text))["jobs"]
    assert list(everything) == ["gate-cpu", "gate-gpu"], "a GPU-runner job, commented out, for runners with a GPU"
    for name, job in everything.items():
        step = _gate_step(job)
        given = step["with"]
        assert set(given) <= set(action["inputs"]), (name, set(given) - set(action["inputs"]))
        assert given["backend"] == "my_rmsnorm" and given["working-directory"] == "examples/gate-your-kernel"
        # The deadline leaves the job's timeout time to install and to upload the report.
        assert 0 < int(given["deadline"]) < job["timeout-minutes"] * 60 - 120, name
        assert job["steps"][0]["uses"].startswith("actions/checkout@"), name
    assert "torch" not in _gate_step(everything["gate-cpu"])["with"]  # the CPU build: the action's default
    assert "cu1" in _gate_step(everything["gate-gpu"])["with"]["torch"]  # a CUDA build on the GPU runner
    assert "pip install rmsnorm-conformance" not in text


def test_the_script_passes_the_options_the_action_passes():
    script = (EXAMPLE / "ci" / "gate.sh").read_text()
    action = (ROOT / "action.yml").read_text()
    for option in ("--deadline=", "-n ", "--report=conformance.md", "--report=conformance.json",
                   "--junitxml=conformance.xml", "--pyargs rmsnorm_conformance.suites"):
        assert option in script and option in action, option


def test_the_script_refuses_an_unknown_step_and_a_missing_harness(tmp_path):
    bad = subprocess.run(["bash", str(EXAMPLE / "ci" / "gate.sh"), "deploy"], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2 and "usage: bash ci/gate.sh install|gate" in bad.stderr
    missing = subprocess.run(["bash", str(EXAMPLE / "ci" / "gate.sh"), "install"], cwd=tmp_path,
                             capture_output=True, text=True, check=False,
                             env={"PATH": "/usr/bin:/bin", "TORCH_INSTALL": ""})
    assert missing.returncode != 0 and "set HARNESS" in missing.stderr
