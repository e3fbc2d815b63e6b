"""The harness's own tests: `pytester` drives the plugin end to end in subprocesses."""

import os
import subprocess
from pathlib import Path

import pytest
import torch

from rmsnorm_conformance.harness.running.devices import worker_cpu_threads

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[1]

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
    config.addinivalue_line("markers", "fresh_interpreter: pytester's subprocesses start a fresh interpreter, "
                            "not a fork of one that imported torch (tests/helpers/forkserver.py)")
    config.addinivalue_line("markers", "long: in the long tier (tests/long_tier.py), left out of CI's run with "
                            "-m 'not long' and run in full with -m long")


def pytest_collection_modifyitems(config, items):
    from tests.long_tier import is_long

    for item in items:
        if is_long(item.nodeid):
            item.add_marker(pytest.mark.long)
    # The long tests (the wheel install, the runs of the zoo, the compile check) begun first run while the other
    # worker drains the short ones, instead of holding up the end of the run; the longest start first.
    def rank(item):
        marker = item.get_closest_marker("early")
        return float("inf") if marker is None else marker.kwargs.get("rank", 1)

    items.sort(key=rank)


@pytest.fixture
def run(pytester, monkeypatch):
    """``run(*args)``: pytest in a subprocess from pytester's scratch folder, the project importable, no cache; a
    module that needs more (its own options, its own plugin) defines its own."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return lambda *args: pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


@pytest.fixture(autouse=True)
def _pytest_runs_forked(request):
    """Pytest subprocesses of ``pytester`` forked from a server that imported torch (tests/helpers/forkserver.py),
    except in tests marked ``fresh_interpreter`` and where RMSNORM_TESTS_FORK=0."""
    if ("pytester" not in request.fixturenames or request.node.get_closest_marker("fresh_interpreter")
            or os.environ.get("RMSNORM_TESTS_FORK") == "0"):
        yield
        return
    from tests.helpers.forkserver import share_hypothesis_constants, shared

    pytester = request.getfixturevalue("pytester")
    original = pytester.popen
    server = shared()

    def popen(cmdargs, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=pytester.CLOSE_STDIN, **kw):
        cmdargs = tuple(os.fspath(a) for a in cmdargs)
        env = os.environ.copy()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))
        share_hypothesis_constants(os.getcwd())
        if (stdin is pytester.CLOSE_STDIN and not kw and hasattr(stdout, "name") and hasattr(stderr, "name")
                and server.forkable(cmdargs, env)):
            return server.start(cmdargs, env, stdout, stderr)
        return original(cmdargs, stdout=stdout, stderr=stderr, stdin=stdin, **kw)

    pytester.popen = popen
    yield


def pytest_sessionfinish(session):
    from tests.helpers.forkserver import close_shared

    close_shared()
