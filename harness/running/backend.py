"""What a backend is: the minimal protocol, and an adapter that fills in every optional part with a default.

A third party writes only ``name`` and ``forward(x, weight, eps=1e-6)``; the adapter answers the harness's
other questions (which devices, dtypes and dtype pairs, which variants, is there a forward_fp32 or a backward,
why can't it run here). Declarations are checked when the backend loads: a malformed one is a usage error
that names the attribute, not a test failure later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import torch

from ...contract import (
    DTYPE_PAIRS,
    DTYPES,
    FP8_ROUNDING_CLASSES,
    FP8_VARIANTS,
    OFFSET_DTYPES,
    ROUNDING_CLASSES,
    VARIANTS,
)
from .limits import InputLimits

ALL_DTYPES: tuple[torch.dtype, ...] = tuple(getattr(torch, name) for name in DTYPES)
CONTRACT_PAIRS: tuple[tuple[torch.dtype, torch.dtype], ...] = tuple(
    (getattr(torch, x), getattr(torch, w)) for x, w in DTYPE_PAIRS)
# The entry points whose output is rounded to x's dtype, hence a rounding class a backend may declare (with no
# weight, the classes that round once coincide, and the one that rounds 1/rms first stands apart).
ROUNDED_ENTRY_POINTS: tuple[str, ...] = ("forward", "fused_add", "forward_offset", "forward_unweighted")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@runtime_checkable
class RMSNormBackend(Protocol):
    """The minimal protocol. Optional extras, each read with a default by :class:`Backend`:

    - ``forward_fp32(x, weight, eps)``: output in float32 (default: absent, its rule is skipped);
    - ``devices``: device types it runs on, e.g. ``("cuda",)`` (default: ``("cpu", "cuda")``; ``None``: any);
    - ``dtypes``: torch dtypes it accepts (default: float32, bfloat16, float16);
    - ``unavailable_reason(device) -> str | None``: why it cannot run on ``device`` (default: never);
    - ``supports_backward``: bool (default: probed, is the output of a grad-requiring input differentiable;
      False is probed all the same: an output that carries a gradient is held to the gradient rules);
    - ``dtype_pairs``: the (x dtype, weight dtype) pairs it takes, among the contract's (default: the weight in
      x's dtype for each of ``dtypes``);
    - ``fused_add(x, residual, weight, eps) -> (y, residual_out)``, ``forward_offset(x, weight, eps)``,
      ``forward_unweighted(x, eps)``: the variants (default: absent, their rules are skipped);
    - ``fused_add_in_place``: bool (default False): fused_add writes y into x and residual_out into residual,
      and returns nothing or the tensors it wrote, ``(x, residual)``;
    - ``fused_add_fp32_residual``: bool (default False): fused_add also takes an fp32 residual with 16-bit x;
    - ``offset_dtype``: ``"float32"`` (default) or ``"weight"``: where forward_offset forms 1 + weight;
    - ``rounding_class``: a class of the contract's ``ROUNDING_CLASSES``, or a mapping from entry point
      (forward, fused_add, forward_offset, forward_unweighted) to one (default: none declared; the report still
      says which class the bits match);
    - ``forward_fp8_static(x, weight, eps, scale) -> q``, ``forward_fp8_dynamic(x, weight, eps) -> (q, scale)``,
      ``fused_add_fp8_static(x, residual, weight, eps, scale) -> (q, residual_out)``,
      ``fused_add_fp8_dynamic(x, residual, weight, eps) -> (q, scale, residual_out)``: RMSNorm fused with fp8
      (float8_e4m3fn) quantization (default: absent, their rules are skipped); the fused adds are out of place;
    - ``fp8_rounding_class``: a class of the contract's ``FP8_ROUNDING_CLASSES``, or a mapping from fp8 entry point
      to one (default: none declared);
    - ``layouts``, ``min_dim``, ``max_dim``, ``dim_multiple_of``: the inputs it takes (running/limits.py; default:
      the contract's whole domain); a case outside them is not run, with the limit as the reason;
    - ``prepare(device, dims, part, parts)``: get ready for calls at ``dims`` on ``device`` (compile, autotune), the
      ``part``-th of ``parts`` shares of that work; called under ``-n`` in processes of their own while the workers
      start (running/warm_up.py), never in a worker; what it does decides nothing (default: absent).
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
        # What importing and building it changed of torch's global state, put back since (registry.load_backend).
        self.import_changes: list[str] = []
        self._backward: bool | None = getattr(impl, "supports_backward", None)
        self._probed: dict[tuple[str, str], bool] = {}
        self._probe_left = ""  # what a backward probe left that the process could not put back (then every ask fails)
        validate_declarations(impl, self.name)
        self.dtype_pairs: tuple[tuple[torch.dtype, torch.dtype], ...] = self._declared_pairs()
        self.fused_add_in_place = self._declared_flag("fused_add_in_place")
        self.fused_add_fp32_residual = self._declared_flag("fused_add_fp32_residual")
        self.offset_dtype: str = self._declared_offset_dtype()
        self.rounding_classes: dict[str, str] = self._declared_rounding_classes()
        self.fp8_rounding_classes: dict[str, str] = self._declared_fp8_rounding_classes()
        try:
            self.limits = InputLimits.declared(impl, self.name)
        except ValueError as exc:
            raise DeclarationError(str(exc)) from None

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
        """x dtypes: as declared, else those of the declared dtype pairs, else all the contract's."""
        declared: Iterable[torch.dtype] | None = getattr(self.impl, "dtypes", None)
        if not declared:
            pairs = getattr(self.impl, "dtype_pairs", None)
            declared = [x for x, _ in self.dtype_pairs] if pairs else ALL_DTYPES
        return tuple(d for d in ALL_DTYPES if d in tuple(declared))

    def weight_dtypes(self, x_dtype: torch.dtype) -> tuple[torch.dtype, ...]:
        """The weight dtypes declared with ``x_dtype``, the primary one (x's own, if declared) first."""
        found = [w for x, w in self.dtype_pairs if x == x_dtype]
        return tuple(sorted(found, key=lambda w: w != x_dtype))

    # --- declarations, checked once ---------------------------------------------------------------------

    def _bad(self, attribute: str, value: Any, want: str) -> DeclarationError:
        return DeclarationError(f"backend {self.name!r}: {attribute}={value!r} is malformed: {want}")

    def _declared_pairs(self) -> tuple[tuple[torch.dtype, torch.dtype], ...]:
        declared = getattr(self.impl, "dtype_pairs", None)
        if declared is None:
            return tuple((d, d) for d in self.dtypes)
        want = ("an iterable of (x dtype, weight dtype) pairs of torch dtypes among the contract's: "
                + ", ".join(f"({x}, {w})" for x, w in DTYPE_PAIRS))
        try:
            pairs = [tuple(p) for p in declared]
        except TypeError:
            raise self._bad("dtype_pairs", declared, want) from None
        if not pairs or any(len(p) != 2 or p not in CONTRACT_PAIRS for p in pairs):
            raise self._bad("dtype_pairs", declared, want)
        # A subclass that narrows ``dtypes`` narrows the pairs it inherits: pairs of other x dtypes do not apply.
        listed = getattr(self.impl, "dtypes", None)
        if listed:
            pairs = [p for p in pairs if p[0] in tuple(listed)]
        return tuple(p for p in CONTRACT_PAIRS if p in pairs)

    def _declared_flag(self, attribute: str) -> bool:
        value = getattr(self.impl, attribute, False)
        if not isinstance(value, bool):
            raise self._bad(attribute, value, "True or False")
        return value

    def _declared_offset_dtype(self) -> str:
        value = getattr(self.impl, "offset_dtype", "float32")
        if value not in OFFSET_DTYPES:
            raise self._bad("offset_dtype", value, " or ".join(repr(v) for v in OFFSET_DTYPES))
        return value

    def _declared_rounding_classes(self) -> dict[str, str]:
        return self._declared_classes("rounding_class", ROUNDING_CLASSES, ROUNDED_ENTRY_POINTS, "entry points")

    def _declared_fp8_rounding_classes(self) -> dict[str, str]:
        return self._declared_classes("fp8_rounding_class", FP8_ROUNDING_CLASSES, FP8_VARIANTS, "fp8 entry points")

    def _declared_classes(self, attribute: str, classes: Any, entries: Any, what: str) -> dict[str, str]:
        """A declared rounding class: one of ``classes`` for every entry point, or a mapping from some of
        ``entries`` to one; anything else is a declaration error naming the attribute."""
        value = getattr(self.impl, attribute, None)
        if value is None:
            return {}
        want = f"one of {', '.join(classes)}, or a mapping from {what} ({', '.join(entries)}) to one"
        claims = dict(value) if isinstance(value, Mapping) else dict.fromkeys(entries, value)
        if not claims or any(k not in entries or v not in classes for k, v in claims.items()):
            raise self._bad(attribute, value, want)
        return claims

    # --- the variants -------------------------------------------------------------------------------

    def offers(self, variant: str) -> bool:
        """Does the backend have this variant (a name of the contract's ``VARIANTS``)?"""
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
        return callable(getattr(self.impl, variant, None))

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(y, residual_out). An in-place backend writes into copies of x and residual laid out as they are
        (same strides and storage offset), and the copies are returned: the caller's tensors stay as they were."""
        if self.fused_add_in_place:
            x_io, residual_io = same_layout_copy(x), same_layout_copy(residual)
            self.impl.fused_add(x_io, residual_io, weight, eps)
            return x_io, residual_io
        out = self.impl.fused_add(x, residual, weight, eps)
        if not (isinstance(out, tuple | list) and len(out) == 2):
            raise BackendError(f"{self.name}.fused_add returned {type(out).__name__}, not (y, residual_out); a backend "
                            "that writes into x and residual declares fused_add_in_place = True")
        return out[0], out[1]

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return self.impl.forward_offset(x, weight, eps)

    def forward_unweighted(self, x: torch.Tensor, eps: float) -> torch.Tensor:
        return self.impl.forward_unweighted(x, eps)

    def forward_fp8_static(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                           scale: torch.Tensor) -> torch.Tensor:
        return self.impl.forward_fp8_static(x, weight, eps, scale)

    def forward_fp8_dynamic(self, x: torch.Tensor, weight: torch.Tensor,
                            eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        return self._outputs("forward_fp8_dynamic", ("q", "scale"), self.impl.forward_fp8_dynamic(x, weight, eps))

    def fused_add_fp8_static(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                             scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._outputs("fused_add_fp8_static", ("q", "residual_out"),
                             self.impl.fused_add_fp8_static(x, residual, weight, eps, scale))

    def fused_add_fp8_dynamic(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                              eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self._outputs("fused_add_fp8_dynamic", ("q", "scale", "residual_out"),
                             self.impl.fused_add_fp8_dynamic(x, residual, weight, eps))

    def _outputs(self, method: str, names: tuple[str, ...], out: Any) -> tuple:
        """``out`` as the tuple of ``names`` the method promises, or a BackendError saying what came instead."""
        if not (isinstance(out, tuple | list) and len(out) == len(names)):
            raise BackendError(f"{self.name}.{method} returned {type(out).__name__}, not ({', '.join(names)})")
        return tuple(out)

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

    def prepare(self, device: torch.device, dims: list[int], part: int = 0, parts: int = 1) -> bool:
        """The backend's own preparation for calls at ``dims`` (its ``prepare``), the ``part``-th of ``parts``
        shares; False where it has none. Only the controller's warm-up calls it: its outcome decides nothing."""
        hook = getattr(self.impl, "prepare", None)
        if not callable(hook):
            return False
        hook(device, dims, part, parts)
        return True

    def supports_backward(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> bool:
        """Declared, or probed once per (device, dtype) in that very dtype: does a grad-requiring input give a
        differentiable output? (A bf16-only backend must not look backward-less because an fp32 probe raised.)"""
        if self._backward:
            return True
        if self._probe_left:  # asked again (Hypothesis runs a failing example again): the same failure, never a skip
            raise BackendError(self._probe_left)
        key = (str(device), str(dtype))
        if key not in self._probed:
            from . import device_faults
            from .isolation import ExitRefused, global_state, no_exit, restore

            state = global_state()  # a probe must leave no trace, whatever the backend does to torch's state
            try:
                # The weight in the first dtype declared with x's (x's own, unless it takes only an fp32 weight).
                w_dtype = (self.weight_dtypes(dtype) or (dtype,))[0]
                with torch.enable_grad(), no_exit(self.name):
                    x = torch.ones(2, 8, device=device, dtype=dtype, requires_grad=True)
                    w = torch.ones(8, device=device, dtype=w_dtype, requires_grad=True)
                    # A kernel without an eps argument is probed at the eps it uses (running/adapters.py).
                    y = self.forward(x, w, getattr(self.impl, "fixed_eps", None) or 1e-6)
                self._probed[key] = bool(isinstance(y, torch.Tensor) and y.requires_grad and y.grad_fn is not None)
            except ExitRefused:
                raise  # it skipped or exited its probe: a failure of the backend, not a backend without a backward
            except Exception:
                self._probed[key] = False
            finally:
                restore(state)
                kept = device_faults.lost_where_kept(state, f"{self.name}'s backward probe", self.name, str(device))
                if kept:  # the backends probed after it here would feel it
                    self._probe_left = (f"{self.name}'s backward probe left {'; '.join(kept)}, which the process "
                                        "cannot put back: this process ends after this test")
                    raise BackendError(self._probe_left)
        # Declared without a backward, it is still held to the gradient rules where its output carries a gradient:
        # a training loop would use that grad_fn whatever the declaration says.
        return self._probed[key]


def plain_tensors(name: str, method: str, out: Any) -> tuple[torch.Tensor, ...]:
    """The tensors a call returned (one, or a tuple), each a plain ``torch.Tensor``, else a BackendError naming what
    came instead. A subclass is refused too: its ``__torch_function__`` can redefine every comparison the checks
    make (``torch.equal`` true, ``sub`` zero), so that its bits are never really read."""
    tensors = out if isinstance(out, tuple) else (out,)  # a list is not an output
    for t in tensors:
        if type(t) is torch.Tensor:
            continue
        if isinstance(t, torch.Tensor):
            raise BackendError(f"{name}.{method} returned a {type(t).__module__}.{type(t).__name__}, a subclass of "
                               "torch.Tensor: outputs are held as plain tensors, whose comparisons no subclass can "
                               "redefine; return the plain tensor (t.as_subclass(torch.Tensor))")
        raise BackendError(f"{name}.{method} returned {type(t).__name__}, not a torch.Tensor")
    return tensors


class BackendError(RuntimeError):
    """A backend broke the protocol (its availability probe raised, it returned something that is not a tensor):
    a failure of that backend, never a skip."""


class DeclarationError(ValueError):
    """A backend declares its capabilities in a form the harness cannot read; the message names the attribute."""


def _check_name(impl: Any, name: str) -> None:
    """A name is one line of printable text: it heads the report's rows and the terminal's, and a line break in it
    had put the rest of it at the start of a line of the log, where GitHub Actions reads ``::error::...`` (or
    ``::stop-commands::``, which silences the run's own annotations) as a command; so does a name that starts
    with ``::``, at the start of its table row."""
    if not isinstance(getattr(impl, "name", name), str):
        raise DeclarationError(f"backend {name!r}: 'name' must be a string, got {impl.name!r}")
    bad = sorted({c for c in name if not c.isprintable()})
    if bad:
        raise DeclarationError(f"backend {name!r}: 'name' must be one line of printable characters; it has "
                               f"{', '.join(repr(c) for c in bad)}")
    if name.startswith("::"):
        raise DeclarationError(f"backend {name!r}: 'name' must not start with '::' (a line of the log that does is "
                               "a command to GitHub Actions)")


def _check_dtypes(impl: Any, name: str) -> None:
    """A sequence of torch dtypes, at least one of them the contract's."""
    if not hasattr(impl, "dtypes") or impl.dtypes is None:
        return
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


def _check_devices(impl: Any, name: str) -> None:
    if not hasattr(impl, "devices") or impl.devices is None:
        return
    declared = impl.devices
    items = (declared,) if isinstance(declared, str) else declared
    if not isinstance(items, Iterable) or not all(isinstance(d, str) for d in items):
        raise DeclarationError(f"backend {name!r}: 'devices' must be a device type string or a sequence of them "
                               f"(e.g. ('cuda',)), got {declared!r}")


def _check_supports_backward(impl: Any, name: str) -> None:
    backward = getattr(impl, "supports_backward", None)
    if backward is not None and not isinstance(backward, bool):
        raise DeclarationError(f"backend {name!r}: 'supports_backward' must be True, False or absent, "
                               f"got {backward!r}")


def _check_methods(impl: Any, name: str) -> None:
    for method in ("forward_fp32", "unavailable_reason", "prepare"):
        if hasattr(impl, method) and not callable(getattr(impl, method)):
            raise DeclarationError(f"backend {name!r}: '{method}' must be a method")
    for method in VARIANTS:  # None says "not offered", as absence does
        if getattr(impl, method, None) is not None and not callable(getattr(impl, method)):
            raise DeclarationError(f"backend {name!r}: '{method}' must be a method or None")


# Checked in this order: the first attribute in a form the harness cannot read is the one the error names.
_DECLARATION_CHECKS: tuple[Callable[[Any, str], None], ...] = (
    _check_name, _check_dtypes, _check_devices, _check_supports_backward, _check_methods,
)


def validate_declarations(impl: Any, name: str) -> None:
    """Check the optional capability attributes when the backend loads, so a typo is an error, not a silent skip."""
    for check in _DECLARATION_CHECKS:
        check(impl, name)


def same_layout_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its sizes, strides and storage offset: the whole storage is copied, so a view's
    neighbours and its alignment within the allocation come along."""
    return t.new_empty(0).set_(t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())
