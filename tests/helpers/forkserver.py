"""Pytest runs in processes forked from an interpreter that has already imported torch: the harness's own tests
start about a hundred pytest subprocesses, and each spent about 1.5 of its 2.5 CPU-seconds importing torch, numpy
and pytest (measured on the 2-core CI machine).

``pytester.runpytest_subprocess`` stays what the tests call. The ``pytester`` fixture's ``popen`` is replaced
(tests/conftest.py) so that a ``python -mpytest ...`` command is forked from a server process that imported those
modules (and torch.compile's frontend, which a run that compiles would import: about 1.3 CPU-s) and nothing of this
project, and froze them out of the garbage collector's reach (``gc.freeze``: pytest's and Hypothesis's
``gc.collect()`` calls in a child walked them, about 0.4 CPU-s a run), then made into the process the command would
have started: its working directory, environment, ``sys.path`` (the working directory and PYTHONPATH first, as
``-m`` puts them), stdin, stdout and stderr, arguments and a reseeded ``random``. The child is still a process of
its own: a crash, a hang, ``os._exit`` or a signal ends it alone, and its exit status is reported as ``subprocess``
reports it. It ends as ``sys.exit`` would (other threads joined, the exit handlers run, the streams flushed, the
status), less the interpreter's teardown of torch and the rest: about 0.5 s a process (``tests/plugin/test_plugin.py``
37.8-38.7 -> 31.0-31.1 s).

A run with xdist workers (``-n N``) gets them forked too: before the run starts, while it has one thread, the child
forks a zygote, and execnet's popen gateways (xdist's workers) become forks of it, made into what ``python -u -c
<execnet's bootstrap line>`` would start (pipes for stdin and stdout, unbuffered output, the run's directory and
environment, a fresh ``__main__``) instead of fresh interpreters that import torch again: about twenty workers a CI
run, 27-32 CPU-s and 11-15 s less for the seven test files that start them. A worker's
exit status, a signal's included, reaches xdist as a Popen's would; xdist drives the workers as its own. Every
process forked is reaped by the one that forked it (the zygote by the run, at its end), so that a run's CPU time
includes theirs. The zoo's detection runs (tests/detection/test_detection.py) are forked from the same server.

Nothing the server's imports read at start-up may differ: a command whose environment differs from this process's
in a variable that Python, torch or its thread pools read at start-up starts a fresh interpreter, and a server
started before this process changed such a variable is replaced by one started with the new value. So does any
command that is not ``python -mpytest``, and any test marked ``fresh_interpreter`` (one that checks what a fresh
interpreter imports).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rmsnorm_conformance.harness.running.torch_server import start_server

# Variables read when the server imports torch, numpy or pytest, or when Python starts: a command
# whose value differs from the server's gets a fresh interpreter. PYTHONPATH and PYTHONDONTWRITEBYTECODE are
# applied in the child.
_READ_AT_START = ("PYTHON", "TORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "CUDA", "LD_", "MALLOC",
                  "NUMPY", "OPENBLAS")
_APPLIED_IN_CHILD = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")

_SERVER = r"""
import atexit, builtins, io, json, os, random, select, signal, socket, sys, threading, time, types
# What every run of the suites imports first; nothing of a distribution that installs a pytest plugin (Hypothesis,
# pytest-xdist): pytest warns, an error under -W error, that such modules imported before it cannot be rewritten.
import numpy, torch, pytest
# torch.compile's frontend, which the execution-mode sample imports (about 1.3 CPU-s a run that compiles).
import torch._dynamo
# Everything imported so far lives as long as the server: out of the collector's reach, so that a child's
# gc.collect() (pytest calls it twice at unconfigure, Hypothesis once) neither walks nor copy-on-writes it.
import gc; gc.freeze()
try:  # xdist's transport; without it no run starts workers
    import execnet.gateway_io
except ImportError:
    execnet = None
base = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]


def reap(pid, seconds):
    # Wait for child `pid` (-1: every child) for at most `seconds`: a reaped process's CPU time counts in its
    # parent's, so that a run's CPU time (time, getrusage) includes the processes it forked.
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done and pid != -1:
            return
        if not done:
            time.sleep(0.01)


zygotes = []


def end(code):
    # What sys.exit would do, less the interpreter's teardown of torch and the rest (about 0.5 s a process):
    # other threads joined and the exit handlers run, as Python does before it, then the status; a zygote is told
    # the run ended and reaped.
    threading._shutdown(); atexit._run_exitfuncs()
    sys.stdout.flush(); sys.stderr.flush()
    for pid, control in zygotes:
        control.close()
        reap(pid, 10)
    os._exit(code)


