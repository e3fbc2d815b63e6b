"""The harness's own tests: `pytester` drives the plugin end to end in subprocesses."""

import os

import torch

from rmsnorm_conformance.harness.running.devices import worker_cpu_threads

pytest_plugins = ("pytester",)

# The harness's own tests import the Triton backend directly; on a machine with no GPU its kernels must be
# defined under the interpreter. (The plugin sets this only when a run selects the Triton backend.)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist each worker, and every pytest it starts in a subprocess, takes its share of the cores
# (the plugin does the same for conformance runs): threads a core per process oversubscribe the machine.
_threads = worker_cpu_threads()
if _threads is not None:
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    torch.set_num_threads(_threads)


def pytest_configure(config):
    config.addinivalue_line("markers", "early(rank=1): a long test that pytest-xdist should start first; a lower "
                            "rank starts sooner")


def pytest_collection_modifyitems(config, items):
    # The long tests (the wheel install, the runs of the zoo, the compile check) begun first run while the other
    # worker drains the short ones, instead of holding up the end of the run; the longest start first.
    def rank(item):
        marker = item.get_closest_marker("early")
        return float("inf") if marker is None else marker.kwargs.get("rank", 1)

    items.sort(key=rank)
