"""The path a kernel author takes, end to end: build the harness's wheel, install it and an external kernel
package (examples/gate-your-kernel) into a fresh virtual environment, and gate kernels from a directory of the
user's own, far from this repository. A file missing from the wheel, an import that works only from a clone,
or a side effect on the user's own tests fails here as it would fail for them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import torch

if sys.version_info >= (3, 11):
    import tomllib
else:
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gate-your-kernel"
# Build outputs, environments and caches in a working copy: a wheel built from a copy without them has only what a
# fresh clone would give it. The caches also change under the copy: CI's type check runs beside the tests, and
# mypy's SQLite journal files came and went while this test copied the tree (shutil.Error, a failed CI run).
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".hypothesis", ".ruff_cache", ".mypy_cache", ".whl", "*.whl",
                                     ".ci-typecheck.log", ".ci-nvcc-cache", ".ci-nvcc-warm.log", "report.md",
                                     "report.json", "site")
# The same torch as this run, so pip takes it from its cache or local wheels rather than fetching another build.
TORCH_SPEC = "torch==" + torch.__version__.split("+", 1)[0]
# The harness's words: no line of a user's own test run may carry them.
HARNESS_WORDS = re.compile(r"rmsnorm|conformance", re.IGNORECASE)


KERNEL = '''\
"""A user's kernels: one correct, one whose reduction order depends on the number of rows."""
import torch
import torch.nn.functional as F

from backends import tree_sum  # the user's own package called backends


class Good:
    name = "good"

    def forward(self, x, weight, eps=1e-6):
        x32 = x.float()
        rms = torch.sqrt(tree_sum(x32 * x32) / x.shape[-1] + eps)
        return ((x32 / rms) * weight.float()).to(x.dtype)