def become_xdist_worker(request, fds):
    # What `python -u [-B] -c <execnet's bootstrap line>` would be: stdin and stdout the pipes the controller
    # passed, stdout and stderr unbuffered, its environment and directory, '' first on sys.path, a fresh __main__.
    os.dup2(fds[0], 0); os.dup2(fds[1], 1)
    for fd in fds:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear(); os.environ.update(request["env"])
    sys.path[:] = ["", *filter(None, request["env"].get("PYTHONPATH", "").split(os.pathsep)), *base]
    sys.dont_write_bytecode = "-B" in request["args"] or bool(request["env"].get("PYTHONDONTWRITEBYTECODE"))
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r")))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w"), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(os.dup(2), "w"), write_through=True, errors="backslashreplace")
    sys.argv = ["-c"]
    main = types.ModuleType("__main__"); main.__builtins__ = builtins; sys.modules["__main__"] = main
    random.seed(); numpy.random.seed()
    code = 0
    try:
        exec(compile(request["args"][-1], "<string>", "exec"), main.__dict__)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback; traceback.print_exc(); code = 1
    end(code)


def zygote(control):
    # Forks the nested run's xdist workers from this process, a fork of the server made before the run started any
    # thread: one request a worker (the pipes' ends and a socket for its status), one status a worker when it ends.
    statuses = {}
    while True:
        if select.select([control], [], [], 0.05)[0]:
            message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
            if not message:  # the run ended: its workers have, or will when their stdin closes
                reap(-1, 5)
                os._exit(0)
            pid = os.fork()
            if pid == 0:
                control.close()
                for other in statuses.values():
                    other.close()
                os.close(fds[2])
                become_xdist_worker(json.loads(message), fds[:2])
            os.close(fds[0]); os.close(fds[1])
            status = socket.socket(fileno=fds[2])
            status.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            statuses[pid] = status
        while statuses:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid in statuses:
                with statuses.pop(pid) as sock:
                    try:
                        sock.sendall(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
                    except OSError:
                        pass


class ZygotePopen:
    # What execnet's Popen2IOMaster uses of a Popen (stdin, stdout, wait, kill), for a worker the zygote forked.
    lock = threading.Lock()

    def __init__(self, control, args):
        worker_in, self_in = os.pipe()
        self_out, worker_out = os.pipe()
        mine, theirs = socket.socketpair()
        request = {"args": list(args), "cwd": os.getcwd(), "env": dict(os.environ)}
        with self.lock:
            socket.send_fds(control, [json.dumps(request).encode()], [worker_in, worker_out, theirs.fileno()])
        for fd in (worker_in, worker_out):
            os.close(fd)
        theirs.close()
        self.stdin, self.stdout = os.fdopen(self_in, "wb"), os.fdopen(self_out, "rb")
        self._status = mine.makefile("rb")
        mine.close()
        self.pid = json.loads(self._status.readline())["pid"]
        self.returncode = None

    def wait(self, timeout=None):
        if self.returncode is None:
            line = self._status.readline()
            self.returncode = json.loads(line)["status"] if line else -signal.SIGKILL
        return self.returncode

    def poll(self):
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            return self.wait()
        return self.returncode

    def kill(self):
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def fork_xdist_workers():
    # A zygote forked now, while this process has one thread; execnet's popen gateways (xdist's workers) then
    # become forks of it instead of fresh interpreters that import torch again (about 3 CPU-s a worker).
    control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        control.close()
        zygote(theirs)
    theirs.close()
    zygotes.append((pid, control))
    master = execnet.gateway_io.Popen2IOMaster
    plain = master.__init__
    bootstrap = execnet.gateway_io.popen_bootstrapline

    def init(self, args, execmodel):
        if list(args[:1]) == [sys.executable] and args[-2:] == ["-c", bootstrap]:
            self.popen = p = ZygotePopen(control, args)
            execnet.gateway_io.Popen2IO.__init__(self, p.stdin, p.stdout, execmodel=execmodel)
        else:
            plain(self, args, execmodel)
    master.__init__ = init

requests, replies = sys.stdin.buffer, os.fdopen(int(sys.argv[1]), "w", buffering=1)
for line in requests:
    request = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        requests.close(); replies.close()
        os.chdir(request["cwd"])
        os.environ.clear(); os.environ.update(request["env"])
        sys.path[:] = [request["cwd"], *filter(None, request["env"].get("PYTHONPATH", "").split(os.pathsep)), *base]
        sys.dont_write_bytecode = bool(request["env"].get("PYTHONDONTWRITEBYTECODE"))
        for fd, path, mode in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                               (2, request["stderr"], os.O_WRONLY)):
            target = os.open(path, mode)
            os.dup2(target, fd); os.close(target)
        random.seed(); numpy.random.seed()
        if request["xdist"] and execnet is not None:
            fork_xdist_workers()
        sys.argv = [pytest.__file__, *request["args"]]
        try:
            code = pytest.main(request["args"])
        finally:
            sys.stdout.flush(); sys.stderr.flush()
        end(int(code))
    replies.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
