"""Kernels in the shapes their authors ship them, turned into the backend protocol (``backend.RMSNormBackend``).

A function ``(x, weight, eps)`` or ``(x, weight)``, a class or instance with ``forward``, an ``nn.Module`` class
built per hidden size (Liger's, Hugging Face's, ``torch.nn.RMSNorm``), a ``torch.library`` op and a
``functools.partial`` of any of these. Declarations come from the object's attributes, the ``rmsnorm_backend``
decorator, or a ``[tool.rmsnorm_conformance.backends."SPEC"]`` table of ``pyproject.toml`` in the directory a run
starts in.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

# The attribute the decorator stores declarations in: functions, classes, partials and ops all take one.
DECLARATIONS_ATTR = "__rmsnorm_conformance__"
# What a declaration may set: the protocol's optional attributes, plus what only an adapter needs.
DECLARABLE: tuple[str, ...] = (
    "name", "dtypes", "dtype_pairs", "devices", "supports_backward", "rounding_class", "offset_dtype",
    "fused_add_in_place", "fused_add_fp32_residual", "forward_fp32",
    "layouts", "min_dim", "max_dim", "dim_multiple_of",  # the inputs it takes (running/limits.py)
    "fused_add", "forward_offset", "forward_unweighted",  # the variants, as functions of their own
    "eps",           # the eps a kernel without an eps argument always uses (default 1e-6, the contract's)
    "weight_param",  # an nn.Module's weight parameter (default "weight")
)
# The eps a kernel without an eps argument is assumed to use unless it declares one: the contract's default.
DEFAULT_FIXED_EPS = 1e-6
# Constructor arguments an nn.Module takes its eps by, as Liger, Hugging Face and torch name it.
EPS_NAMES: tuple[str, ...] = ("eps", "epsilon", "variance_epsilon", "norm_eps", "layer_norm_eps")
# Each accepted shape with a one-line example: the error for an object that fits none lists them all.
ACCEPTED_SHAPES: tuple[tuple[str, str], ...] = (
    ("a function (x, weight, eps)", "def rms_norm(x, weight, eps=1e-6): ..."),
    ("a function (x, weight) with its own eps", "@rmsnorm_backend(eps=1e-5)\ndef rms_norm(x, weight): ..."),
    ("a class or instance with forward(x, weight, eps)",
     "class Mine:\n    name = 'mine'\n    def forward(self, x, weight, eps=1e-6): ..."),
    ("an nn.Module class built per hidden size (its weight parameter set from the case's weight)",
     "class RMSNorm(nn.Module):\n    def __init__(self, hidden_size, eps=1e-6): ...\n    def forward(self, x): ..."),
    ("a torch.library op", "torch.ops.mylib.rms_norm, or --backend=my_module:mylib::rms_norm"),
    ("a functools.partial of any of these", "functools.partial(rms_norm, eps=1e-5)"),
    ("a zero-argument factory returning any of these", "def make_backend(): return Mine()"),
)


class ShapeError(TypeError):
    """An object that is none of the accepted shapes; the message lists them with an example of each."""


def rmsnorm_backend(obj: Any = None, **declarations: Any) -> Any:
    """Declare what a kernel supports where it has no attributes of its own, e.g.
    ``@rmsnorm_backend(dtypes=("bfloat16",), devices=("cuda",), eps=1e-5)`` on a function (dtypes as torch dtypes
    or their names). Usable bare (``@rmsnorm_backend``) or called on an object: ``rmsnorm_backend(op, name="x")``."""
    unknown = sorted(set(declarations) - set(DECLARABLE))
    if unknown:
        raise TypeError(f"rmsnorm_backend: unknown declaration(s) {', '.join(unknown)}; known: {', '.join(DECLARABLE)}")

    def mark(target: Any) -> Any:
        merged = {**getattr(target, DECLARATIONS_ATTR, {}), **declarations}
        try:
            setattr(target, DECLARATIONS_ATTR, merged)
        except (AttributeError, TypeError):
            raise TypeError(f"rmsnorm_backend: cannot store declarations on {target!r}; declare them in "
                            "pyproject.toml's [tool.rmsnorm_conformance.backends.\"SPEC\"] table instead") from None
        return target

    return mark if obj is None else mark(obj)


def shapes_help() -> str:
    """The accepted shapes, each with its example, as an error message's tail."""
    lines = ["accepted shapes:"]
    for what, example in ACCEPTED_SHAPES:
        lines.append(f"  - {what}, e.g.")
        lines += [f"      {line}" for line in example.splitlines()]
    return "\n".join(lines)


