"""What a backend is: the minimal protocol, and an adapter that fills in every optional part with a default.

A third party writes only ``name`` and ``forward(x, weight, eps=1e-6)``; the adapter answers the harness's
other questions (which devices and dtypes, is there a forward_fp32 or a backward, why can't it run here).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import torch

from rmsnorm_conformance.contract import DTYPES

ALL_DTYPES: tuple[torch.dtype, ...] = tuple(getattr(torch, name) for name in DTYPES)


@runtime_checkable
class RMSNormBackend(Protocol):
    """The minimal protocol. Optional extras, each read with a default by :class:`Backend`:

    - ``forward_fp32(x, weight, eps)``: output in float32 (default: absent, its rule is skipped);
    - ``devices``: device types it runs on, e.g. ``("cuda",)`` (default: ``("cpu", "cuda")``; ``None``: any);
    - ``dtypes``: torch dtypes it accepts (default: float32, bfloat16, float16);
    - ``unavailable_reason(device) -> str | None``: why it cannot run on ``device`` (default: never);
    - ``supports_backward``: bool (default: probed, is the output of a grad-requiring input differentiable).
    """

    name: str

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor: ...


class Backend:
    """A backend under test, as the harness sees it: the user's object plus defaults for what it left out."""

    def __init__(self, impl: Any, *, spec: str | None = None) -> None:
        if not callable(getattr(impl, "forward", None)):
            raise TypeError(
                f"{impl!r} is not an RMSNorm backend: it needs a forward(x, weight, eps=1e-6) method"
            )
        self.impl = impl
        self.name: str = str(getattr(impl, "name", None) or type(impl).__name__)
        self.spec = spec or self.name
        self._backward: bool | None = getattr(impl, "supports_backward", None)
        self._probed: dict[tuple[str, str], bool] = {}
        validate_declarations(impl, self.name)

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return self.impl.forward(x, weight, eps)

    @property
    def has_forward_fp32(self) -> bool:
        return callable(getattr(self.impl, "forward_fp32", None))

    def forward_fp32(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return self.impl.forward_fp32(x, weight, eps)

    @property
    def device_types(self) -> tuple[str, ...] | None:
        declared = getattr(self.impl, "devices", ("cpu", "cuda"))
        if declared is None:
            return None
        if isinstance(declared, str):
            declared = (declared,)
        return tuple(str(d) for d in declared)

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        declared: Iterable[torch.dtype] = getattr(self.impl, "dtypes", ALL_DTYPES) or ALL_DTYPES
        return tuple(d for d in ALL_DTYPES if d in tuple(declared))

    def unavailable_reason(self, device: torch.device | str) -> str | None:
        """None if the backend can run on ``device``, else a sentence saying why not."""
        device = torch.device(device)
        types = self.device_types
        if types is not None and device.type not in types:
            return f"{self.name} runs on {', '.join(types)}, not {device.type}"
        hook = getattr(self.impl, "unavailable_reason", None)
        if callable(hook):
            # A probe that raises is an error of the backend (BackendError), never a quiet skip.
            try:
                reason = hook(device)
            except Exception as exc:
                raise BackendError(f"{self.name}.unavailable_reason({device}) raised "
                                   f"{type(exc).__name__}: {exc}") from exc
            if reason:
                return str(reason)
        return None

    def supports_backward(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> bool:
        """Declared, or probed once per (device, dtype) in that very dtype: does a grad-requiring input give a
        differentiable output? (A bf16-only backend must not look backward-less because an fp32 probe raised.)"""
        if self._backward is not None:
            return self._backward
        key = (str(device), str(dtype))
        if key not in self._probed:
            from .isolation import global_state, restore

            state = global_state()  # a probe must leave no trace, whatever the backend does to torch's state
            try:
                with torch.enable_grad():
                    x = torch.ones(2, 8, device=device, dtype=dtype, requires_grad=True)
                    w = torch.ones(8, device=device, dtype=dtype, requires_grad=True)
                    y = self.forward(x, w, 1e-6)
                self._probed[key] = bool(isinstance(y, torch.Tensor) and y.requires_grad and y.grad_fn is not None)
            except Exception:
                self._probed[key] = False
            finally:
                restore(state)
        return self._probed[key]


class BackendError(RuntimeError):
    """A backend broke the protocol (its availability probe raised, it returned something that is not a tensor):
    a failure of that backend, never a skip."""


class DeclarationError(ValueError):
    """A backend declares its capabilities in a form the harness cannot read; the message names the attribute."""


def validate_declarations(impl: Any, name: str) -> None:
    """Check the optional capability attributes when the backend loads, so a typo is an error, not a silent skip."""
    if not isinstance(getattr(impl, "name", name), str):
        raise DeclarationError(f"backend {name!r}: 'name' must be a string, got {impl.name!r}")
    if hasattr(impl, "dtypes") and impl.dtypes is not None:
        declared = impl.dtypes
        if isinstance(declared, (str, torch.dtype)) or not isinstance(declared, Iterable):
            raise DeclarationError(f"backend {name!r}: 'dtypes' must be a sequence of torch dtypes, got {declared!r}")
        bad = [d for d in declared if not isinstance(d, torch.dtype)]
        if bad:
            raise DeclarationError(f"backend {name!r}: 'dtypes' must hold torch dtypes (e.g. torch.bfloat16), "
                                   f"got {bad!r}")
        if not any(d in ALL_DTYPES for d in declared):
            raise DeclarationError(f"backend {name!r}: 'dtypes' {list(declared)!r} holds none of the contract's "
                                   f"dtypes ({', '.join(DTYPES)})")
    if hasattr(impl, "devices") and impl.devices is not None:
        declared = impl.devices
        items = (declared,) if isinstance(declared, str) else declared
        if not isinstance(items, Iterable) or not all(isinstance(d, str) for d in items):
            raise DeclarationError(f"backend {name!r}: 'devices' must be a device type string or a sequence of them "
                                   f"(e.g. ('cuda',)), got {declared!r}")
    backward = getattr(impl, "supports_backward", None)
    if backward is not None and not isinstance(backward, bool):
        raise DeclarationError(f"backend {name!r}: 'supports_backward' must be True, False or absent, "
                               f"got {backward!r}")
    for method in ("forward_fp32", "unavailable_reason"):
        if hasattr(impl, method) and not callable(getattr(impl, method)):
            raise DeclarationError(f"backend {name!r}: '{method}' must be a method")
