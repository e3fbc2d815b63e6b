"""A user's module keeps its name in every process the harness starts (harness/running/child_imports.py): the
first-call check's fresh process imports what the test process imported, where pytest or a fresh interpreter would
put a folder of the same name first on its path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_conformance.harness.running import child_imports

ROOT = Path(__file__).resolve().parents[2]

# A correct kernel in a module named like one of the harness's source folders (zoo/ beside suites/ in a clone).
ZOO = """
import torch


def K(x, weight, eps=1e-6):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
"""


@pytest.mark.fresh_interpreter
def test_a_users_module_named_like_a_source_folder_is_the_users_in_the_first_call_process(pytester, monkeypatch):
    """Under the editable install the harness's own tests run in, pytest puts the clone's root first on the test
    process's path once it collects the suites: there ``zoo`` is the harness's folder of planted defects. The
    fresh first-call process had taken that path, and failed ``axis_a.first_call`` with "module 'zoo' has no
    attribute 'K'"."""
    monkeypatch.delenv("PYTHONPATH", raising=False)
    pytester.makepyfile(zoo=ZOO)
    result = pytester.runpytest_subprocess(
        "--pyargs", "rmsnorm_conformance.suites", "--backend=zoo:K", "--device=cpu", "--dtype=float32",
        "--rule=axis_a.first_call", "--sweep=ci", "-p", "no:cacheprovider", "--report=r.json")
    out = result.stdout.str()
    assert "has no attribute 'K'" not in out, out
    assert result.ret == 0, out
    data = json.loads((pytester.path / "r.json").read_text())
    assert sum(s["checks"] for s in data["summaries"] if s["rule"] == "axis_a.first_call") > 0


def test_pins_name_where_this_process_found_its_modules_and_leave_the_standard_library_out():
    pins = child_imports.pins()
    import rmsnorm_conformance

    assert pins["rmsnorm_conformance"]["path"] == list(rmsnorm_conformance.__path__)
    assert pins["pytest"]["origin"] == pytest.__file__
    assert "json" not in pins and "sys" not in pins and "__main__" not in pins


def test_a_new_interpreter_finds_a_pinned_module_before_one_of_the_same_name_first_on_its_path(tmp_path):
    """``BOOTSTRAP`` as ``python -m`` runs a module, where the working directory holds a module of a pinned name."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for folder, says in ((mine, "mine"), (theirs, "theirs")):
        folder.mkdir()
        (folder / "clash.py").write_text(f"WHO = {says!r}\n")
    (theirs / "show.py").write_text("import clash\nprint(clash.WHO)\n")
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({"clash": {"origin": str(mine / "clash.py"), "path": None}}))
    done = subprocess.run(child_imports.bootstrap_command(pins, "show", []), cwd=theirs, capture_output=True,
                          text=True, check=False, env={"PYTHONPATH": str(theirs), "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "mine"
    plain = subprocess.run([sys.executable, "-m", "show"], cwd=theirs, capture_output=True, text=True, check=False)
    assert plain.stdout.strip() == "theirs"  # without the pin, the working directory's module
