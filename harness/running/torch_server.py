"""Fresh processes forked from a server that has imported torch and nothing of the backend: the first-call check
starts one per backend, device and dtype, and on a CPU about nine tenths of each one's time was importing torch
(3.2-3.6 s of a 3.1-4.4 s test).

What makes a process fresh for the contract is that the backend's caches are cold there: its module is imported,
its kernels compiled or autotuned, its warm-up paths taken, for the first time. A child of the server has the state
of a new interpreter that ran ``import torch`` and no more, as every process that calls a kernel has: torch has not
touched a GPU (a child initialises CUDA itself), and nothing of the test process (the backend already imported,
warm caches) is in it, since the server is a new interpreter, not a fork of the test process. The child takes the
asking process's working directory and environment and runs ``module.main(argv)``; its crash, hang, signal or exit
status is its own, reported as ``subprocess`` reports it. Each module the asking process imported is found in the
child where that process found it (child_imports.py). (Not ``multiprocessing``'s forkserver: its children run
the asking process's ``__main__`` again, and a user's gate script without a ``__main__`` guard would start the whole
gate once more in each.)

Nothing the server read at start-up may differ: where a variable that Python, torch, Triton or their thread pools
read at start-up differs from what it was when the server started, a new server is started with it. Off Linux, or
where RMSNORM_FRESH_INTERPRETER=1 asks for it, each process is a new interpreter (``python -m module``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .child_imports import PIN_SOURCE, bootstrap_command, pins, write_pins

# Variables read when Python starts or torch is imported (with its thread pools, numpy's and Triton's settings):
# where one differs from the server's, a new server.
READ_AT_START = ("PYTHON", "TORCH", "TRITON", "OMP_", "MKL_", "KMP_", "GOMP_", "CUDA", "LD_", "MALLOC", "NUMPY",
                 "OPENBLAS")

# The server: imports torch, then per request line forks a child that becomes the asked-for process. It ends when
# its stdin does (the asking process ended); on Linux a child it leaves running then ends with it.
_SERVER = PIN_SOURCE + r"""
import importlib, json, os, sys
import torch
requests, replies = sys.stdin.buffer, os.fdopen(int(sys.argv[1]), "w", buffering=1)
server = os.getpid()
for line in requests:
    request = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            try:  # Linux: the child ends with the server, so that closing the server ends a child it left running
                import ctypes
                ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
            except (OSError, AttributeError):
                pass
            if os.getppid() != server:
                os._exit(1)
            requests.close(); replies.close()
            os.chdir(request["cwd"])
            os.environ.clear(); os.environ.update(request["env"])
            sys.path[:0] = [p for p in request["sys_path"] if p not in sys.path]
            _pin(request["pins"])  # each module the asking process imported, from where it imported it
            sys.argv = [request["module"], *request["argv"]]
            for fd, target in ((0, os.open(os.devnull, os.O_RDONLY)),
                               (1, os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))):
                os.dup2(target, fd); os.close(target)
            os.dup2(1, 2)  # stdout and stderr in one file, as they interleave
            code = int(importlib.import_module(request["module"]).main(request["argv"]))
        except SystemExit as stop:  # as the interpreter reads it: None is 0, an int itself, anything else 1
            code = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
    replies.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
"""


def read_at_start(env: Any) -> dict[str, str]:
    """The variables of ``env`` that a process reads at start-up (READ_AT_START)."""
    return {k: v for k, v in env.items() if k.startswith(READ_AT_START)}


def start_server(source: str) -> tuple[subprocess.Popen, int]:
    """A new interpreter running ``source``, which reads its requests from stdin and writes its replies, a line
    each, to the file descriptor given as its first argument: ``(the process, that pipe's read end)``."""
    read, write = os.pipe()
    try:
        process = subprocess.Popen([sys.executable, "-c", source, str(write)], stdin=subprocess.PIPE,
                                   pass_fds=(write,), stdout=subprocess.DEVNULL)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return process, read


class _Server:
    """One server per process, started on first use (its import of torch is the one a fresh process would pay);
    one child at a time."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._replies = -1
        self._env: dict[str, str] = {}

    def _ensure(self) -> subprocess.Popen:
        if self._process is not None and (self._process.poll() is not None
                                          or read_at_start(self._env) != read_at_start(os.environ)):
            self.close()  # ended, or this process changed what the server's start read: a new one
        if self._process is None:
            self._env = dict(os.environ)
            self._process, self._replies = start_server(_SERVER)
        return self._process

    def _reply(self, timeout_s: float | None) -> dict | None:
        """The server's next reply line; None where none came in ``timeout_s``."""
        line = b""
        while not line.endswith(b"\n"):
            if timeout_s is not None and not select.select([self._replies], [], [], timeout_s)[0]:
                return None
            byte = os.read(self._replies, 1)  # a byte at a time: select() then sees every byte not read
            if not byte:
                raise RuntimeError("the fork server ended")
            line += byte
        return json.loads(line)

    def run(self, module: str, argv: Sequence[str], log: Path, timeout_s: float) -> int | None:
        process = self._ensure()
        request = {"module": module, "argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ),
                   "sys_path": sys.path, "pins": pins(), "log": str(log)}
        assert process.stdin is not None
        started: dict | None = None
        try:
            process.stdin.write((json.dumps(request) + "\n").encode())
            process.stdin.flush()
            started = self._reply(None)
            assert started is not None
            done = self._reply(timeout_s)
        except BaseException:  # a signal's handler or an interrupt ends the wait: the child ends with it
            if started is not None:
                self._kill(started["pid"])
            self.close()  # and with the server, where it had not said which child it started
            raise
        if done is None:
            self._kill(started["pid"])
            self._reply(None)
            return None
        return int(done["status"])

    @staticmethod
    def _kill(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
            os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
            with contextlib.suppress(OSError):
                os.close(self._replies)
        self._process = None


_SERVER_OF_THIS_PROCESS = _Server()


def forking() -> bool:
    """Whether fresh processes are forked from the server here: on Linux (macOS's system frameworks are not safe to
    use in a child forked after torch loaded them), unless RMSNORM_FRESH_INTERPRETER=1."""
    return sys.platform.startswith("linux") and os.environ.get("RMSNORM_FRESH_INTERPRETER") != "1"


def _new_interpreter(module: str, argv: Sequence[str], log: Path, timeout_s: float) -> tuple[int | None, str]:
    """``python -m module argv...``, with this process's modules pinned (child_imports.py), beside ``log``."""
    command = bootstrap_command(write_pins(log.with_name(log.name + ".pins.json")), module, list(argv))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        return None, ""
    return done.returncode, (done.stderr or "") + (done.stdout or "")


def run_main(module: str, argv: Sequence[str], log: Path, timeout_s: float) -> tuple[int | None, str]:
    """``module.main(argv)`` in a fresh process: ``(exit status, or None where it ran past timeout_s and was
    killed; its stdout and stderr)``, a forked child writing them to ``log``. A negative status is the signal
    that ended it. Where the server itself fails (not the child), a new interpreter runs it."""
    if not forking():
        return _new_interpreter(module, argv, log, timeout_s)
    try:
        code = _SERVER_OF_THIS_PROCESS.run(module, argv, log, timeout_s)
    except (OSError, RuntimeError):
        _SERVER_OF_THIS_PROCESS.close()
        return _new_interpreter(module, argv, log, timeout_s)
    return code, log.read_text(errors="replace") if log.is_file() else ""
