"""Keeping a hostile backend from changing the run around it: torch's global state around each call, outputs
copied as they are returned, exits refused, and a deadline on each case.

A backend that flips the default dtype or grad mode would change every later case's input bits (replays stop
reproducing) and make later backends' tests skip; one that returns the same buffer every call would have its
bug blamed on Axis-A; one that hangs would hang the run. Each of these becomes a named failure of that
backend instead, and the run goes on.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import json
import json.encoder
import os
import pkgutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from . import exception_text, simulated_device

try:
    import posix  # os._exit's other name
except ImportError:  # not a POSIX system
    posix = None  # type: ignore[assignment]

# The real exit, kept before any backend call can see os._exit replaced (see no_exit): the watchdog needs it.
_REAL_EXIT = os._exit
# The clock and the sleep the watchdog keeps time with, bound before any backend is imported: a hung kernel that
# had replaced time.monotonic with a constant (and ignored SIGALRM) stopped the watchdog's clock, and the run hung
# past --case-timeout and --deadline. A replacement is also put back after the call (``watch_functions``).
_monotonic, _sleep = time.monotonic, time.sleep


# The smallest normal float32's bits shifted down: a subnormal, built from its bits so that no flushing mode in force
# at import can turn it into zero on the way in.
_SUBNORMAL = torch.tensor([1 << 20], dtype=torch.int32).view(torch.float32)
_AUTOCAST_DEVICES = ("cpu", "cuda")


def flushes_denormals() -> bool:
    """Whether this thread's float arithmetic flushes subnormals to zero (``torch.set_flush_denormal``): torch has no
    getter, so a subnormal is multiplied by one and looked at. A backend that leaves it on changes the reference's
    bits, and every later backend's, on the contract's subnormal inputs."""
    return torch.mul(_SUBNORMAL, 1.0).item() == 0.0


# The torch functions that the reference, the drawing of inputs and the comparisons call. A backend that replaced
# one (or one of torch.Tensor's Python-level attributes, all watched) would change what every later check computes:
# a patched torch.sqrt or Tensor.float could make the reference agree with a wrong kernel.
# The getters and setters this module reads and puts back the state with are watched too: a backend that replaced
# torch.get_default_dtype along with the default dtype would otherwise hide the change it made. So are the ways the
# execution modes and the fresh process run a backend (compile, no_grad, enable_grad, inference_mode, load, save):
# with torch.compile replaced by a function that returns its argument, a kernel wrong only when compiled passed the
# compiled checks, eager against eager.
_WATCHED_FUNCTIONS = ("bincount", "bucketize", "cat", "empty", "empty_strided", "equal", "finfo", "full",
                      "full_like", "isfinite", "isnan", "randint", "compile", "no_grad", "enable_grad",
                      "inference_mode", "load", "save",
                      "isneginf", "isposinf", "ones", "ones_like", "pow", "rand", "randn", "randperm", "reciprocal",
                      "rsqrt", "sqrt", "tensor", "where", "zeros", "zeros_like", "mul", "stack",
                      "get_default_dtype", "set_default_dtype", "is_grad_enabled", "set_grad_enabled",
                      "is_inference_mode_enabled", "are_deterministic_algorithms_enabled",
                      "is_deterministic_algorithms_warn_only_enabled", "use_deterministic_algorithms",
                      "get_float32_matmul_precision", "set_float32_matmul_precision", "get_rng_state", "set_rng_state",
                      "get_num_threads", "set_num_threads", "set_flush_denormal", "is_autocast_enabled",
                      "set_autocast_enabled", "is_anomaly_enabled", "set_anomaly_enabled", "get_default_device",
                      "set_default_device")
_FUNCTION_KEYS = tuple(f"torch.{name}" for name in _WATCHED_FUNCTIONS)
_TENSOR = "torch.Tensor."
_MISSING = object()
# The handlers that make Ctrl-C and a CI's SIGTERM end the run with an INCOMPLETE report, not a silent one.
_WATCHED_SIGNALS = ("SIGINT", "SIGTERM", "SIGALRM")  # SIGALRM: the case deadline's timer (``deadline``)


def torch_functions() -> dict[str, Any]:
    """The watched torch functions ("torch.sqrt") and torch.Tensor's own attributes ("torch.Tensor.float"), as the
    objects they are now: compared by identity (``_replaced``), so a replacement that claims equality is seen."""
    found = dict(zip(_FUNCTION_KEYS, [getattr(torch, name, None) for name in _WATCHED_FUNCTIONS], strict=True))
    found.update({_TENSOR + name: value for name, value in vars(torch.Tensor).items()})
    return found


# The functions outside torch and the harness that the run's verdict is computed and its reports written with: the
# standard library's json, file and process functions here, pytest's outcomes and Hypothesis' in-test functions as
# the plugin registers them (``watch_functions``), before any backend is imported. A backend that replaced one could
# make the report say what it likes: with json.dumps patched, the JSON report of a run whose markdown and exit status
# said FAIL read PASS. Compared by identity around every call and put back, as torch's functions are; the harness's
# own functions, too many for every call, are ``HarnessWatch``'s.
_RUN_FUNCTIONS: list[tuple[str, Any, str, Any]] = []  # (label.name, owner, name, the owner's live namespace)
_BUILTINS = ("open", "print", "repr", "str", "format", "len", "sorted", "isinstance", "getattr", "setattr", "hasattr",
             "min", "max", "sum", "any", "all", "int", "float", "bool", "round", "abs", "dict", "list", "tuple", "set",
             "frozenset", "zip", "enumerate", "range", "iter", "next", "type", "id", "hash", "map", "filter")
_OS = ("replace", "rename", "fdopen", "open", "close", "write", "fsync", "unlink", "makedirs", "mkdir", "getpid",
       "kill", "getcwd", "fspath")


def watch_functions(label: str, owner: Any, names: Iterable[str] | None = None) -> None:
    """Watch ``owner``'s attributes ``names`` (by default every one it has now) as ``label.name``. A backend that
    replaces one fails ``semantics.global_state`` and the original is put back. The names are read now; attributes
    added later are not watched."""
    own = vars(owner)  # a module's dict, a class's mappingproxy: live views, read at each snapshot
    if names is None:
        names = list(own)
    known = {key for key, *_ in _RUN_FUNCTIONS}
    _RUN_FUNCTIONS.extend((f"{label}.{name}", owner, name, own) for name in names if f"{label}.{name}" not in known)


watch_functions("json", json)
watch_functions("json.encoder", json.encoder)
watch_functions("json.JSONEncoder", json.JSONEncoder)
watch_functions("builtins", builtins, _BUILTINS)
watch_functions("os", os, [n for n in _OS if hasattr(os, n)])
watch_functions("tempfile", tempfile, ("mkstemp",))
watch_functions("time", time, ("monotonic", "time", "sleep", "perf_counter"))  # the deadlines' clock
# torch's own functions outside its top level that the checks run a backend or judge it with: opcheck (the interface
# rule), CUDA-graph capture and the stream waits (the execution modes), is_compiling (what a compiled call asks).
watch_functions("torch.library", torch.library, ("opcheck",))
watch_functions("torch.compiler", torch.compiler, ("is_compiling",))
watch_functions("torch.func", torch.func, ("functional_call",))
watch_functions("torch.cuda", torch.cuda, ("graph", "CUDAGraph", "synchronize", "current_stream", "stream", "Stream",
                                           "is_available", "device_count"))


def run_functions() -> dict[str, Any]:
    """The watched functions of the run (``watch_functions``) as the objects they are now, by ``label.name``."""
    return {key: own.get(name, _MISSING) for key, _, name, own in _RUN_FUNCTIONS}


def _put_back_run_functions(before: dict[str, Any]) -> None:
    for key, owner, name, own in _RUN_FUNCTIONS:
        if key in before and own.get(name, _MISSING) is not before[key]:
            _set_back(owner, name, before[key])


def _set_back(owner: Any, name: str, value: Any) -> None:
    """``owner.name`` as it was: ``value``, or no such attribute where it had none (``_MISSING``)."""
    if value is _MISSING:
        with contextlib.suppress(AttributeError):
            delattr(owner, name)
    else:
        setattr(owner, name, value)


def _import_all(parts: tuple[str, ...]) -> None:
    """Import every module of the package's subpackages ``parts`` (the command-line ``__main__`` modules aside),
    and resolve every name a package exports lazily (``harness.assert_within``): a name not yet set is one a
    backend could set first, and the suites' ``from ... import`` would take its value."""
    package = __name__.split(".", 1)[0]
    for part in parts:
        root = importlib.import_module(f"{package}.{part}")
        modules = [root] + [importlib.import_module(found.name)
                            for found in pkgutil.walk_packages(root.__path__, f"{root.__name__}.")
                            if not found.name.endswith(".__main__")]
        for module in modules:
            for name in getattr(module, "__all__", ()):
                getattr(module, name)


