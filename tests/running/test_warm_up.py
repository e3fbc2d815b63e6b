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
    assert warm_up.worth_warming("triton")  # compiles its kernels in its prepare
    assert not warm_up.worth_warming("native")
    assert not warm_up.worth_warming("liger")  # a shipped adapter: it only imports
    assert warm_up.worth_warming("my_pkg.kernels:MyNorm")  # a user's backend may build in its probe
    assert warm_up.start([load_backend("native"), load_backend("liger")], [torch.device("meta")]) == []


def test_a_preparation_in_parts_gets_the_cores_the_workers_leave():
    assert warm_up.parts_for(8, cores=16) == 7  # the H200 machine: 16 cores, 8 workers, the controller
    assert warm_up.parts_for(2, cores=2) == 1  # none spare: still one
    assert warm_up.parts_for(1, cores=64) == warm_up.MAX_PARTS
    assert warm_up.parts_for("auto", cores=16) == 1  # as many workers as cores
    assert warm_up.parts_for(None, cores=16) == 1


def test_a_backend_that_prepares_in_parts_gets_one_process_a_part(monkeypatch):
    monkeypatch.setattr(warm_up, "parts_for", lambda workers: 2 if workers == 8 else 1)
    processes = warm_up.start([load_backend("triton")], [torch.device("meta")], workers=8)
    assert sorted(p.args[-3:] for p in processes) == [["triton", "meta", "0/2"], ["triton", "meta", "1/2"]]
    assert [p.wait(timeout=120) for p in processes] == [1, 1]  # it does not run on meta: said in the status
    # a backend that prepares in one process (the CUDA backend builds in its probe) gets one, told it is part 0 of 1
    single = warm_up._spawn(["cuda"], ["meta"], workers=8)
    for process in single:
        process.kill()
        process.wait()
    assert [p.args[-3:] for p in single] == [["cuda", "meta", "0/1"]]


def test_the_prepared_dims_put_the_most_drawn_first_and_hold_every_edge():
    from rmsnorm_conformance.contract.rmsnorm import TARGET_DIMS, THRESHOLD_DIMS
    from rmsnorm_conformance.harness.drawing.strategies import EDGE_DIMS

    dims = warm_up.prepared_dims()
    assert dims[: len(THRESHOLD_DIMS)] == list(THRESHOLD_DIMS)
    assert set(TARGET_DIMS.values()) <= set(dims[:6]) and set(EDGE_DIMS) <= set(dims)
    assert len(dims) == len(set(dims))
    # the first-call plan's dims first, in its order: the Triton backend prepares its first calls there ahead of all
    from rmsnorm_conformance.backends.triton_rmsnorm import LEAD_DIMS
    from rmsnorm_conformance.harness.running.fresh_process import FIRST_CALL_DIMS

    assert dims[:LEAD_DIMS] == list(FIRST_CALL_DIMS)


def test_the_warm_up_hands_the_backend_its_part_of_the_preparation(monkeypatch, tmp_path):
    """main() probes the backend, then calls its prepare with the prepared dims and its share; a backend whose probe
    says no is not asked to prepare."""
    (tmp_path / "prepared_norm.py").write_text("""
import torch

calls = []

class Norm:
    name = "prepared"
    devices = None

    def forward(self, x, weight, eps=1e-6):
        return x

    def prepare(self, device, dims, part, parts):
        calls.append((device, dims, part, parts))

class Unavailable(Norm):
    def unavailable_reason(self, device):
        return "not here"
""")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(warm_up, "interruptible", lambda: None)
    import prepared_norm

    assert warm_up.main(["prepared_norm:Norm", "cpu", "1/3"]) == 0
    assert warm_up.main(["prepared_norm:Norm", "cpu"]) == 0
    assert warm_up.main(["prepared_norm:Unavailable", "cpu", "0/2"]) == 1
    assert prepared_norm.calls == [(torch.device("cpu"), warm_up.prepared_dims(), 1, 3),
                                   (torch.device("cpu"), warm_up.prepared_dims(), 0, 1)]


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
    assert processes[0].args[-3:] == ["cuda", "meta", "0/1"]
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
    assert [p.args[-3:] for p in processes] == [["cuda", "meta", "0/1"]]
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

def spy(specs, devices, workers):
    seen.append(("torch" in sys.modules, specs, devices, workers))
    return []

warm_up._spawn = spy

def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        print("SPAWNED", seen)
""")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider", "-s", "--backend=native",
                                           "--device=cuda:0", "--co")
    assert "SPAWNED [(False, ['native'], ['cuda:0'], 1)" in result.stdout.str(), result.stdout.str()


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
