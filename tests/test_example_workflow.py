"""The example's GitHub Actions workflow (examples/gate-your-kernel/ci.yml) runs only steps that ci/gate.sh
defines, so that the harness's test of the example (tests/test_wheel_install.py, which runs those steps in a
fresh environment) tests what the workflow runs. Read without a YAML parser: the workflow's run steps are lines."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gate-your-kernel"


def _jobs(text: str, *, commented: bool) -> dict[str, list[str]]:
    """Each job's lines (the commented-out ones with their '# ' taken off when ``commented``)."""
    jobs: dict[str, list[str]] = {}
    current = None
    for raw in text.splitlines():
        line = re.sub(r"^(\s*)# ?", r"\1", raw) if commented else raw
        if not commented and raw.lstrip().startswith("#"):
            continue
        job = re.match(r"^  ([\w-]+):\s*$", line)
        if job:
            current = job.group(1)
            jobs[current] = []
        elif current and (line.startswith("    ") or not line.strip()):
            jobs[current].append(line)
    return jobs


def _runs(lines: list[str]) -> list[str]:
    return [m.group(1).strip() for ln in lines if (m := re.match(r"^\s*(?:- )?run:\s*(.+)$", ln))]


def test_the_workflow_runs_only_the_steps_of_its_script_with_a_timeout():
    text = (EXAMPLE / "ci.yml").read_text()
    script = (EXAMPLE / "ci" / "gate.sh").read_text()
    steps = set(re.findall(r"^    (\w+)\) \w+ ;;$", script, re.MULTILINE))
    assert steps == {"install", "gate"}
    active = _jobs(text, commented=False)
    assert list(active) == ["gate-cpu"], "one job runs as written: the CPU one"
    everything = _jobs(text, commented=True)
    assert "gate-gpu" in everything, "a GPU-runner job, commented out, for runners that have a GPU"
    for name, lines in everything.items():
        runs = _runs(lines)
        assert runs == ["bash ci/gate.sh install", "bash ci/gate.sh gate"], (name, runs)
        assert any(re.match(r"^\s*timeout-minutes: \d+\b", ln) for ln in lines), f"{name} has no timeout"
    cpu = "\n".join(active["gate-cpu"])
    assert "runs-on: ubuntu-latest" in cpu and "TORCH_INSTALL" not in cpu  # the CPU build, the script's default
    assert "cu1" in "\n".join(everything["gate-gpu"])  # a CUDA build of torch on the GPU runner
    # The harness is built from its repository, never installed by a name the package index does not have.
    assert "pip install rmsnorm-conformance" not in text and "HARNESS: ${{ github.workspace }}" in text


def test_the_script_refuses_an_unknown_step_and_a_missing_harness(tmp_path):
    bad = subprocess.run(["bash", str(EXAMPLE / "ci" / "gate.sh"), "deploy"], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2 and "usage: bash ci/gate.sh install|gate" in bad.stderr
    missing = subprocess.run(["bash", str(EXAMPLE / "ci" / "gate.sh"), "install"], cwd=tmp_path,
                             capture_output=True, text=True, check=False,
                             env={"PATH": "/usr/bin:/bin", "TORCH_INSTALL": ""})
    assert missing.returncode != 0 and "set HARNESS" in missing.stderr