def _refuse(obj: Any, why: str) -> ShapeError:
    return ShapeError(f"{obj!r} is not an RMSNorm kernel the harness can call: {why}\n{shapes_help()}")


# --- declarations ------------------------------------------------------------------------------------------


def _dtype(value: Any, where: str) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    found = getattr(torch, str(value).removeprefix("torch."), None)
    if not isinstance(found, torch.dtype):
        raise TypeError(f"{where}: {value!r} is not a torch dtype name (float32, bfloat16, float16)")
    return found


def _normalised(declarations: dict[str, Any], where: str) -> dict[str, Any]:
    """Declarations with dtype names turned into torch dtypes, so that TOML's strings read as attributes do."""
    out = dict(declarations)
    unknown = sorted(set(out) - set(DECLARABLE))
    if unknown:
        raise TypeError(f"{where}: unknown declaration(s) {', '.join(unknown)}; known: {', '.join(DECLARABLE)}")
    if out.get("dtypes") is not None and not isinstance(out["dtypes"], str):
        out["dtypes"] = tuple(_dtype(d, f"{where} dtypes") for d in out["dtypes"])
    if out.get("dtype_pairs") is not None:
        out["dtype_pairs"] = [tuple(_dtype(d, f"{where} dtype_pairs") for d in pair) for pair in out["dtype_pairs"]]
    for key in ("devices", "layouts"):
        if isinstance(out.get(key), list):
            out[key] = tuple(out[key])
    return out


def table_declarations(spec: str, start: Path | None = None) -> dict[str, Any]:
    """``[tool.rmsnorm_conformance.backends."SPEC"]`` of ``pyproject.toml`` in ``start`` (default: the current
    directory), where a run's kernel has no attributes and its source is not the user's to decorate."""
    path = (start or Path.cwd()) / "pyproject.toml"
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot be read as TOML: {exc}") from None
    table = data.get("tool", {}).get("rmsnorm_conformance", {}).get("backends", {}).get(spec, {})
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [tool.rmsnorm_conformance.backends.{spec!r}] must be a table")
    return _normalised(table, f"{path} [tool.rmsnorm_conformance.backends.{spec!r}]")


# --- the adapted shapes --------------------------------------------------------------------------------------


class Adapted:
    """A shipped callable behind the protocol: ``name``, ``forward(x, weight, eps)`` and what was declared.

    ``shape`` says which shape it was found to be; ``fixed_eps`` is set for kernels that take no eps (cases are
    drawn with that eps, and any other eps is refused, since the kernel would silently ignore it)."""

    shape = "?"
    fixed_eps: float | None = None

    def __init__(self, name: str, declarations: dict[str, Any]) -> None:
        self.name = name
        for key, value in declarations.items():
            if key not in ("name", "eps", "weight_param"):
                setattr(self, key, value)

    def __repr__(self) -> str:
        return f"<{self.name}: {self.shape}>"

    def describe(self) -> str:
        """What the adapter does, for the report: which shape, and what it cannot hold the kernel to."""
        notes = [self.shape.split(",")[0]]
        if self.fixed_eps is not None:
            notes.append(f"eps fixed at {self.fixed_eps:g} (cases drawn at it)")
        return "; ".join(notes)

    def _eps_for_call(self, eps: float) -> None:
        if self.fixed_eps is not None and eps != self.fixed_eps:
            raise ValueError(f"eps={eps!r}: {self.name} takes no eps argument and always uses eps={self.fixed_eps!r} "
                             "(declare another with eps=...)")