class HarnessWatch:
    """The harness's own functions and classes: every function and class (its own, and those it imported by name),
    and every attribute of its own classes, of every harness and contract module (all imported by ``take`` when the
    run starts, before any backend is) and of the suites once collected, with the modules themselves in
    ``sys.modules``, and the standard library's functions ``run_functions`` watches. A backend that replaced one
    could pass every check (``checks.assert_holds`` made a no-op) or write the report it likes. 2,297 names before
    the suites are collected: too many to read around every call, as ``global_state`` is, so they are read at the end
    of each test and of the run (``replaced``), and after a backend's import."""

    def __init__(self) -> None:
        self._entries: list[tuple[str, Any, str, Any, Any]] = []  # (shown as, owner, name, live namespace, value)
        self._modules: dict[str, Any] = {}  # the watched modules by the names sys.modules has them under

    def take(self) -> None:
        """What the functions are now: the originals, where no backend has been imported yet. Every module of the
        harness and the contract is imported first (45-52 ms on a 2-core machine), the ones a test imports only
        when it runs too, and the harness package's lazy names resolved: a backend could otherwise put its own
        module in ``sys.modules``, or its own function in the package, under a name the harness had not loaded yet,
        and no snapshot would have held the real one."""
        if self._entries:
            return
        _import_all(("harness", "contract"))
        self._entries = [(key, owner, name, own, own.get(name, _MISSING)) for key, owner, name, own in _RUN_FUNCTIONS]
        self.add_modules(("harness", "contract"))

    def add_modules(self, parts: tuple[str, ...]) -> None:
        """Watch, from now on, every loaded module from the package's folders ``parts`` not watched yet, under
        whatever name it was imported (a source checkout may import a suite as ``suites.test_x`` beside
        ``rmsnorm_conformance.suites.test_x``): called again once the suites are collected, which imports them and
        the harness modules they need, after the backends."""
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        folders = tuple(os.path.join(root, part) + os.sep for part in parts)
        watched = {id(module) for module in self._modules.values()}
        for module_name, module in sorted(sys.modules.items()):
            path = getattr(module, "__file__", None) if module is not None else None
            if not isinstance(path, str) or not os.path.abspath(path).startswith(folders):
                continue
            seen = id(module) in watched
            self._modules.setdefault(module_name, module)
            if seen:
                continue
            watched.add(id(module))
            own = vars(module)
            for name, value in list(own.items()):
                if not callable(value):  # its functions and classes, and those it imported by name
                    continue
                self._entries.append((f"{module_name}.{name}", module, name, own, value))
                if isinstance(value, type) and value.__module__ == module_name:
                    attributes = vars(value)
                    self._entries += [(f"{module_name}.{name}.{attr}", value, attr, attributes, v)
                                      for attr, v in attributes.items() if attr not in ("__dict__", "__weakref__")]

    def replaced(self) -> list[str]:
        """The names whose object is no longer the one ``take`` saw, and the modules ``sys.modules`` no longer
        holds, each put back (none before ``take``)."""
        changed = [entry for entry in self._entries if entry[3].get(entry[2], _MISSING) is not entry[4]]
        for _, owner, name, _, value in changed:
            _set_back(owner, name, value)
        swapped = [name for name, module in self._modules.items() if sys.modules.get(name) is not module]
        for name in swapped:
            sys.modules[name] = self._modules[name]
        return [entry[0] for entry in changed] + [f"sys.modules[{name!r}]" for name in swapped]

    @staticmethod
    def shown(names: list[str], most: int = 6) -> str:
        """``names`` for a message: the first ``most``, then how many more."""
        return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


