"""Device faults: a CUDA error after which the process's context is lost (a device-side assert, an illegal memory
access, a launch failure) belongs to the backend call that raised it, and to nothing that runs after it.

Every backend call is watched (``watch``): on a GPU it is synchronized before it counts as finished, so an
asynchronous fault surfaces in the call that caused it; when backend code raises, ``context_lost`` asks the
device whether it still works. If not, the call's error becomes a :class:`DeviceFault` of that backend, the
process is marked lost (``lost``), and the plugin ends it after the test's report is out (a fresh pytest-xdist
worker runs the rest; a single process stops with an INCOMPLETE report). Out of memory is not a fault of the
device: it stays a failure of the call, and the caching allocator is emptied so the next check starts clean.
"""

from __future__ import annotations

import contextlib
import gc
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..drawing.budget import fair_share
from ..vocabulary.records import DEVICE_LOST, PROCESS_LOST
from . import simulated_device

# Set in the environment of a run on a machine without a GPU, this makes the probe report the context lost after
# an error that reads like a context-poisoning CUDA error: the CPU twins of device faults use it, so CI exercises
# the whole path (record, end the process, replace the worker) that a GPU run takes (running/simulated_device.py).
SIMULATE_ENV = simulated_device.SIMULATE_ENV
# Words of the CUDA errors that leave a context unusable (cudaErrorAssert, cudaErrorIllegalAddress,
# cudaErrorLaunchFailure, cudaErrorMisalignedAddress, cudaErrorIllegalInstruction, ...), as torch and Triton's
# launcher print them; used only to recognise a simulated fault, a GPU is asked directly.
POISONING_WORDS = ("device-side assert triggered", "illegal memory access", "unspecified launch failure",
                   "misaligned address", "illegal instruction", "an illegal", "context is destroyed",
                   "hardware stack error", "uncorrectable ECC error")
# How a check that could not run because another backend's fault took the device reads in reports.
NOT_RUN_REASON = DEVICE_LOST
# The status a pytest-xdist worker ends with once its device is lost (EX_TEMPFAIL): the controller replaces it.
WORKER_EXIT_STATUS = 75


class DeviceFault(BaseException):
    """A backend call left the device's context unusable. A BaseException, so that Hypothesis does not shrink it:
    every further example would run on a context that fails every call."""

    def __init__(self, backend: str, device: str, what: str, error: BaseException, probe: str) -> None:
        self.backend, self.device, self.what, self.error, self.probe = backend, device, what, error, probe
        super().__init__(self.describe())

    def describe(self) -> str:
        first = (str(self.error).strip().splitlines() or [""])[0]
        return (f"{self.backend}.{self.what} on {self.device} raised {type(self.error).__name__}: {first}; the "
                f"device's context is lost ({self.probe}), so this process ends after this test")


@dataclass(frozen=True)
class Lost:
    """Why this process's device context is gone (or, ``process``, the process itself left in a state that could not
    be put back): the fault, the backend that caused it (or "") and the test."""

    detail: str
    backend: str = ""
    device: str = ""
    nodeid: str = ""
    process: bool = False

    @property
    def said(self) -> str:
        """What was lost, in a sentence's words."""
        return "the process was left unusable" if self.process else "the device was lost"

    @property
    def not_run_reason(self) -> str:
        """How the checks it kept from running read under "Did not run"."""
        return PROCESS_LOST if self.process else NOT_RUN_REASON


_LOST: list[Lost] = []
# The (backend, device, what) of the backend call in flight, or made last, in this process: a fault that surfaces
# outside any call (a fixture, the next device touch) is the fault of that call.
_CALLING: list[tuple[str, str, str]] = []


def lost() -> Lost | None:
    """The loss this process suffered, or None while its device works."""
    return _LOST[0] if _LOST else None


def declare_lost(loss: Lost) -> None:
    if not _LOST:
        _LOST.append(loss)


def lost_where_kept(before: dict[str, Any], what: str, backend: str, device: str, nodeid: str = "") -> list[str]:
    """What of the global state ``before`` a backend's code (``what``) left changed after it was put back
    (``isolation.restore``): beyond what the process may put back (a hard resource limit lowered, inference mode
    left on), so no later check in this process may run under it. Where anything is, the process is declared lost
    (``Lost.process``): it ends after this test, as after a device fault."""
    from . import isolation

    kept = isolation.changed(before, isolation.global_state())
    if kept:
        declare_lost(Lost(f"{what} left {'; '.join(kept)}, which the process cannot put back", backend, device,
                          nodeid, process=True))
    return kept


def touch(device: torch.device | None = None) -> None:
    """What a device touch raises on a context a fault poisoned: a simulated one's sticky error (on a GPU the touch
    itself, a synchronize or a state read, raises)."""
    simulated_device.touch()


@contextlib.contextmanager
def calling(backend: str, device: torch.device | str, what: str) -> Iterator[None]:
    """Backend code runs on ``device`` inside: a fault that surfaces later, outside any call, is blamed on it."""
    _CALLING[:] = [(backend, str(device), what)]
    yield


def last_call() -> tuple[str, str, str] | None:
    """(backend, device, what) of the backend call in flight or made last in this process, or None."""
    return _CALLING[0] if _CALLING else None


