"""Where backends come from: the ``OpBackend`` enum of import paths, the ``KernelRegistry`` that dispatches
``get_op("rms_norm", device=...)`` by per-device priority, and the resolution of ``--backend`` specs.

Third-party backends join without editing this file: through the ``rmsnorm_conformance.backends``
entry-point group, or as ``module.path:attr`` naming any shape ``adapters`` accepts (a backend class, factory or
instance, a function, an nn.Module class, a torch.library op, a partial), or ``module.path:namespace::name``.
"""

from __future__ import annotations

import enum
import functools
import importlib
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a backend is loaded: the plugin's option help lists names without torch
    import torch

    from .backend import Backend

ENTRY_POINT_GROUP = "rmsnorm_conformance.backends"


class OpBackend(enum.Enum):
    """Every backend this project ships, as ``"module:attr"`` import paths."""

    PYTORCH_NATIVE_RMS_NORM = "rmsnorm_conformance.backends.native:NativeRMSNormOp"
    TRITON_RMS_NORM = "rmsnorm_conformance.backends.triton_rmsnorm:TritonRMSNormOp"
    CUDA_RMS_NORM = "rmsnorm_conformance.backends.cuda_rmsnorm:CudaRMSNormOp"

    @property
    def short_name(self) -> str:
        return _SHORT_NAMES[self]


_SHORT_NAMES: dict[OpBackend, str] = {
    OpBackend.PYTORCH_NATIVE_RMS_NORM: "native",
    OpBackend.TRITON_RMS_NORM: "triton",
    OpBackend.CUDA_RMS_NORM: "cuda",
}
BUILTIN_BACKENDS: dict[str, OpBackend] = {short: op for op, short in _SHORT_NAMES.items()}


def import_object(path: str) -> Any:
    """Import ``module.path:attr`` (``attr`` may be dotted); errors name the path."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"backend path {path!r} must look like 'module.path:attr'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"cannot import module {module_name!r} for backend {path!r}: {exc}") from exc
    if "::" in attr:  # module:namespace::name, a torch.library op that importing the module registers
        from .adapters import resolve_op_name

        return resolve_op_name(attr)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"module {module_name!r} has no attribute {attr!r} (backend {path!r})") from None
    return obj


def instantiate(obj: Any) -> Any:
    """A class is instantiated, a factory called; an object with ``forward`` is used as it is."""
    if isinstance(obj, type):
        return obj()
    if callable(getattr(obj, "forward", None)):
        return obj
    if callable(obj):
        return obj()
    raise TypeError(f"{obj!r} is neither a backend, a backend class nor a zero-argument factory")


@functools.cache
def entry_point_paths() -> dict[str, str]:
    """Backend name -> ``module:attr`` for every backend an installed package registered by entry point."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_backend_names() -> list[str]:
    """Built-in names first, then names that installed packages registered by entry point."""
    names = list(BUILTIN_BACKENDS)
    names += sorted(n for n in entry_point_paths() if n not in BUILTIN_BACKENDS)
    return names


def load_backend(spec: str) -> Backend:
    """Resolve one ``--backend`` item: a built-in name, an entry-point name, or ``module.path:attr``."""
    if spec in BUILTIN_BACKENDS:
        path = BUILTIN_BACKENDS[spec].value
    elif spec in entry_point_paths():
        path = entry_point_paths()[spec]
    elif ":" in spec:
        path = spec
    else:
        raise ValueError(
            f"unknown backend {spec!r}; known: {', '.join(known_backend_names())}, "
            f"or give 'module.path:attr'"
        )
    from . import isolation
    from .adapters import adapt
    from .backend import Backend

    # Any shape a kernel ships in: a backend object or class, a function, an nn.Module class, an op, a partial.
    # Watched as every call is: what its import and construction changed of torch's global state (a torch.sqrt
    # replaced at import would make the reference agree with it) is put back, and named by semantics.global_state.
    before = isolation.global_state()
    try:
        backend = Backend(adapt(import_object(path), spec=spec), spec=spec)
    finally:
        changes = isolation.put_back(before)
    backend.import_changes = changes
    if spec in BUILTIN_BACKENDS or spec in entry_point_paths():
        backend.name = spec
    return backend


