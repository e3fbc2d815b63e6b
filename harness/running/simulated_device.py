"""The CPU twin of a poisoned GPU context, for CI on machines without a GPU.

Set ``RMSNORM_CONFORMANCE_SIMULATE_DEVICE_LOSS`` and an error that reads like a context-poisoning CUDA error counts
as a lost context (``device_faults.context_lost``). Set it to ``module:attr``, a callable that returns the twin's
sticky error (or None), and the process's device is poisoned once that returns one: every later device touch of the
harness (a synchronize, the state put-back's read) raises it again, as every CUDA call does after a device-side
assert. The zoo's twins keep that error (zoo/faults.py: ``poisoned``); the harness asks, and never imports them.
"""

from __future__ import annotations

import importlib
import os

SIMULATE_ENV = "RMSNORM_CONFORMANCE_SIMULATE_DEVICE_LOSS"


def simulating() -> bool:
    return bool(os.environ.get(SIMULATE_ENV))


def poisoned() -> BaseException | None:
    """The simulated context's sticky error, where the environment names a probe and it reports one; else None."""
    spec = os.environ.get(SIMULATE_ENV, "")
    if ":" not in spec:
        return None
    module, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)()
    except (ImportError, AttributeError):  # a probe that is not there poisons nothing
        return None


def touch() -> None:
    """A device touch: on a poisoned simulated context it raises the sticky error again, as a CUDA call would."""
    error = poisoned()
    if error is not None:
        raise type(error)(str(error))