class FunctionBackend(Adapted):
    """A function ``(x, weight, eps)``, or ``(x, weight)`` with an eps of its own."""

    def __init__(self, fn: Callable[..., Any], name: str, declarations: dict[str, Any], *, takes_eps: bool) -> None:
        super().__init__(name, declarations)
        self.fn = fn
        self.shape = "function (x, weight, eps)" if takes_eps else "function (x, weight), eps fixed"
        if not takes_eps:
            self.fixed_eps = float(declarations.get("eps", DEFAULT_FIXED_EPS))

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if self.fixed_eps is None:
            return self.fn(x, weight, eps)
        self._eps_for_call(eps)
        return self.fn(x, weight)


class OpBackend(FunctionBackend):
    """A ``torch.library`` op; ``op`` is its overload, for ``torch.library.opcheck`` (interface.opcheck)."""

    def __init__(self, op: Any, name: str, declarations: dict[str, Any]) -> None:
        arguments = op._schema.arguments
        super().__init__(op, name, declarations, takes_eps=len(arguments) >= 3)
        self.op = op
        self.shape = f"torch.library op {op._schema.name}" + ("" if len(arguments) >= 3 else ", eps fixed")


class ModuleBackend(Adapted):
    """An ``nn.Module`` class built once per (hidden size, eps, weight dtype, device) with the case's hidden size
    (and eps, where its constructor takes one), then called through ``torch.func.functional_call`` with the case's
    weight in place of its weight parameter: the weight is used as given (its layout, dtype and autograd), and dw
    reaches it. What such a kernel cannot be held to: ``forward_fp32`` and the variants (it has none), and eps
    where its constructor takes none (then eps is fixed, as for a function without eps)."""

    def __init__(self, factory: Callable[..., Any], name: str, declarations: dict[str, Any], *,
                 eps_name: str | None) -> None:
        super().__init__(name, declarations)
        self.factory = factory
        self.eps_name = eps_name
        self.weight_param = str(declarations.get("weight_param", "weight"))
        self.shape = "nn.Module class built per hidden size" + ("" if eps_name else ", eps fixed")
        if eps_name is None:
            self.fixed_eps = float(declarations.get("eps", DEFAULT_FIXED_EPS))
        self._modules: dict[tuple[int, float, torch.dtype, torch.device], torch.nn.Module] = {}

    def describe(self) -> str:
        return (super().describe() + f"; the case's weight replaces its {self.weight_param!r} parameter as given "
                "(torch.func.functional_call), a weight of another shape is refused by the adapter, not the module")

    def module(self, dim: int, eps: float, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
        key = (dim, eps, dtype, device)
        if key not in self._modules:
            # A constructor that draws random initial values must not move the caller's RNG (semantics.global_state).
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                built = self.factory(dim, **({self.eps_name: eps} if self.eps_name else {}))
            names = dict(built.named_parameters())
            if self.weight_param not in names:
                raise TypeError(f"{self.name}: the module built for hidden size {dim} has no parameter "
                                f"{self.weight_param!r} (it has {', '.join(names) or 'none'}); declare "
                                "weight_param=... to name the one the case's weight replaces")
            self._modules[key] = built.to(device=device)
        return self._modules[key]

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        self._eps_for_call(eps)
        dim = int(x.shape[-1]) if x.dim() else 0
        module = self.module(dim, eps, weight.dtype, x.device)
        # The shape guard is the adapter's: a module's weight has the hidden size it was built with, so a weight of
        # another shape never reaches a module in use; broadcasting it here would blame the module for the adapter.
        held = tuple(dict(module.named_parameters())[self.weight_param].shape)
        if tuple(weight.shape) != held:
            raise ValueError(f"{self.name}: weight of shape {tuple(weight.shape)} does not fit x of shape "
                             f"{tuple(x.shape)}: the module built for hidden size {dim} holds a weight of shape {held}")
        return torch.func.functional_call(module, {self.weight_param: weight}, (x,))


# --- recognising a shape ---------------------------------------------------------------------------------------


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def _positional(sig: inspect.Signature) -> list[inspect.Parameter]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p for p in sig.parameters.values() if p.kind in kinds]


def _required(sig: inspect.Signature) -> list[inspect.Parameter]:
    return [p for p in _positional(sig) if p.default is inspect.Parameter.empty]


def _takes_varargs(sig: inspect.Signature) -> bool:
    return any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in sig.parameters.values())