def parse_backend_option(value: str | None) -> list[str]:
    """Split ``--backend`` into specs; ``all`` expands to every known name. Order kept, duplicates dropped."""
    if not value:
        return []
    specs: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        expanded = known_backend_names() if item == "all" else [item] if item else []
        specs += [s for s in expanded if s not in specs]
    return specs


def device_kind(device: torch.device | str) -> str:
    """The registry's key for a device: 'cuda', 'rocm' (a HIP build's cuda device) or 'cpu'."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    return device.type


class KernelRegistry:
    """Per-device priority lists of backends for each op; ``get_op`` returns the first that can run.

    Generic over op names: ``rms_norm`` is the first op, others register the same way. The last entry
    of every list for ``rms_norm`` is the native ground truth, so dispatch always finds something.
    """

    def __init__(self, priorities: dict[str, dict[str, list[OpBackend | str]]] | None = None) -> None:
        self._priorities: dict[str, dict[str, list[OpBackend | str]]] = {
            kind: {op: list(entries) for op, entries in ops.items()}
            for kind, ops in (priorities or {}).items()
        }
        self._instances: dict[str, Backend] = {}

    def register(
        self,
        op_name: str,
        backend: OpBackend | str,
        *,
        device_kinds: Iterable[str] = ("cuda", "rocm", "cpu"),
        first: bool = True,
    ) -> None:
        """Add ``backend`` (an OpBackend or a ``module:attr`` path) to ``op_name``'s list on each device kind."""
        for kind in device_kinds:
            entries = self._priorities.setdefault(kind, {}).setdefault(op_name, [])
            if backend in entries:
                entries.remove(backend)
            entries.insert(0 if first else len(entries), backend)

    def priority(self, op_name: str, device: torch.device | str = "cpu") -> list[OpBackend | str]:
        kind = device_kind(device)
        try:
            return list(self._priorities[kind][op_name])
        except KeyError:
            ops = sorted({op for by_op in self._priorities.values() for op in by_op})
            raise KeyError(
                f"no backends registered for op {op_name!r} on {kind}; registered ops: {', '.join(ops)}"
            ) from None

    def _load(self, entry: OpBackend | str) -> Backend:
        key = entry.value if isinstance(entry, OpBackend) else entry
        if key not in self._instances:
            spec = entry.short_name if isinstance(entry, OpBackend) else entry
            self._instances[key] = load_backend(spec)
        return self._instances[key]

    def get_op(self, op_name: str, device: torch.device | str = "cpu") -> Backend:
        """The highest-priority backend for ``op_name`` that imports and can run on ``device``."""
        reasons: list[str] = []
        for entry in self.priority(op_name, device):
            try:
                backend = self._load(entry)
            except (ImportError, RuntimeError, OSError) as exc:
                reasons.append(f"{entry}: {exc}")
                continue
            reason = backend.unavailable_reason(device)
            if reason is None:
                return backend
            reasons.append(reason)
        raise RuntimeError(f"no backend for {op_name!r} can run on {device}: " + "; ".join(reasons))


def _default_priorities() -> dict[str, dict[str, list[OpBackend | str]]]:
    native = OpBackend.PYTORCH_NATIVE_RMS_NORM
    triton = OpBackend.TRITON_RMS_NORM
    cuda = OpBackend.CUDA_RMS_NORM
    # Compiled kernels first where they can run; on the CPU the interpreter is for checking, not for use.
    return {
        "cuda": {"rms_norm": [cuda, triton, native]},
        "rocm": {"rms_norm": [triton, native]},
        "cpu": {"rms_norm": [native]},
    }


kernel_registry = KernelRegistry(_default_priorities())
get_op = kernel_registry.get_op