"""


_CONSTANTS: str | None = None


def share_hypothesis_constants(cwd: str) -> None:
    """Hypothesis parses every local module for constants once per process and caches them in
    ``.hypothesis/constants`` under the working directory, which is new in every pytester run (0.3-0.4 CPU-s a
    run). One cache for all of them: Hypothesis writes it atomically, keyed by each file's hash."""
    global _CONSTANTS
    if _CONSTANTS is None:
        _CONSTANTS = tempfile.mkdtemp(prefix="rmsnorm-tests-hypothesis-constants-")
        atexit.register(shutil.rmtree, _CONSTANTS, ignore_errors=True)
    link = Path(cwd, ".hypothesis", "constants")
    if not link.exists():
        link.parent.mkdir(exist_ok=True)
        link.symlink_to(_CONSTANTS, target_is_directory=True)


def _read_at_start(env: Any) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_READ_AT_START) and k not in _APPLIED_IN_CHILD}


def _uses_xdist(args: tuple[str, ...]) -> bool:
    """Whether a pytest command line starts xdist workers (-n N or --numprocesses N, N not 0)."""
    for i, arg in enumerate(args):
        if arg in ("-n", "--numprocesses") and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--numprocesses="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-n") and len(arg) > 2 and not arg.startswith("--"):
            value = arg[2:]
        else:
            continue
        return value.strip() not in ("0", "")
    return False


class ForkServer:
    """One server per test process, started on first use; one command at a time."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._env: dict[str, str] = {}

    @staticmethod
    def forkable(cmdargs: tuple[str, ...], env: dict[str, str]) -> bool:
        """A ``python -mpytest`` command whose environment reads, at start-up, as this process's does (the
        server is started, or started again, with this process's environment)."""
        return tuple(cmdargs[:2]) == (sys.executable, "-mpytest") and _read_at_start(env) == _read_at_start(os.environ)

    def start(self, cmdargs: tuple[str, ...], env: dict[str, str], stdout: Any, stderr: Any,
              cwd: str | None = None) -> ForkedProcess:
        """Fork ``cmdargs`` (a forkable command) in ``cwd`` (default this process's), its output to the files of
        ``stdout`` and ``stderr``."""
        if self._process is not None and _read_at_start(self._env) != _read_at_start(os.environ):
            self.close()  # a test changed what the server's imports read: a new server, with the new values
        if self._process is None or self._process.poll() is not None:
            self._env = dict(os.environ)
            self._process, self._replies = start_server(_SERVER)
        request = {"args": list(cmdargs[2:]), "cwd": cwd or os.getcwd(), "env": env, "stdout": stdout.name,
                   "stderr": stderr.name, "xdist": _uses_xdist(cmdargs[2:])}
        assert self._process.stdin is not None
        self._process.stdin.write((json.dumps(request) + "\n").encode())
        self._process.stdin.flush()
        return ForkedProcess(self._replies)

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        if self._process is not None:
            with contextlib.suppress(OSError):
                os.close(self._replies)


_SHARED: ForkServer | None = None


def shared() -> ForkServer:
    """This test process's server, started on first use (pytester's runs and the zoo's share it)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = ForkServer()
    return _SHARED


def close_shared() -> None:
    if _SHARED is not None:
        _SHARED.close()


class ForkedProcess:
    """What ``pytester.run`` needs of a Popen: wait (with a timeout), kill, poll, returncode."""

    stdin = None

    def __init__(self, replies: int) -> None:
        self._replies = replies  # a pipe read unbuffered, a byte at a time: select() then sees every byte not read
        self.pid: int = self._reply()["pid"]
        self.returncode: int | None = None

    def _reply(self) -> dict:
        line = b""
        while not line.endswith(b"\n"):
            byte = os.read(self._replies, 1)
            if not byte:
                raise RuntimeError("the fork server ended")
            line += byte
        return json.loads(line)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if timeout is not None and not select.select([self._replies], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"forked pytest {self.pid}", timeout)
            self.returncode = self._reply()["status"]
        return self.returncode

    def poll(self) -> int | None:
        return self.wait(0) if self.returncode is None and select.select([self._replies], [], [], 0)[0] \
            else self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
                os.kill(self.pid, signal.SIGKILL)
