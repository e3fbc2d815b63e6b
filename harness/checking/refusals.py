"""Refused inputs (CONTRACT.md, "Refused inputs"): a clear exception a backend raises on a valid input it did not
declare it refuses is recorded as refused, its own severity, not as a breach of the rule the case checks; a case
outside the limits it declares is not run, with the limit as the reason.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from ..running import device_faults, exception_text, isolation
from ..running.backend import BackendError
from ..running.entry_points import ENTRY_POINTS
from ..running.limits import NOT_RUN_PREFIX, describe_call, refused_feature
from ..vocabulary.records import REFUSED_RULE as REFUSED
from .bounds import ARGUMENT_NAMES, GuardedCall


class OutsideDeclaredLimits(BaseException):
    """A call the backend declared it does not take: the case is not run. A BaseException, so that a check that
    expects the backend to raise (``except Exception``) cannot mistake it for the backend's own error."""


class Refused(BaseException):
    """A backend call raised a clean exception on a valid input it did not declare it refuses: raised in place of
    that exception at the call boundary every check shares (``Subject.call``, ``Subject.backward``, the
    cross-backend table), so that the check's runner records it as refused whatever the check was doing: a test's
    own ``except Exception`` (an empty batch's, a purity check's) cannot read it as a breach. A BaseException for
    the same reason as :class:`OutsideDeclaredLimits`."""

    def __init__(self, found: Refusal) -> None:
        self.found = found
        super().__init__(f"refused: {found.method} with {found.input} raised {found.exception}")


@dataclass(frozen=True)
class Refusal:
    """One call a backend raised on, before giving any output: what it was given and what it raised."""

    method: str
    input: str  # the tensor arguments, shapes, dtypes and layouts
    feature: str  # what stands out about them, for "Pick a kernel"
    exception: str  # "ValueError: weights must be contiguous (at rmsnorm_kernels.py:99)"
    error: BaseException
    dim: int = 0  # x's last dim: a refusal at a target dim leaves the model's own shape unchecked
    size: int = 0  # x's elements

    @property
    def exception_type(self) -> str:
        return type(self.error).__name__


def argument_names(method: str) -> tuple[str, ...]:
    """The names of ``method``'s tensor arguments, as reports name them."""
    if method in ARGUMENT_NAMES:
        return ARGUMENT_NAMES[method]
    entry = ENTRY_POINTS.get(method)
    return (*entry.rows, "weight") if entry is not None else ()


def check_limits(backend: Any, method: str, args: Sequence[Any]) -> None:
    """Raise :class:`OutsideDeclaredLimits` if the backend declares limits and this call is outside them."""
    limits = getattr(backend, "limits", None)
    if limits is None or not limits.declared_any:
        return
    reason = limits.outside(argument_names(method), args)
    if reason:
        raise OutsideDeclaredLimits(f"{NOT_RUN_PREFIX} of {backend.name}: {method} with {reason}")


def check_dim_limits(backend: Any, method: str, dim: int) -> None:
    """:func:`check_limits` for a call on rows of ``dim`` elements whose inputs are made elsewhere (a fresh
    process's first calls): raise :class:`OutsideDeclaredLimits` if ``dim`` is outside the declared limits."""
    limits = getattr(backend, "limits", None)
    reason = limits.dim_outside(dim) if limits is not None and limits.declared_any else None
    if reason:
        raise OutsideDeclaredLimits(f"{NOT_RUN_PREFIX} of {backend.name}: {method} with {reason}")


def refusal(method: str, args: Sequence[Any], error: BaseException, guarded: GuardedCall | None = None,
            watched: Sequence[tuple[int, torch.Tensor, Any]] = ()) -> Refusal | None:
    """The refusal ``error`` stands for, or None if it is not one: a protocol breach, a device fault, running out
    of memory, an exit refused, a message that cannot be read (its ``str()`` raised: it names nothing), or a call
    that changed an input or wrote beside one before raising (``guarded``: its guard zones; ``watched``: its
    inputs' fingerprints, taken before the call)."""
    if not isinstance(error, Exception) or isinstance(error, BackendError | isolation.ExitRefused):
        return None
    if not exception_text.readable(error) or device_faults.out_of_memory(error) or device_faults.looks_poisoning(error):
        return None
    try:
        if guarded is not None and (guarded.breaches(None) or any(
                not torch.equal(z.view.view(z.bits_dtype), z.original.view(z.bits_dtype)) for z in guarded.zones)):
            return None
        if any(not torch.equal(isolation.fingerprint(t), then) for _, t, then in watched):
            return None
    except Exception:  # the device cannot be read: whatever this was, it was not a clean refusal
        return None
    names = argument_names(method)
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    first = (exception_text.message(error).strip().splitlines() or [""])[0]
    x = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return Refusal(method, describe_call(names, args), refused_feature(names, args),
                   f"{type(error).__name__}: {first}{where}", error,
                   dim=x.shape[-1] if x is not None and x.dim() else 0, size=x.numel() if x is not None else 0)


def record_refused(collector: Any, backend: str, device: str, dtype: str, rule_id: str, found: Refusal, *,
                   gating: bool, case: Any = None, replay: str = "") -> None:
    """The refusal as the report's "Refused inputs" table holds it."""
    batch = getattr(case, "batch", None)
    collector.add_refused({
        "backend": backend, "device": device, "dtype": dtype, "rule": rule_id, "entry": found.method,
        "input": found.input, "feature": found.feature, "exception": found.exception,
        "case": repr(case) if case is not None else found.input, "replay": replay,
        "size": batch.rows * batch.dim if batch is not None else found.size, "gating": gating, "count": 1})


def record(subject: Any, declared: tuple[str, ...], case: Any, found: Refusal) -> None:
    """Record the refusal for the report (the run's summary counts it); under --strict-interface, fail the test."""
    __tracebackhide__ = True
    rule_id = declared[0]
    replay = subject.replay_command(case, rule_id) if case is not None else ""
    backend_name, device_name = subject.record_as or (subject.backend.name, str(subject.device))
    record_refused(subject.collector, backend_name, device_name, subject.dtype_label, rule_id, found,
                   gating=subject.strict_interface, case=case, replay=replay)
    message = (f"{subject.backend.name} refused an input on {subject.device}, {subject.dtype_label}: "
               f"{found.method} with {found.input} raised {found.exception} (in a check of {rule_id}; a refused "
               f"input is neither passed nor failed, and gates only under --strict-interface)\n"
               f"  case: {case!r}\n  replay: {replay}")
    if subject.strict_interface:
        subject.on_failure(REFUSED, f"refused input: {found.method} with {found.input}: {found.exception}", replay)
        pytest.fail(f"refused input (fails under --strict-interface): {message}", pytrace=False)
    # Otherwise recorded only: the run's summary sums refusals up per backend and rule, not a pytest warning a case.


def skip_outside_limits(subject: Any, exc: OutsideDeclaredLimits) -> None:
    """A case outside the declared limits: listed under "Did not run" with the limit; the check is not run."""
    backend_name, device_name = subject.record_as or (subject.backend.name, str(subject.device))
    subject.collector.add_not_run(backend_name, device_name, str(exc), limits=subject.backend.limits.describe())