def _op(obj: Any) -> Any | None:
    """The overload of a torch.library op (``torch.ops.ns.name`` or ``.default``), else None."""
    if isinstance(obj, torch._ops.OpOverload):
        return obj
    if isinstance(obj, torch._ops.OpOverloadPacket):
        return obj.default
    return None


def resolve_op_name(qualified: str) -> Any:
    """``"ns::name"`` (or ``"ns::name.overload"``) as a registered torch.library op; errors say how to register."""
    namespace, _, rest = qualified.partition("::")
    name, _, overload = rest.partition(".")
    if not namespace or not name:
        raise ValueError(f"{qualified!r} is not an op name: write 'namespace::name'")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        raise ImportError(f"no torch.library op {qualified!r} is registered; import the module that defines it "
                          "(--backend=my_module:namespace::name imports my_module first)") from None


def _is_module_class(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.nn.Module)


def _forward_takes_weight(cls: Any) -> bool:
    """Does ``cls.forward`` take (x, weight, ...) after self, as the protocol's does?"""
    sig = _signature(cls.forward)
    if sig is None:
        return True
    return _takes_varargs(sig) or len(_positional(sig)) >= 3


def _eps_name(factory: Any) -> str | None:
    sig = _signature(factory)
    if sig is None:
        return None
    return next((p.name for p in sig.parameters.values() if p.name in EPS_NAMES), None)


def _name_of(obj: Any) -> str:
    target = obj.func if isinstance(obj, functools.partial) else obj
    op = _op(target)
    if op is not None:
        return op._schema.name.replace("::", ".")
    return getattr(target, "__name__", None) or type(target).__name__


def adapt(obj: Any, *, spec: str = "", start: Path | None = None) -> Any:
    """An object with the backend protocol for ``obj``, in whichever accepted shape it ships; ``spec`` keys the
    pyproject table of declarations. An object that fits no shape raises ShapeError listing the shapes."""
    declared = _normalised(getattr(obj, DECLARATIONS_ATTR, {}), f"{_name_of(obj)}'s declarations")
    declared.update(table_declarations(spec, start) if spec else {})
    if isinstance(obj, functools.partial) and ":" in spec and "name" not in declared:
        # Partials of one function differ by what they bind: each is called by the name the user gave it.
        declared["name"] = spec.rsplit(":", 1)[1].rsplit(".", 1)[-1]
    return _adapt(obj, declared, spec, depth=0)


def _bound_eps(obj: Any) -> float | None:
    """The eps a functools.partial binds (``partial(rms_norm, eps=1e-5)``): the kernel as configured uses it."""
    if not isinstance(obj, functools.partial):
        return None
    value = next((v for k, v in obj.keywords.items() if k in EPS_NAMES), None)
    return None if value is None else float(value)


def _adapt(obj: Any, declared: dict[str, Any], spec: str, *, depth: int) -> Any:
    if isinstance(obj, str) and "::" in obj:  # an op by name, e.g. an attribute OP = "mylib::rms_norm"
        obj = resolve_op_name(obj)
    name = str(declared.get("name") or _name_of(obj))
    bound_eps = _bound_eps(obj)
    if bound_eps is not None:
        declared = {"eps": bound_eps, **declared}
    op = _op(obj)
    if op is not None:
        return OpBackend(op, name, declared)
    target = obj.func if isinstance(obj, functools.partial) else obj
    if _is_module_class(target) and not _forward_takes_weight(target):
        return _adapt_module_class(obj, name, declared, bound_eps)
    if isinstance(obj, torch.nn.Module) and not _forward_takes_weight(type(obj)):
        raise _refuse(obj, f"it is an nn.Module instance built for one hidden size; give its class "
                           f"({type(obj).__name__}, or functools.partial({type(obj).__name__}, ...) with its "
                           "settings) so the harness builds one per hidden size")
    if isinstance(obj, type):
        return _with_declarations(_protocol_instance(obj), declared)
    if callable(getattr(obj, "forward", None)):
        return _with_declarations(obj, declared)
    return _adapt_function(obj, name, declared, spec, bound_eps, depth=depth)