# Bound when this module is imported, before any backend is: read through these, the state is what it is even where
# a backend replaced the module attribute (which the watched functions then show).
_getsignal, _setsignal = signal.getsignal, signal.signal
_sigmask = getattr(signal, "pthread_sigmask", None)


def _signal_handlers() -> dict[str, Any]:
    return {name: _getsignal(getattr(signal, name)) for name in _WATCHED_SIGNALS}


def _signal_state() -> tuple[Any, ...]:
    """The signal module's functions (by identity) and this thread's blocked signals: a backend that blocks SIGTERM
    or SIGINT keeps a CI timeout or a Ctrl-C from ending the run with its report."""
    blocked = tuple(sorted(int(s) for s in _sigmask(signal.SIG_BLOCK, ()))) if _sigmask is not None else ()
    return (signal.getsignal, signal.signal, getattr(signal, "pthread_sigmask", None), blocked)


# Environment variables the harness reads after backends have run: where CI output goes, and its own switches.
_WATCHED_ENV = ("CI", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE")


def _environment() -> tuple[tuple[str, str | None], ...]:
    """The watched variables as (name, value) pairs, compared by value (os.environ makes a new str each read)."""
    names = set(_WATCHED_ENV) | {k for k in os.environ if k.startswith("RMSNORM_")}
    return tuple((k, os.environ.get(k)) for k in sorted(names))


def _backend_flags() -> tuple[Any, ...]:
    """Flags of torch.backends that change how torch computes on the CPU and the GPU alike (readable without a
    GPU): oneDNN, anomaly mode, cuDNN's choices, reduced-precision reductions in half-precision matmuls."""
    matmul = torch.backends.cuda.matmul
    return (torch.backends.mkldnn.enabled, torch.is_anomaly_enabled(), torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark, getattr(matmul, "allow_bf16_reduced_precision_reduction", None),
            getattr(matmul, "allow_fp16_reduced_precision_reduction", None))


def _set_backend_flags(flags: tuple[Any, ...]) -> None:
    mkldnn, anomaly, deterministic, benchmark, bf16, fp16 = flags
    torch.backends.mkldnn.enabled = mkldnn
    torch.set_anomaly_enabled(anomaly)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = benchmark
    matmul = torch.backends.cuda.matmul
    if bf16 is not None:
        matmul.allow_bf16_reduced_precision_reduction = bf16
    if fp16 is not None:
        matmul.allow_fp16_reduced_precision_reduction = fp16


_AUTOGRAD: Any = getattr(torch._C, "_autograd", None)


def _saved_tensor_hooks() -> tuple[Any, ...]:
    """The innermost default saved-tensor hooks (by identity: a pair pushed since reads as another pair) and whether
    they are enabled; () where this torch cannot say."""
    top = getattr(_AUTOGRAD, "_top_saved_tensors_default_hooks", None)
    enabled = getattr(_AUTOGRAD, "_saved_tensors_hooks_is_enabled", None)
    if top is None or enabled is None:
        return ()
    return (_Identity(top(False)), enabled())


class _Identity:
    """A value compared by identity (a hooks pair is a new tuple at each read, of the same functions)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Identity):
            return NotImplemented
        mine, theirs = self.value, other.value
        if isinstance(mine, tuple) and isinstance(theirs, tuple):
            return len(mine) == len(theirs) and all(a is b for a, b in zip(mine, theirs, strict=True))
        return mine is theirs

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "none" if self.value is None else "hooks " + ", ".join(getattr(f, "__qualname__", repr(f))
                                                                     for f in self.value)


def _restore_saved_tensor_hooks(before: tuple[Any, ...]) -> None:
    """Pop the hooks pushed since ``before`` (at most 64: a stack deeper than that was never the harness's), and
    enable or disable them as they were."""
    if not before or _saved_tensor_hooks() == before:
        return
    for _ in range(64):
        current = _saved_tensor_hooks()
        if not current or current[0] == before[0] or current[0].value is None:
            break
        _AUTOGRAD._pop_saved_tensors_default_hooks()
    if _AUTOGRAD._saved_tensors_hooks_is_enabled() != before[1]:
        if before[1]:
            _AUTOGRAD._saved_tensors_hooks_enable()
        else:
            _AUTOGRAD._saved_tensors_hooks_disable("disabled before the backend's call")


class _Floor(int):
    """A value compared as a floor: raising it is no change. torch.compile raises the recursion limit on its first
    compile (1000 to 2000), which no backend should be blamed for; lowering it would make later cases fail with
    RecursionError, blamed on the backends they test."""


def _interpreter_hooks() -> dict[str, Any]:
    """The interpreter's trace and profile functions, compared by identity: one left installed sees every later
    frame, the reference's among them, and slows every later case."""
    return {"trace": sys.gettrace(), "profile": sys.getprofile()}


def _working_directory() -> str | None:
    """The process's working directory (None where it was removed): a kernel that leaves it changed moves every
    relative path the run and later backends open."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _umask() -> str | None:
    """The process's file-mode mask ("0o22"), read without changing it where the kernel shows it (Linux), else
    None: one a backend leaves at 0o777 writes every later report unreadable (mode 000)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return oct(int(line.split()[1], 8))
    except (OSError, ValueError, IndexError):
        pass
    return None


# Limits a backend could lower and the run then live under: a file-size cap of 64 bytes left every report unwritten
# (and failed native's first-call checks, whose fresh process writes its result to a file); an address-space or
# open-file cap fails later backends' allocations and files.
_LIMITS = ("RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_STACK")


_LIMIT = "resource limit "  # a state entry per limit: "resource limit RLIMIT_FSIZE": (soft, hard)


class _Limit(tuple):
    """A (soft, hard) resource limit that counts as unchanged where it was raised (no limit: -1): a library that
    raises its open-file limit harms nothing; a lowered one is the change."""

    def allows(self, other: tuple[int, int]) -> bool:
        """Whether ``other`` is at least this limit, soft and hard."""
        return all(o < 0 or (0 <= a <= o) for a, o in zip(self, other, strict=True))


def _resource_limits() -> dict[str, _Limit]:
    try:
        import resource
    except ImportError:  # not a POSIX system
        return {}
    return {_LIMIT + name: _Limit(resource.getrlimit(getattr(resource, name)))
            for name in _LIMITS if hasattr(resource, name)}


def _set_resource_limits(state: dict[str, Any]) -> None:
    """The limits as they were, where the process may raise them again (a lowered hard limit stays: only a
    privileged process may raise it; the failure names it either way)."""
    import resource

    for key, now in _resource_limits().items():
        if key in state and not _same(state[key], now):
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(getattr(resource, key[len(_LIMIT):]), state[key])


def _replaced(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The names whose object is not the same one, or that came or went."""
    if len(before) == len(after) and all(after.get(name, _MISSING) is value for name, value in before.items()):
        return []
    return sorted(name for name in before.keys() | after.keys()
                  if before.get(name, _MISSING) is not after.get(name, _MISSING))


def _put_back_functions(before: dict[str, Any]) -> None:
    """Undo replacements of the watched functions and of torch.Tensor's attributes; remove attributes added to it."""
    now = torch_functions()
    for name in _replaced(before, now):
        owner, attr = (torch.Tensor, name[len(_TENSOR):]) if name.startswith(_TENSOR) else (torch, name[6:])
        if name in before:
            setattr(owner, attr, before[name])
        else:
            delattr(owner, attr)


def global_state() -> dict[str, Any]:
    """The parts of torch's process-wide state a backend call could change and later cases would feel. On a lost
    device context the reading raises (the CUDA RNG state's, or a simulated context's: simulated_device.py)."""
    simulated_device.touch()
    state: dict[str, Any] = {
        "default dtype": torch.get_default_dtype(),
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "deterministic algorithms": (torch.are_deterministic_algorithms_enabled(),
                                     torch.is_deterministic_algorithms_warn_only_enabled()),
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "cpu RNG state": torch.get_rng_state(),
        "threads": torch.get_num_threads(),
        "flush denormal": flushes_denormals(),
        "autocast": tuple(torch.is_autocast_enabled(device) for device in _AUTOCAST_DEVICES),
        "torch functions": torch_functions(),
        "the run's own functions": run_functions(),
        "signal handlers": _signal_handlers(),
        "signal functions and mask": _signal_state(),
        "environment": _environment(),
        "torch.backends flags": _backend_flags(),
        # A mode left on a stack sees (and may change) every later torch call, the reference's among them.
        "torch function modes": torch._C._len_torch_function_stack(),
        "dispatch modes": torch._C._len_torch_dispatch_stack(),
        # Saved-tensor hooks left on see (and may change) what every later forward saves for its backward, the
        # reference's too: zeroed there, every backend's gradients and the reference's agreed, all wrong.
        "saved-tensor hooks": _saved_tensor_hooks(),
        "recursion limit": _Floor(sys.getrecursionlimit()),
        "trace and profile functions": _interpreter_hooks(),
        "working directory": _working_directory(),
        "file-mode mask": _umask(),
        **_resource_limits(),
    }
    if hasattr(torch, "get_default_device"):
        state["default device"] = str(torch.get_default_device())
    if torch.cuda.is_initialized():  # implies available; is_available() asks the driver each time (74 us)
        state["cuda RNG state"] = torch.cuda.get_rng_state()
        state["cuda tf32 matmul"] = torch.backends.cuda.matmul.allow_tf32
        state["cudnn tf32"] = torch.backends.cudnn.allow_tf32
    return state


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, _Floor):
        return b >= a
    if isinstance(a, _Limit):
        return a.allows(b)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return not _replaced(a, b)
    return a == b


def _shown(value: Any) -> str:
    return "changed" if isinstance(value, torch.Tensor) else repr(value)


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Names of the state entries that differ, with their values, for the failure message."""
    out = []
    for key in before:
        if key not in after or _same(before[key], after[key]):
            continue
        if isinstance(before[key], dict):
            out.append(f"{key} replaced: {', '.join(_replaced(before[key], after[key]))}")
        else:
            out.append(f"{key} {_shown(before[key])} -> {_shown(after[key])}")
    return out


def restore(state: dict[str, Any]) -> None:
    """Put back what a backend changed (inference mode cannot be left from outside; it is only reported). The
    replaced functions first: the setters below are among them."""
    _put_back_functions(state["torch functions"])
    _put_back_run_functions(state["the run's own functions"])
    _restore_process(state)
    torch.set_default_dtype(state["default dtype"])
    torch.set_grad_enabled(state["grad mode"])
    enabled, warn_only = state["deterministic algorithms"]
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
    torch.set_float32_matmul_precision(state["float32 matmul precision"])
    torch.set_rng_state(state["cpu RNG state"])
    torch.set_num_threads(state["threads"])
    _set_backend_flags(state["torch.backends flags"])
    while torch._C._len_torch_function_stack() > state["torch function modes"]:
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack() > state["dispatch modes"]:
        torch._C._pop_torch_dispatch_stack(None)
    _restore_saved_tensor_hooks(state["saved-tensor hooks"])
    torch.set_flush_denormal(state["flush denormal"])
    for device, enabled in zip(_AUTOCAST_DEVICES, state["autocast"], strict=True):
        torch.set_autocast_enabled(device, enabled)
    if "default device" in state:
        torch.set_default_device(None if state["default device"] == "cpu" else state["default device"])
    if "cuda RNG state" in state:
        torch.cuda.set_rng_state(state["cuda RNG state"])
        torch.backends.cuda.matmul.allow_tf32 = state["cuda tf32 matmul"]
        torch.backends.cudnn.allow_tf32 = state["cudnn tf32"]


def _restore_process(state: dict[str, Any]) -> None:
    """The process's side of ``state``: the signal functions, handlers and mask, the watched environment, and the
    interpreter's (``_restore_interpreter``)."""
    _restore_interpreter(state)
    getsignal, setsignal, sigmask, blocked = state["signal functions and mask"]
    signal.getsignal, signal.signal = getsignal, setsignal
    if threading.current_thread() is threading.main_thread():  # only the main thread may set a handler
        for name in _replaced(state["signal handlers"], _signal_handlers()):
            if state["signal handlers"][name] is not None:  # None: a handler not set from Python, left as it is
                _setsignal(getattr(signal, name), state["signal handlers"][name])
    if sigmask is not None and _sigmask is not None:
        signal.pthread_sigmask = sigmask
        _sigmask(signal.SIG_SETMASK, blocked)
    before = dict(state["environment"])
    for name, _ in _environment():
        if name not in before:  # a variable of the harness's that came since
            os.environ.pop(name, None)
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _restore_interpreter(state: dict[str, Any]) -> None:
    """The recursion limit (where it was lowered), the trace and profile functions, the working directory, the
    file-mode mask and the resource limits."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), state["recursion limit"]))
    if state["file-mode mask"] is not None and _umask() != state["file-mode mask"]:
        os.umask(int(state["file-mode mask"], 8))
    _set_resource_limits(state)
    if state["working directory"] is not None and _working_directory() != state["working directory"]:
        with contextlib.suppress(OSError):
            os.chdir(state["working directory"])
    hooks = state["trace and profile functions"]
    if _replaced(hooks, _interpreter_hooks()):
        sys.settrace(hooks["trace"])
        sys.setprofile(hooks["profile"])


def put_back(before: dict[str, Any]) -> list[str]:
    """What a backend's code changed of ``before`` (``changed``), each change put back (``restore``): the words a
    failure names them by, empty when nothing changed."""
    diff = changed(before, global_state())
    if diff:
        restore(before)
    return diff


_FINGERPRINT_POINTS = 1 << 12  # a reused buffer overwritten by another batch changes nearly every element


def fingerprint(t: torch.Tensor) -> torch.Tensor:
    """The bits of about 4096 evenly spaced elements of ``t`` (all of them for small tensors), on its device:
    enough to see a buffer overwritten by a later call, at a fraction of the cost of a full copy."""
    flat = t.detach().reshape(-1)
    step = max(1, flat.numel() // _FINGERPRINT_POINTS)
    sample = flat[::step].clone()
    if sample.dtype.is_floating_point:
        sample = sample.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[sample.element_size()])
    return sample


# Interrupts this process has received: SIGINT, where watch_interrupts installed its note, and the reporter's SIGTERM.
# A KeyboardInterrupt out of a backend call with none received since the call began is the backend's own raise.
_interrupts = {"received": 0, "watched": False, "silent": False}


def note_interrupt() -> None:
    """An interrupt (SIGINT, or the SIGTERM the reporter turns into one) has reached this process."""
    _interrupts["received"] += 1


def watch_interrupts() -> Callable[[], None]:
    """SIGINT noted (``note_interrupt``) before it is handled as before, in a process whose main thread handles it
    in Python; returns what puts the previous handler back (a no-op where nothing was installed).

    A kernel that raises KeyboardInterrupt itself ended the whole run as a Ctrl-C does, every other backend's checks
    with it (INCOMPLETE, "interrupted (Ctrl-C or a signal)"); with SIGINT noted, ``no_exit`` tells the two apart."""
    handler = _getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or handler is None:
        return lambda: None
    if not callable(handler):
        # SIGINT ignored (a process started in the background inherits SIG_IGN) or left to end the process: no
        # SIGINT can arrive as a KeyboardInterrupt while that lasts, so one not preceded by a noted SIGTERM is a
        # raise. "silent": where a handler was installed since, nothing notes a SIGINT (no_exit then re-raises).
        _interrupts["watched"] = _interrupts["silent"] = True

        def unwatch() -> None:
            _interrupts["watched"] = _interrupts["silent"] = False

        return unwatch

    def noting(signum: int, frame: Any) -> Any:
        note_interrupt()
        return handler(signum, frame)

    _setsignal(signal.SIGINT, noting)
    _interrupts["watched"] = True

    def undo() -> None:
        _interrupts["watched"] = False
        if _getsignal(signal.SIGINT) is noting:
            _setsignal(signal.SIGINT, handler)

    return undo


class ExitRefused(RuntimeError):
    """A backend called os._exit, or ended the test its own way (pytest.skip, pytest.xfail, pytest.exit,
    unittest.SkipTest), during a call: refused, and a failure of that backend."""


def _test_outcomes() -> tuple[type[BaseException], ...]:
    """The exceptions with which code ends a test as skipped, xfailed or the session as over: pytest's, and
    unittest's skip, which pytest and Hypothesis take for a skip too."""
    import unittest

    import pytest

    return (pytest.skip.Exception, pytest.xfail.Exception, pytest.exit.Exception, unittest.SkipTest)


@contextlib.contextmanager
def no_exit(name: str) -> Iterator[None]:
    """While a backend runs, ``os._exit`` raises instead of ending the process with status 0 and no report, and a
    KeyboardInterrupt the backend raises itself, with no interrupt received (``watch_interrupts``), is refused
    instead of ending the run.

    Only in the thread that calls the backend: another thread's exit (pytest-timeout's thread method ending a
    stuck test) goes through, after ``WATCHDOG.on_hang`` has written down the case it ended.

    A backend that ends the test its own way (``pytest.skip`` or ``pytest.xfail`` where it would be wrong, as a
    kernel that knows it runs under pytest can) is refused too: the check fails naming the call, where the test
    had read as skipped or xfailed and the run as passed.
    """
    real = os._exit
    owner = threading.current_thread()

    def refuse(status: int) -> None:
        if threading.current_thread() is not owner:
            if WATCHDOG.on_hang is not None:
                with contextlib.suppress(Exception):
                    WATCHDOG.on_hang(f"was ended by os._exit({status}) from thread "
                                     f"{threading.current_thread().name!r} (a test timeout's thread method)")
            real(status or 2)  # never a 0: pytest-timeout's own exit is 1, a 0 from a kernel's thread is not a pass
        raise ExitRefused(f"{name} called os._exit({status}) during a call")

    os._exit = refuse  # type: ignore[assignment]
    if posix is not None:
        posix._exit = refuse  # type: ignore[assignment]  # os._exit is posix._exit: both names refused
    received, sigint = _interrupts["received"], _getsignal(signal.SIGINT)
    try:
        yield
    except KeyboardInterrupt:
        # The run's end where an interrupt came (or where none could be seen coming: SIGINT not watched, or its
        # handler replaced during the call); else the backend's own raise, a failure of that backend alone.
        if (_interrupts["received"] != received or not _interrupts["watched"] or _getsignal(signal.SIGINT) is not sigint
                or (_interrupts["silent"] and callable(sigint))):
            raise
        raise ExitRefused(f"{name} raised KeyboardInterrupt during a call, with no Ctrl-C or SIGTERM received: a "
                          "kernel under test may not end the run") from None
    except _test_outcomes() as exc:
        first = (exception_text.message(exc).strip().splitlines() or [""])[0]
        raise ExitRefused(f"{name} ended the test itself during a call ({type(exc).__name__}: {first}): a kernel "
                          "under test may not skip, xfail or exit a conformance test") from None
    finally:
        os._exit = real
        if posix is not None:
            posix._exit = real


class CaseTimedOut(BaseException):
    """A case ran past its deadline. A BaseException, so that Hypothesis does not try to shrink it by running
    more cases that may hang as long."""


class EndedByTimer(BaseException):
    """Another plugin's timer (pytest-timeout) ended a case; raised from its exception, past Hypothesis, which
    would otherwise replay the case to shrink it, now with no timer left to end it."""


class RunDeadlineReached(BaseException):
    """The run's own deadline (``--deadline``) passed during a case: the case is not finished, and says nothing
    about the backend (a BaseException for the reason :class:`CaseTimedOut` is)."""


class Watchdog:
    """The last resort for a backend stuck inside native code, where no Python signal handler runs: past the
    deadline plus a grace period it calls ``on_hang`` (which writes the report), then ends the process, so
    that pytest-xdist reports the crashed test and goes on with a fresh worker."""

    MAX_GRACE = 30.0  # seconds past the case deadline: long enough for a signal to land in slow Python code

    def __init__(self) -> None:
        self._deadline: float | None = None
        self._what = ""
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.on_hang: Callable[[str], None] | None = None

    def arm(self, seconds: float, what: str) -> None:
        with self._lock:
            self._deadline = _monotonic() + seconds + min(self.MAX_GRACE, max(5.0, seconds))
            self._what = what
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="rmsnorm-conformance-watchdog",
                                                daemon=True)
                self._thread.start()

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None

    def _watch(self) -> None:
        while True:
            _sleep(1.0)
            with self._lock:
                late = self._deadline is not None and _monotonic() > self._deadline
                what = self._what
            if late:
                message = f"hung past its deadline in native code: {what}"
                if self.on_hang is not None:
                    with contextlib.suppress(Exception):
                        self.on_hang(message)
                _REAL_EXIT(1)  # the hang is the backend's failure; under xdist, a crashed worker


WATCHDOG = Watchdog()


@contextlib.contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Raise :class:`CaseTimedOut` in this thread if the block runs longer than ``seconds`` (0: no deadline).

    A SIGALRM timer interrupts Python code, sleeps and waits; the watchdog covers native code. An alarm another
    plugin set (pytest-timeout's signal method) passes through: if it is due first, its own handler runs when it
    is due, and whatever that raises is marked ``ended_by_timer`` so the check records the case it ended; if
    not, it is set again afterwards with the time it had left.
    """
    use_signal = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not use_signal:
        if seconds > 0:
            WATCHDOG.arm(seconds, what)
        try:
            yield
        finally:
            WATCHDOG.disarm()
        return
    started = time.monotonic()
    previous_handler = signal.getsignal(signal.SIGALRM)
    theirs, their_interval = signal.getitimer(signal.ITIMER_REAL)
    if seconds <= 0 and theirs <= 0:
        yield
        return
    theirs_first = theirs > 0 and (seconds <= 0 or theirs <= seconds)
    fired = False

    def expire(signum: int, frame: Any) -> None:
        nonlocal fired
        if not theirs_first:
            raise CaseTimedOut(f"did not return within {seconds:g} s (--case-timeout): {what}")
        fired = True
        signal.signal(signal.SIGALRM, previous_handler)
        if not callable(previous_handler):
            signal.raise_signal(signal.SIGALRM)  # the default action, or none, as without the harness
            return
        try:
            previous_handler(signum, frame)
        except BaseException as exc:
            exc.ended_by_timer = True  # type: ignore[attr-defined]
            raise

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, theirs if theirs_first else seconds)
    if seconds > 0:
        WATCHDOG.arm(seconds, what)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        WATCHDOG.disarm()
        if theirs > 0 and not fired:
            remaining = max(theirs - (time.monotonic() - started), 0.001)
            signal.setitimer(signal.ITIMER_REAL, remaining, their_interval)