def surfaced(error: BaseException, nodeid: str) -> Lost | None:
    """Where a test ended with ``error`` outside any watched call, whether the device is lost, and whose fault that
    is: the call in flight, or made last (a fault queued asynchronously surfaces at the next device touch). The loss
    is declared (the process ends after this test) and returned; None while the device works."""
    if lost() is not None or isinstance(error, DeviceFault):
        return None
    probe = _probe_current()
    if probe is None:
        return None
    backend, device, what = last_call() or ("", "", "")
    first = (str(error).strip().splitlines() or [""])[0]
    culprit = f" after {backend}.{what}" if backend else ""
    loss = Lost(f"the device was found lost{culprit} ({probe}), where {nodeid} raised {type(error).__name__}: {first}",
                backend, device, nodeid)
    declare_lost(loss)
    return loss


def _probe_current() -> str | None:
    """Why this process's device context is unusable, or None: the simulated one's poison, or a CUDA synchronize
    that raises (asked only where CUDA was initialised: a process that never touched the GPU cannot have lost it)."""
    if simulated_device.poisoned() is not None:
        return f"simulated by {SIMULATE_ENV}"
    if torch.cuda.is_initialized():
        try:
            torch.cuda.synchronize()
        except Exception as probe:
            first = (str(probe).strip().splitlines() or [""])[0]
            return f"torch.cuda.synchronize() raised {type(probe).__name__}: {first}"
    return None


def looks_poisoning(error: BaseException) -> bool:
    """Does ``error`` read like a CUDA error that poisons the context (torch's AcceleratorError, or the words)?"""
    accelerator = getattr(torch, "AcceleratorError", None)
    text = str(error)
    named = type(error).__name__ == "AcceleratorError" or (accelerator is not None and isinstance(error, accelerator))
    return (named and "CUDA error" in text) or any(word in text for word in POISONING_WORDS)


def context_lost(device: torch.device, error: BaseException) -> str | None:
    """Why ``device``'s context is unusable after ``error``, or None if it still works.

    On a GPU: ``torch.cuda.synchronize()`` raises once the context is poisoned, whatever raised first. Elsewhere
    only a simulated loss (``SIMULATE_ENV``) after an error that reads like one. Out of memory never is."""
    if isinstance(error, torch.OutOfMemoryError):
        return None
    if device.type == "cuda" and torch.cuda.is_available():
        try:
            torch.cuda.synchronize(device)
        except Exception as probe:
            first = (str(probe).strip().splitlines() or [""])[0]
            return f"torch.cuda.synchronize() raised {type(probe).__name__}: {first}"
        return None
    if simulated_device.simulating() and (simulated_device.poisoned() is not None or looks_poisoning(error)):
        return f"simulated by {SIMULATE_ENV}"
    return None


def settle(device: torch.device) -> None:
    """Wait for the work queued on ``device``: an asynchronous fault raises here, in the call that queued it."""
    touch(device)
    if device.type == "cuda" and torch.cuda.is_initialized():  # implies available, without asking the driver (74 us)
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def watch(backend: str, device: torch.device, what: str) -> Iterator[None]:
    """Run backend code; if it (or the device work it queued) raises and the context is lost, raise a
    :class:`DeviceFault` of ``backend`` instead of the error. Code run inside after the call (the state put-back)
    is the call's too: a lost context surfaces wherever the device is next read."""
    try:
        with calling(backend, device, what):
            yield
        settle(device)
    except DeviceFault:
        raise
    except Exception as error:
        probe = context_lost(device, error)
        if probe is not None:
            raise DeviceFault(backend, str(device), what, error, probe) from error
        raise


def out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError)


def give_back_surplus(device: torch.device) -> bool:
    """After a case: where this process keeps more of ``device`` reserved than its fair share, give the cached
    blocks back (True if it did).

    PyTorch's caching allocator keeps every block it freed, and the budgets bound a case's peak, not what a process
    keeps: batch sizes that grow from case to case each take a new segment, captured in CUDA graphs or not (one
    process, 12 batches of 0.25-3 GiB: 39.0 GiB kept eagerly, 9.02 GiB captured, on an H100;
    ``benchmarks/reserved_growth.py``). Under 16 workers on an H200 one worker kept 68.22 GiB while three others'
    checks ran out of memory with 11-320 MiB free: a correct kernel failed for memory another process held and did
    not use. A give-back took 0.26-11 ms there."""
    if device.type != "cuda" or not torch.cuda.is_initialized():  # implies available, without asking the driver
        return False
    try:  # never in place of the case's own error (a lost context raises here too)
        if torch.cuda.memory_reserved(device) <= fair_share(device):
            return False
        torch.cuda.empty_cache()  # the blocks no tensor holds
    except Exception:
        return False
    return True


def start_clean(error: BaseException, device: torch.device) -> None:
    """After a failed call (out of memory above all): drop the frames that hold its tensors and give the cached
    blocks back, so that the next check has the memory this one had."""
    with contextlib.suppress(Exception):
        traceback.clear_frames(error.__traceback__)
    gc.collect()
    if device.type == "cuda" and torch.cuda.is_initialized():  # implies available, without asking the driver (74 us)
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
