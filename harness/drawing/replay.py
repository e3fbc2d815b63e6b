"""``--replay``: rebuild a case from the repr a failure printed, without ``eval``.

Replay lines are copied out of CI logs and reports written by others, so the text is untrusted. It is parsed
with ``ast`` and only a whitelist is accepted: calls of the case types with keyword arguments, numbers, strings,
booleans, ``None``, tuples, ``inf`` and ``nan``. Each value is then checked against its field's type and the
contract's vocabulary (known dtypes and value families, dim >= 1), and anything else is refused with a message
that names what was wrong.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import typing
from typing import Any

from ...contract import DTYPES
from ..vocabulary.entry_point_names import AXIS_A_ENTRY_POINTS
from .cases import CASE_TYPES, FIELD_VOCABULARY, Batch

_NAMES = {"inf": math.inf, "nan": math.nan}
# Field values restricted to a vocabulary, wherever the field appears.
_VOCABULARY: dict[str, tuple[str, ...]] = {
    "dtype": DTYPES,
    "weight_dtype": DTYPES,
    "residual_dtype": DTYPES,
    "entry": AXIS_A_ENTRY_POINTS,
    **FIELD_VOCABULARY,
}
_MAX_TEXT = 4000  # a case repr is a few hundred characters; anything far longer is not one
# Each case type's field types, resolved once at import, while the modules that define them are in sys.modules
# (get_type_hints reads a class's module from there; a pytest run in-process may have dropped it since).
_HINTS: dict[str, dict[str, Any]] = {name: typing.get_type_hints(cls) for name, cls in CASE_TYPES.items()}


class ReplayError(ValueError):
    """The --replay text is not a case this harness can run; the message says why."""


def parse_case(text: str) -> Any:
    """The case ``text`` spells, e.g. ``BatchSizeCase(batch=Batch(dim=4096, rows=3, dtype='bfloat16'), length=1)``."""
    if not isinstance(text, str) or not text.strip():
        raise ReplayError("--replay needs a case repr, e.g. \"AccuracyCase(batch=Batch(dim=8, rows=2, "
                          "dtype='float32'))\"")
    if len(text) > _MAX_TEXT:
        raise ReplayError(f"--replay text is {len(text)} characters long; a case repr is far shorter")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ReplayError(f"--replay {text!r} is not a case repr: {exc.msg}") from None
    case = _build(tree.body)
    if not dataclasses.is_dataclass(case) or type(case).__name__ not in CASE_TYPES:
        raise ReplayError(f"--replay {text!r} must be a call of one of {', '.join(CASE_TYPES)}")
    return case


def _build(node: ast.AST) -> Any:
    if isinstance(node, ast.Call):
        return _call(node)
    return _literal(node)


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ReplayError("a sign may only precede a number")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.Tuple):
        return tuple(_build(e) for e in node.elts)
    what = ast.unparse(node) if hasattr(ast, "unparse") else type(node).__name__
    raise ReplayError(f"{what!r} is not allowed in a case: only case types, numbers, strings, booleans, "
                      "None, tuples, inf and nan")


def _call(node: ast.Call) -> Any:
    if not isinstance(node.func, ast.Name) or node.func.id not in CASE_TYPES:
        what = ast.unparse(node.func)
        raise ReplayError(f"{what!r} is not a case type; known: {', '.join(CASE_TYPES)}")
    cls = CASE_TYPES[node.func.id]
    if node.args:
        raise ReplayError(f"{cls.__name__}(...) takes keyword arguments only, as its repr prints them")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = _HINTS[node.func.id]
    values: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise ReplayError(f"{cls.__name__}(**...) is not allowed")
        if kw.arg not in fields:
            raise ReplayError(f"{cls.__name__} has no field {kw.arg!r}; fields: {', '.join(fields)}")
        value = _build(kw.value)
        _check_field(cls.__name__, kw.arg, value, hints[kw.arg])
        values[kw.arg] = value
    try:
        case = cls(**values)
    except TypeError as exc:
        raise ReplayError(f"{cls.__name__}: {exc}") from None
    if isinstance(case, Batch):
        _check_batch(case)
    return case


def _check_field(owner: str, name: str, value: Any, hint: Any) -> None:
    where = f"{owner}.{name}={value!r}"
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif hint is str:
        ok = isinstance(value, str)
    elif typing.get_origin(hint) is tuple:
        ok = isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                              for v in value)
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        ok = isinstance(value, hint)
    else:
        ok = False
    if not ok:
        raise ReplayError(f"{where} has the wrong type: {getattr(hint, '__name__', hint)} expected")
    if name in _VOCABULARY and isinstance(value, str) and value not in _VOCABULARY[name]:
        raise ReplayError(f"{where} is unknown; known: {', '.join(_VOCABULARY[name])}")
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise ReplayError(f"{where} must not be negative")


def _check_batch(b: Batch) -> None:
    if b.dim < 1:
        raise ReplayError(f"Batch.dim={b.dim} must be at least 1")
    if not (isinstance(b.eps, (int, float)) and math.isfinite(b.eps) and b.eps > 0):
        raise ReplayError(f"Batch.eps={b.eps!r} must be a positive finite number")
    if b.rows * b.dim > 1 << 34:
        raise ReplayError(f"Batch of {b.rows} x {b.dim} is beyond any device's memory")
