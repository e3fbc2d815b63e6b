"""Fresh processes forked from the torch server (harness/running/torch_server.py): each is a new process of its
own, with nothing of the asking process in it, its status and output its own, and a new server wherever a variable
read at start-up changed."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from rmsnorm_conformance.harness.running import torch_server

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the torch server forks on Linux only")

PROBE = '''
import json, os, sys, time


TORCH_BEFORE = "torch" in sys.modules


def main(argv):
    what, out = argv
    if what == "crash":
        print("about to crash", flush=True)
        os.kill(os.getpid(), 11)
    if what == "hang":
        with open(out, "w") as f:
            json.dump({"pid": os.getpid()}, f)
        time.sleep(600)
    if what == "raise":
        raise ValueError("probe raised")
    if what == "exit":
        sys.exit()
    import torch
    print("to stdout"); print("to stderr", file=sys.stderr)
    with open(out, "w") as f:
        json.dump({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
                   "native_imported": "rmsnorm_conformance.backends.native" in sys.modules,
                   "torch_imported_before": TORCH_BEFORE, "cuda_initialized": torch.cuda.is_initialized(),
                   "env": {k: os.environ.get(k) for k in ("PROBE_VALUE", "TORCH_PROBE_VALUE")}}, f)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A module with a main(argv) on this process's sys.path (which the child takes), and a fresh server."""
    (tmp_path / "torch_server_probe.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("RMSNORM_FRESH_INTERPRETER", raising=False)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    torch_server._SERVER_OF_THIS_PROCESS.close()


def _run(base: Path, what: str, timeout_s: float = 120) -> tuple[int | None, str, dict]:
    out = base / f"{what}.json"
    code, output = torch_server.run_main("torch_server_probe", [what, str(out)], base / "log.txt", timeout_s)
    return code, output, json.loads(out.read_text()) if out.is_file() else {}


def test_a_child_is_a_process_of_its_own_with_nothing_of_the_asking_process(probe, monkeypatch):
    import rmsnorm_conformance.backends.native  # noqa: F401  (imported here: a fork of this process would have it)

    monkeypatch.setenv("PROBE_VALUE", "1")
    code, output, seen = _run(probe, "look")
    assert code == 3, output
    assert "to stdout" in output and "to stderr" in output
    assert seen["pid"] != os.getpid() and seen["ppid"] != os.getpid(), "forked from the server, not from here"
    assert seen["native_imported"] is False, "the child must not carry the asking process's imports"
    assert seen["torch_imported_before"] is True and seen["cuda_initialized"] is False
    assert seen["cwd"] == str(probe) and seen["env"]["PROBE_VALUE"] == "1"
    server = seen["ppid"]
    # A variable read by no start-up: the same server, the child sees the new value.
    monkeypatch.setenv("PROBE_VALUE", "2")
    code, _, again = _run(probe, "look")
    assert code == 3 and again["ppid"] == server and again["env"]["PROBE_VALUE"] == "2"
    # A variable torch may read at start-up: a new server started with it.
    monkeypatch.setenv("TORCH_PROBE_VALUE", "x")
    code, _, changed = _run(probe, "look")
    assert code == 3 and changed["ppid"] not in (server, os.getpid())
    assert changed["env"]["TORCH_PROBE_VALUE"] == "x"


def test_a_crash_a_hang_and_an_exception_end_the_child_alone_with_its_status(probe):
    code, output, _ = _run(probe, "crash")
    assert code == -signal.SIGSEGV and "about to crash" in output
    code, _, _ = _run(probe, "hang", timeout_s=2)
    assert code is None, "a child past its time is killed and reported as such"
    assert not _alive(json.loads((probe / "hang.json").read_text())["pid"])
    code, output, _ = _run(probe, "raise")
    assert code == 1 and "ValueError: probe raised" in output
    assert _run(probe, "exit")[0] == 0, "sys.exit() is a success, as in a new interpreter"
    code, output, seen = _run(probe, "look")  # the server outlived all three
    assert code == 3 and seen, output


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped, does not), waiting up to 10 s for it to end."""
    status = Path(f"/proc/{pid}/status")
    for _ in range(100):
        if not status.is_file() or "\tZ" in status.read_text():
            return False
        time.sleep(0.1)
    return True


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads /proc")
def test_an_interrupted_wait_ends_the_child_with_it(probe):
    """A signal's handler that raises while the asking process waits (as the harness's SIGTERM handler does)
    ends the child too, as subprocess.run ends its child."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    assert _run(probe, "look")[0] == 3  # the server started: the alarm below comes while the child runs
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.alarm(3)
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(probe, "hang", timeout_s=600)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not _alive(json.loads((probe / "hang.json").read_text())["pid"])
    code, output, seen = _run(probe, "look")  # and the next process gets a new server
    assert code == 3 and seen, output


def test_a_server_that_died_is_replaced_and_a_new_interpreter_is_asked_for_by_name(probe, monkeypatch):
    code, _, seen = _run(probe, "look")
    assert code == 3
    os.kill(seen["ppid"], signal.SIGKILL)
    torch_server._SERVER_OF_THIS_PROCESS._process.wait(timeout=30)
    code, output, again = _run(probe, "look")
    assert code == 3 and again["ppid"] != seen["ppid"], output
    monkeypatch.setenv("RMSNORM_FRESH_INTERPRETER", "1")
    code, output, alone = _run(probe, "look")
    assert code == 3 and alone["ppid"] == os.getpid(), "a new interpreter, started by this process"
    assert alone["torch_imported_before"] is False and "to stderr" in output