def _adapt_module_class(obj: Any, name: str, declared: dict[str, Any], bound_eps: float | None) -> Any:
    """An nn.Module class (or a partial of one) whose forward takes x alone: built per hidden size, which its
    constructor must therefore take."""
    sig = _signature(obj)
    if sig is not None and not _takes_varargs(sig) and not _positional(sig):
        raise _refuse(obj, "its constructor takes no hidden size, so it cannot be built per case")
    return ModuleBackend(obj, name, declared, eps_name=None if bound_eps is not None else _eps_name(obj))


def _protocol_instance(cls: type) -> Any:
    """The one instance of a class whose forward takes (x, weight, eps): its constructor must need nothing."""
    if not callable(getattr(cls, "forward", None)):
        raise _refuse(cls, "it is a class without a forward method")
    sig = _signature(cls)
    if sig is not None and _required(sig):
        needs = ", ".join(p.name for p in _required(sig))
        raise _refuse(cls, f"its constructor needs {needs}, and its forward takes (x, weight, eps): either give "
                           "it a no-argument constructor, or make it an nn.Module whose forward takes x alone")
    return cls()


def _adapt_function(obj: Any, name: str, declared: dict[str, Any], spec: str, bound_eps: float | None, *,
                    depth: int) -> Any:
    """A callable without forward, by its signature: (x, weight, eps), eps by keyword, (x, weight), or a
    zero-argument factory of any shape, called once (not a factory of factories)."""
    if not callable(obj):
        raise _refuse(obj, f"it is a {type(obj).__name__}, not callable")
    sig = _signature(obj)
    if sig is None:  # a builtin whose signature Python cannot read: called as (x, weight, eps)
        return FunctionBackend(obj, name, declared, takes_eps=True)
    positional, required = _positional(sig), _required(sig)
    if bound_eps is not None:
        return FunctionBackend(obj, name, declared, takes_eps=False)
    if _takes_varargs(sig) or len(positional) >= 3 or any(p.name in EPS_NAMES for p in sig.parameters.values()):
        if len(required) > 3:
            raise _refuse(obj, f"it needs {len(required)} arguments ({', '.join(p.name for p in required)})")
        return _EpsByName(obj, name, declared, sig)
    if len(positional) == 2:
        return FunctionBackend(obj, name, declared, takes_eps=False)
    if not required and depth == 0:  # a zero-argument factory
        return _adapt(obj(), declared, spec, depth=1)
    raise _refuse(obj, f"its signature {sig} takes neither (x, weight, eps) nor (x, weight)")


class _EpsByName(FunctionBackend):
    """A function whose eps is a keyword-only argument (``def f(x, weight, *, eps)``) is called with it by name."""

    def __init__(self, fn: Callable[..., Any], name: str, declared: dict[str, Any], sig: inspect.Signature) -> None:
        super().__init__(fn, name, declared, takes_eps=True)
        positional = _positional(sig)
        self.eps_keyword = None if len(positional) >= 3 or _takes_varargs(sig) else next(
            p.name for p in sig.parameters.values() if p.name in EPS_NAMES)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if self.eps_keyword:
            return self.fn(x, weight, **{self.eps_keyword: eps})
        return self.fn(x, weight, eps)


def _with_declarations(impl: Any, declared: dict[str, Any]) -> Any:
    """A protocol object as it is, or, where declarations were given for it, wrapped so that they apply."""
    if not declared:
        return impl
    declared = {"name": getattr(impl, "name", None) or type(impl).__name__, **declared}
    return _Declared(impl, declared)


class _Declared:
    """A protocol object whose declarations come from the decorator or pyproject: attributes read through, then
    the declared ones."""

    def __init__(self, impl: Any, declared: dict[str, Any]) -> None:
        self._impl = impl
        self._declared = {k: v for k, v in declared.items() if k not in ("eps", "weight_param")}

    def __getattr__(self, attr: str) -> Any:
        if attr in ("_impl", "_declared"):
            raise AttributeError(attr)
        if attr in self._declared:
            return self._declared[attr]
        return getattr(self._impl, attr)


def adapted_notes(backends: Iterable[Any]) -> str:
    """'name: what the adapter did' for each backend that is an adapted shape, for the report's environment."""
    return "; ".join(f"{b.name}: {b.impl.describe()}" for b in backends if isinstance(b.impl, Adapted))
