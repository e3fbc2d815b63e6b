"""The controller's warm-up of backends (harness/running/warm_up.py): one quiet process per backend and non-CPU
device type, whose outcome decides nothing, stopped when the run ends."""

from __future__ import annotations

import subprocess
import sys

import torch

from rmsnorm_conformance.harness.running import warm_up
from rmsnorm_conformance.harness.running.registry import load_backend


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