class Bad(Good):
    name = "bad"

    def forward(self, x, weight, eps=1e-6):
        x32 = x.float()
        dim = x.shape[-1]
        rows = x32.numel() // max(dim, 1)
        # Split-K for small batches: the fewer the rows, the more pieces each row is summed in.
        split = max(1, 64 // max(rows, 1))
        pieces = F.pad(x32 * x32, (0, -dim % split)).unflatten(-1, (split, -1)).sum(-1)
        total = pieces[..., :1]
        for i in range(1, split):
            total = total + pieces[..., i:i + 1]
        return ((x32 / torch.sqrt(total / dim + eps)) * weight.float()).to(x.dtype)
'''

USER_BACKENDS = '''\
"""The user's own backends package, named like one inside the harness."""
import torch.nn.functional as F


def tree_sum(t):
    width = 1 << (t.shape[-1] - 1).bit_length()
    t = F.pad(t, (0, width - t.shape[-1]))
    while t.shape[-1] > 1:
        half = t.shape[-1] // 2
        t = t[..., :half] + t[..., half:]
    return t
'''

USER_TESTS = '''\
import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

CALLS = []


@given(st.integers())
def test_own_property(n):
    CALLS.append(n)
    assert settings().max_examples == 100
    assert "TRITON_INTERPRET" not in os.environ


def test_every_example_ran():
    assert len(CALLS) == 100
    with open(os.environ["SNAPSHOT"], "w") as f:
        environ = {k: v for k, v in os.environ.items() if k != "SNAPSHOT"}
        json.dump({"settings": repr(settings()), "environ": environ}, f)
'''


class Venv:
    """A fresh virtual environment and the commands run in it, with an environment free of this test run's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bin = path / "bin"
        self.python = str(self.bin / "python")
        dropped = ("TRITON_INTERPRET", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        self.env = {k: v for k, v in os.environ.items()
                    if k not in dropped and not k.startswith(("PYTEST_", "HYPOTHESIS", "RMSNORM"))}
        self.env["PATH"] = os.pathsep.join([str(self.bin), self.env.get("PATH", "")])

    def run(self, args: list[str] | str, cwd: Path, *, timeout: int = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run ``args`` (a shell line when a string) in ``cwd``; stdout and stderr together in ``.stdout``."""
        return subprocess.run(args, cwd=cwd, env={**self.env, **(env or {})}, shell=isinstance(args, str),
                              timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)

    def must(self, args: list[str], cwd: Path, *, timeout: int = 600) -> str:
        done = self.run(args, cwd, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-4000:]}"
        return done.stdout


def _make_venv(path: Path) -> Venv:
    """A venv without system site packages; skipped only where this Python cannot make one, never in CI."""
    made = subprocess.run([sys.executable, "-m", "venv", str(path)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        reason = f"this Python cannot create a virtual environment with pip: {made.stderr.strip()[-500:]}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    config = (path / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in config, config
    return Venv(path)


def _requirements_installed(name: str) -> list[Any]:
    """``name``'s distribution in this run's environment and those of everything it requires here, transitively."""
    from packaging.requirements import Requirement

    found: dict[str, Any] = {}
    todo = [name]
    while todo:
        dist = metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(found.values())


def _place_torch(venv: Venv, base: Path) -> bool:
    """torch as a kernel author's environment already has it: this run's torch and what it requires, hard-linked
    file by file into the venv's site-packages (copied where a link cannot be made), their metadata and bytecode
    with them, so that pip finds torch installed. False (nothing placed) where this run's torch is not a plain
    installed distribution. Installing torch's wheel instead took 8.4 s of the test's 44-51, and the venv's first
    run then compiled the bytecode of every torch module it imported."""
    site = Path(venv.must([venv.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          base).strip())

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except FileNotFoundError:
            pass  # gone since the folder was listed: a bytecode file another process was writing (name.pyc.<id>)
        except OSError:
            shutil.copy2(src, dst)

    try:
        dists = _requirements_installed("torch")
        tops = {(Path(str(d.locate_file(""))), Path(str(f)).parts[0]) for d in dists for f in d.files or ()}
    except (metadata.PackageNotFoundError, ValueError):  # metadata this code cannot read: the wheel instead
        return False
    tops = {(root, top) for root, top in tops if top != ".."}  # the console scripts live outside site-packages
    if not any(top == "torch" for _, top in tops):
        return False
    for root, top in sorted(tops):
        src = root / top
        if src.is_dir():
            # Bytecode being written beside the copy (another worker importing torch) is left out: its temporary
            # files vanish between the listing and the link.
            shutil.copytree(src, site / top, copy_function=link, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("*.pyc.*"))
        elif src.is_file():
            link(str(src), str(site / top))
    return True


def _install(base: Path) -> tuple[Venv, Path]:
    """The harness's wheel and the example kernel package installed, non-editable, into a fresh venv."""
    venv = _make_venv(base / "venv")
    # torch first, as the author has it (_place_torch; else its wheel, not compiled to bytecode ahead): the
    # harness's open torch range would otherwise fetch whatever build pip likes. The wheels below are built
    # without isolation, so that no network is needed: the venv's setuptools builds them.
    placed = _place_torch(venv, base)
    venv.must([venv.python, "-m", "pip", "install", "-q", "--no-compile", *(() if placed else (TORCH_SPEC,)),
               "setuptools>=77"], base)
    source = base / "src" / "rmsnorm-conformance"
    shutil.copytree(ROOT, source, ignore=COPY_IGNORE)
    example = base / "src" / "gate-your-kernel"
    shutil.copytree(EXAMPLE, example, ignore=COPY_IGNORE)
    venv.must([venv.python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
               "-w", str(base / "wheelhouse"), str(source)], base)
    (wheel,) = (base / "wheelhouse").glob("rmsnorm_conformance-*.whl")
    # The example as its author installs it, beside the harness's wheel; numpy as a kernel author's environment
    # has it (without it torch warns on import, in every run).
    venv.must([venv.python, "-m", "pip", "install", "-q", "--no-compile", "--no-build-isolation", str(wheel),
               "numpy", str(example)], base)
    return venv, wheel


def _user_dir(path: Path) -> Path:
    """An empty directory holding a kernel module and packages of the user's own named backends, harness and
    contract; these two and backends.native fail on import, so a harness that reaches for them by a bare
    name breaks here."""
    path.mkdir()
    (path / "kern.py").write_text(KERNEL)
    (path / "backends").mkdir()
    (path / "backends" / "__init__.py").write_text(USER_BACKENDS)
    (path / "backends" / "native.py").write_text('raise ImportError("the user\'s backends.native")\n')
    for name in ("harness", "contract"):
        (path / name).mkdir()
        (path / name / "__init__.py").write_text(f'raise ImportError("the user\'s own {name} package")\n')
    return path


def _gate(venv: Venv, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return venv.run(["pytest", "--pyargs", "rmsnorm_conformance.suites", *args], cwd)


# One test, so that pytest-xdist gives it to one worker and the environment is built once; marked to start first,
# so that the other worker drains the rest of the run meanwhile.
@pytest.mark.early(rank=0)
def test_a_kernel_author_gates_kernels_from_a_directory_of_their_own(tmp_path):
    venv, wheel = _install(tmp_path)
    user = _user_dir(tmp_path / "user")
    check_the_wheel_holds_one_package_with_every_source_file(wheel)
    check_the_rules_text_ships_in_the_wheel(venv, user)
    check_the_example_gates_by_its_entry_point_name_as_its_ci_does(venv, tmp_path)
    check_the_example_gates_inside_the_clone_as_its_readme_says(venv, tmp_path)
    check_the_users_own_hypothesis_tests_run_as_without_the_plugin(venv, tmp_path / "own-tests")


# The user's kernels of every shape, gated from the wheel: a test of its own in the long tier (a venv of its own and a
# gate of ten backends). CI's run holds each shape's adapter to what the kernel computes
# (tests/running/test_adapters_shapes.py); the long tier gates them from the clone and from the wheel.
def test_kernels_of_every_shape_gate_from_the_wheel_and_their_replays_reproduce(tmp_path):
    venv, _ = _install(tmp_path)
    check_kernels_of_every_shape_gate_and_replays_reproduce(venv, _user_dir(tmp_path / "user"))


def check_the_wheel_holds_one_package_with_every_source_file(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"rmsnorm_conformance"}, sorted(top)
    for part in ("backends/cuda_rmsnorm/*.cu", "backends/cuda_rmsnorm/*.cpp", "backends/cuda_rmsnorm/*.h",
                 "py.typed"):
        assert any(Path(n).match("rmsnorm_conformance/" + part) for n in names), f"no {part} in the wheel"
    # Every module of every source folder the package maps, and nothing else (a stale build leaves extras).
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    # (rglob: the harness's stages are sub-packages of a mapped folder.)
    expected = {f"{package.replace('.', '/')}/{py.relative_to(ROOT / folder).as_posix()}"
                for package, folder in package_dir.items() for py in (ROOT / folder).rglob("*.py")}
    assert {n for n in names if n.endswith(".py")} == expected


def check_the_rules_text_ships_in_the_wheel(venv: Venv, user: Path) -> None:
    """The contract, one rule explained and both versions, from the installed wheel in the user's folder."""
    from rmsnorm_conformance import __version__, contract

    done = venv.run("rmsnorm-conformance --version && rmsnorm-conformance contract && "
                    "rmsnorm-conformance explain axis_a.padding && rmsnorm-conformance explain axis_a.pading", user)
    assert done.returncode == 2, done.stdout[-4000:]  # the last: a rule that does not exist
    assert done.stdout.startswith(f"rmsnorm-conformance {__version__} (contract {contract.VERSION})\n")
    assert (ROOT / "CONTRACT.md").read_text() in done.stdout
    assert contract.rule("axis_a.padding").statement in done.stdout
    assert "--backend=rmsnorm_conformance.zoo:BatchStatisticLeak --rule=axis_a.padding" in done.stdout
    assert "no contract rule 'axis_a.pading'; did you mean axis_a.padding" in done.stdout


def check_kernels_of_every_shape_gate_and_replays_reproduce(venv: Venv, user: Path) -> None:
    """The user's correct and defective kernels, as a backend class (importing the user's own package named
    backends), a function, an nn.Module class, a torch.library op and a partial (tests/helpers/shipped_kernels.py, as
    tests/running/test_adapters_shapes.py gates them), in one gate run with a step summary as GitHub Actions asks: each
    correct one passes, each defective one fails its rule, and the replays it prints reproduce the breach."""
    from tests.helpers.shipped_kernels import BAD, GOOD, KERNELS
    from tests.helpers.shipped_kernels import QUICK_WITH_THRESHOLDS as SHAPES_QUICK

    (user / "kern.py").write_text(KERNEL + "\n" + KERNELS)
    summary = user / "summary.md"
    done = venv.run(["pytest", "--pyargs", "rmsnorm_conformance.suites", f"--backend=kern:Good,kern:Bad,{GOOD},{BAD}",
                     *SHAPES_QUICK, "--report=shapes.json"], user, env={"GITHUB_STEP_SUMMARY": str(summary)},
                    timeout=600)
    assert done.returncode == 1, done.stdout[-4000:]
    assert "RMSNorm conformance: FAIL" in done.stdout
    assert "contract rule axis_a.batch_size (batch size) broken by backend 'bad'" in done.stdout
    report = json.loads((user / "shapes.json").read_text())
    failed = {(o["backend"], o["rule"]) for o in report["outcomes"].values() if o["outcome"] == "failed"}
    assert failed == {(name, "axis_a.batch_size")
                      for name in ("bad", "rms_norm_bad", "RMSNormBad", "userlib.rms_norm_bad", "partial_bad")}, failed
    assert {r["backend"] for r in report["pick"]["rows"] if r["verdict"] == "PASS"} == \
        {"good", "rms_norm", "RMSNorm", "userlib.rms_norm", "partial_norm"}
    assert summary.read_text().startswith("### RMSNorm conformance: FAIL")
    replays = [line.split("replay: ", 1)[1] for line in done.stdout.splitlines() if line.startswith("  replay: pytest")]
    for backend in ("--backend=kern:Bad ", "--backend=kern:RMSNormBad "):
        replay = next(r for r in replays if backend in r)
        assert "suites/" not in replay.split("--replay", 1)[0], "a replay must not name paths of a clone"
        again = venv.run(replay, user)
        assert again.returncode == 1, again.stdout[-4000:]
        assert "contract rule axis_a.batch_size (batch size) broken by backend" in again.stdout
        assert "1 failed" in again.stdout


def check_the_example_gates_by_its_entry_point_name_as_its_ci_does(venv: Venv, base: Path) -> None:
    # The example's CI steps (ci/gate.sh, which ci.yml runs), from a copy of the example: install builds the
    # harness's wheel from its source and installs it with the kernel (offline here, torch kept), gate gates.
    # What is checked here is the steps' plumbing (the wheel built from a clone, the entry point found, the reports
    # and summary written, a rule the kernel cannot run reported as not run), so the gate runs three rules: one of
    # Axis-A, one of Axis-B and one of the gradients (the gate step took 4.4 s so, 24.3 s under the whole ci sweep).
    example = base / "example-ci"
    shutil.copytree(EXAMPLE, example, ignore=COPY_IGNORE)
    summary = base / "step-summary.md"
    env = {"HARNESS": str(base / "src" / "rmsnorm-conformance"), "TORCH_INSTALL": "",
           "PIP_FLAGS": "-q --no-index --no-build-isolation",
           "GATE_ARGS": "--sweep=ci --dtype=bfloat16 --max-examples=3 "
                        "--rule=axis_a.batch_size,axis_b.output,gradients.dx_tolerance",
           "GITHUB_STEP_SUMMARY": str(summary)}
    for step in ("install", "gate"):
        done = venv.run(["bash", "ci/gate.sh", step], example, env=env, timeout=600)
        assert done.returncode == 0, f"{step}: {done.stdout[-4000:]}"
    assert "RMSNorm conformance: PASS" in done.stdout
    assert "my_rmsnorm has no backward" in done.stdout  # its gradient rules are reported as not run
    report = json.loads((example / "conformance.json").read_text())
    assert report["verdict"] == "PASS" and report["totals"]["checks"] > 0
    assert {s["rule"] for s in report["summaries"] if s["checks"]} == {"axis_a.batch_size", "axis_b.output"}
    assert report["environment"]["backends"] == "my_rmsnorm"
    assert (example / "conformance.md").read_text().startswith("# RMSNorm conformance report: PASS")
    assert (example / "conformance.xml").is_file()
    assert summary.read_text().startswith("### RMSNorm conformance: PASS")


def check_the_example_gates_inside_the_clone_as_its_readme_says(venv: Venv, base: Path) -> None:
    """The example's README, followed inside a clone of the harness: ``HARNESS=../.. bash ci/gate.sh install``, then
    ``gate``. pytest then takes the clone's pyproject.toml and conftest.py, and put the clone's root first on the test
    process's path; the first-call process had imported the clone's partial ``rmsnorm_conformance/`` folder instead
    of the installed wheel and failed ``axis_a.first_call`` with ModuleNotFoundError (harness/running/child_imports.py).
    """
    example = base / "src" / "rmsnorm-conformance" / "examples" / "gate-your-kernel"
    env = {"HARNESS": "../..", "TORCH_INSTALL": "", "PIP_FLAGS": "-q --no-index --no-build-isolation",
           "GATE_WORKERS": "0",
           "GATE_ARGS": "--sweep=ci --dtype=float32 --max-examples=3 --rule=axis_a.first_call,axis_b.output"}
    for step in ("install", "gate"):
        done = venv.run(["bash", "ci/gate.sh", step], example, env=env, timeout=600)
        assert done.returncode == 0, f"{step} inside the clone: {done.stdout[-4000:]}"
    assert "ModuleNotFoundError" not in done.stdout
    report = json.loads((example / "conformance.json").read_text())
    assert report["verdict"] == "PASS"
    assert sum(s["checks"] for s in report["summaries"] if s["rule"] == "axis_a.first_call") > 0


def check_the_users_own_hypothesis_tests_run_as_without_the_plugin(venv: Venv, own: Path) -> None:
    own.mkdir()
    (own / "test_mine.py").write_text(USER_TESTS)
    outputs, snapshots = [], []
    for name, extra in (("with", []), ("without", ["-p", "no:rmsnorm_conformance"])):
        done = venv.run(["pytest", "-p", "no:cacheprovider", "test_mine.py", *extra], own,
                        env={"SNAPSHOT": str(own / f"{name}.json")})
        assert done.returncode == 0, done.stdout[-4000:]
        outputs.append(done.stdout)
        snapshots.append(json.loads((own / f"{name}.json").read_text()))
    # The same Hypothesis settings and the same environment variables, with and without the plugin.
    assert snapshots[0] == snapshots[1]
    with_plugin, without = ([line for line in out.splitlines() if not line.startswith("plugins:")] for out in outputs)
    assert [line for line in with_plugin if HARNESS_WORDS.search(line)] == []
    # The same lines but for the run's duration.
    assert [re.sub(r" in [\d.]+s ", " ", line) for line in with_plugin] == \
        [re.sub(r" in [\d.]+s ", " ", line) for line in without]
