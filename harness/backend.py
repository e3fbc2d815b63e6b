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
            try:
                reason = hook(device)
            except Exception as exc:  # a broken availability probe is itself a reason not to run
                return f"{self.name}: availability check raised {type(exc).__name__}: {exc}"
            if reason:
                return str(reason)
        return None

    def supports_backward(self, device: torch.device | str) -> bool:
        """Declared, or probed once: does a grad-requiring input give a differentiable output?"""
        if self._backward is None:
            x = torch.ones(2, 8, device=device, requires_grad=True)
            w = torch.ones(8, device=device, requires_grad=True)
            try:
                y = self.forward(x, w, 1e-6)
                self._backward = bool(y.requires_grad and y.grad_fn is not None)
            except Exception:
                self._backward = False
        return self._backward
