"""Device selection: parsing `--device`, and each pytest-xdist worker taking its own GPU (simulated)."""

from __future__ import annotations

import pytest
import torch

from rmsnorm_conformance.harness.running.devices import (
    device_unavailable_reason,
    parse_device_option,
    worker_device,
    worker_index,
)


def test_parse_device_option():
    assert parse_device_option("cpu") == [torch.device("cpu")]
    assert parse_device_option("cpu,cuda:1,cpu") == [torch.device("cpu"), torch.device("cuda", 1)]
    assert parse_device_option("cuda") == [torch.device("cuda")]
    assert parse_device_option(None)[0] == torch.device("cpu")
    with pytest.raises(ValueError, match="'tpu9' is not a device"):
        parse_device_option("cpu,tpu9")


@pytest.mark.parametrize(("worker", "count", "expected"), [
    ("gw0", 8, 0), ("gw5", 8, 5), ("gw9", 8, 1), ("gw3", 2, 1), ("", 4, 0), ("master", 2, 0),
])
def test_each_worker_takes_its_own_gpu(worker, count, expected):
    assert worker_device(torch.device("cuda"), worker=worker, count=count) == torch.device("cuda", expected)


def test_explicit_devices_are_left_alone():
    assert worker_device(torch.device("cuda", 3), worker="gw1", count=8) == torch.device("cuda", 3)
    assert worker_device(torch.device("cpu"), worker="gw1", count=8) == torch.device("cpu")


def test_every_worker_of_a_run_covers_every_gpu():
    gpus = {worker_device(torch.device("cuda"), worker=f"gw{i}", count=4).index for i in range(8)}
    assert gpus == {0, 1, 2, 3}


def test_worker_index_reads_the_xdist_variable(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    assert worker_index() == 7


def test_unavailable_devices_say_why():
    assert device_unavailable_reason(torch.device("cpu")) is None
    if not torch.cuda.is_available():
        assert "no CUDA device" in device_unavailable_reason(torch.device("cuda", 0))
    assert "not supported" in device_unavailable_reason(torch.device("meta"))


def test_xdist_workers_share_the_cores_unless_the_user_chose():
    from rmsnorm_conformance.harness.running.devices import worker_cpu_threads

    assert worker_cpu_threads({}, cores=8) is None  # not under xdist: torch's own default
    assert worker_cpu_threads({"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2"}, cores=8) == 4
    assert worker_cpu_threads({"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "4"}, cores=2) == 1
    assert worker_cpu_threads({"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2",
                               "OMP_NUM_THREADS": "3"}, cores=8) is None
