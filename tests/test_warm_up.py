"""The controller's warm-up of backends (harness/running/warm_up.py): one quiet process per backend and non-CPU
device type, whose outcome decides nothing, stopped when the run ends."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from rmsnorm_conformance.harness.running import warm_up
from rmsnorm_conformance.harness.running.registry import load_backend


def test_only_backends_whose_probe_may_build_are_warmed_up():
    assert warm_up.worth_warming("cuda")  # builds its operator library in its probe
    assert not warm_up.worth_warming("native") and not warm_up.worth_warming("triton")
    assert not warm_up.worth_warming("liger")  # a shipped adapter: it only imports
    assert warm_up.worth_warming("my_pkg.kernels:MyNorm")  # a user's backend may build in its probe
    assert warm_up.start([load_backend("native"), load_backend("triton")], [torch.device("meta")]) == []


def test_cpu_devices_get_no_warm_up_process():
    assert warm_up.start([load_backend("native")], [torch.device("cpu")]) == []


def test_the_switch_turns_warm_ups_off(monkeypatch):
    monkeypatch.setenv(warm_up.SWITCH, "0")
    assert warm_up.start([load_backend("cuda")], [torch.device("meta")]) == []


def test_one_process_per_backend_and_device_type_asks_the_backend_and_reports_in_its_exit_status():
    cuda = load_backend("cuda")
    # Two devices of one type share one warm-up; "meta" stands in for an accelerator the backend does not run on.
    processes = warm_up.start([cuda], [torch.device("cpu"), torch.device("meta"), torch.device("meta")])
    assert len(processes) == 1
    assert processes[0].args[-2:] == ["cuda", "meta"]
    assert processes[0].wait(timeout=120) == 1  # cuda cannot run on meta: said in the status, nothing printed
    assert warm_up.main(["native", "cpu"]) == 0


def test_stop_ends_a_warm_up_still_running():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    warm_up.stop([sleeper])
    assert sleeper.poll() is not None


def test_early_targets_come_from_the_options_as_typed_where_a_gpu_driver_is_present(tmp_path):
    node = tmp_path / "nvidiactl"
    node.touch()
    nodes = [str(node)]
    assert warm_up.early_targets(None, None, ["native", "cuda"], nodes) == (["native", "cuda"], ["cuda"])
    assert warm_up.early_targets("cuda,triton", "all", [], nodes) == (["cuda", "triton"], ["cuda"])
    assert warm_up.early_targets("cuda", "cpu,cuda:1,cuda:0", [], nodes) == (["cuda"], ["cuda:1"])
    assert warm_up.early_targets("cuda", "cpu", [], nodes) == ([], [])  # the CPU only: nothing builds for it
    # No GPU driver's device node: a CPU-only machine (or a GPU named on one) gets no warm-up process.
    assert warm_up.early_targets("cuda", "cuda", [], [str(tmp_path / "absent")]) == ([], [])


def test_the_early_start_spawns_the_same_quiet_probe(monkeypatch, tmp_path):
    node = tmp_path / "kfd"
    node.touch()
    monkeypatch.setattr(warm_up, "GPU_NODES", (str(node),))
    processes = warm_up.start_early("native,cuda", "meta", [])
    assert [p.args[-2:] for p in processes] == [["cuda", "meta"]]
    assert processes[0].wait(timeout=120) == 1
    monkeypatch.setenv(warm_up.SWITCH, "0")
    assert warm_up.start_early("cuda", "meta", []) == []


@pytest.mark.fresh_interpreter  # a process forked from one that imported torch would not show when it imports it
def test_the_controller_starts_the_warm_up_before_it_imports_torch(pytester, monkeypatch, tmp_path):
    """Under -n, the plugin's configure starts the probe from the options as typed, and torch is not yet imported
    then: the build overlaps the controller's own start."""
    node = tmp_path / "nvidiactl"
    node.touch()
    pytester.makeconftest(f"""
import sys
from rmsnorm_conformance.harness.running import warm_up

warm_up.GPU_NODES = ({str(node)!r},)
seen = []
real = warm_up._spawn

def spy(specs, devices):
    seen.append(("torch" in sys.modules, specs, devices))
    return []

warm_up._spawn = spy

def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        print("SPAWNED", seen)
""")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider", "-s", "--backend=native",
                                           "--device=cuda:0", "--co")
    assert "SPAWNED [(False, ['native'], ['cuda:0'])" in result.stdout.str(), result.stdout.str()


def test_stop_lets_a_build_remove_its_lock_file(tmp_path):
    """A probe stopped mid-build leaves no lock behind: torch's build lock is removed in a ``finally``, which a kill
    would skip, and every later run would wait on the file forever. The child ignores SIGINT, as a background
    job's children do, until it installs the probe's handlers."""
    lock = tmp_path / "lock"
    child = f"""
import os, signal, time
from rmsnorm_conformance.harness.running import warm_up
signal.signal(signal.SIGINT, signal.SIG_IGN)
warm_up.interruptible()
open({str(lock)!r}, "w").close()
try:
    time.sleep(600)
finally:
    os.remove({str(lock)!r})
"""
    process = subprocess.Popen([sys.executable, "-c", child])
    deadline = time.monotonic() + 60
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock.exists()
    warm_up.stop([process])
    assert process.poll() is not None
    assert not lock.exists()


def test_the_probe_turns_a_termination_into_an_interrupt():
    """main() installs handlers that turn SIGTERM and SIGINT into KeyboardInterrupt (so finally blocks run)."""
    import signal

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        assert warm_up.main(["native", "cpu"]) == 0
        assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
