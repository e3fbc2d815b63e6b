"""What a backend's exception says, as text the harness can always show.

A kernel's exception reaches the report twice: its message goes into the failed check's detail, and pytest prints
the exception (and every exception chained to it) under the failed test. Both call ``str()`` on an object the
kernel made. An exception class whose ``__str__`` raises ended the run in pytest's internal error (exit status 3),
every later test unrun, the correct backends beside it with no verdict; a message of 10 MB went whole into the
log (1.9 GB) and the markdown report (74 MB). Here the text is taken once, guarded and cut to ``MESSAGE_LIMIT``
characters, and an exception that cannot be shown as it is is replaced, before pytest formats it, by one that
says what it was.
"""

from __future__ import annotations

from typing import Any

# Characters of an exception's message kept: a compiler's error (Triton's, nvcc's) fits; more is cut, and the cut
# says how long the message was.
MESSAGE_LIMIT = 8000


class UnshownException(Exception):
    """Stands for a kernel's exception whose message could not be shown whole: its ``str()`` raised, or it ran past
    ``MESSAGE_LIMIT`` characters. It keeps the original's type name and traceback."""


def message(exc: BaseException, limit: int = MESSAGE_LIMIT) -> str:
    """``str(exc)``, never raising and at most ``limit`` characters (then followed by how long it was)."""
    text = _text(exc)
    if text is None:
        return f"<its str() raised {_type_name(_failure(exc))}>"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... (cut: {len(text):,} characters in all)"


def described(exc: BaseException, limit: int = MESSAGE_LIMIT) -> str:
    """``Type: message`` for a report's detail, as ``message`` takes it."""
    return f"{_type_name(exc)}: {message(exc, limit)}"


def readable(exc: BaseException) -> bool:
    """Whether ``str(exc)`` gives text (however long) without raising."""
    return _text(exc) is not None


def _shown_whole(exc: BaseException, limit: int) -> bool:
    text = _text(exc)
    return text is not None and len(text) <= limit


def _text(exc: BaseException) -> str | None:
    """``str(exc)`` as a plain str, or None where it raised or gave no str."""
    try:
        text = str(exc)
        return str.__str__(text) if isinstance(text, str) else None  # a str subclass's own methods left out
    except Exception:
        return None


def _failure(exc: BaseException) -> BaseException:
    """What ``str(exc)`` raised (a TypeError where it gave no str)."""
    try:
        str(exc)
    except Exception as err:
        return err
    return TypeError("__str__ gave no str")


def _type_name(exc: BaseException) -> str:
    try:
        return str.__str__(type(exc).__name__)
    except Exception:  # a metaclass that hides even its name
        return "an exception"


def printable(exc: BaseException, limit: int = MESSAGE_LIMIT, *, keep_first: bool = False) -> BaseException:
    """``exc`` where pytest can print it and every exception chained to it as they are; otherwise the same chain
    with each exception that cannot be shown (``str()`` raises or runs past ``limit``) replaced by an
    ``UnshownException`` with its type, its cut message and its traceback, in its place in the chain (the
    exception above it is chained to the replacement). ``keep_first``: ``exc`` itself stays, whatever its text
    (pytest's own outcomes: a skip must stay a skip), and only what is chained to it is replaced."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = _next_in_chain(current)
    if all(_shown_whole(e, limit) for e in chain[1 if keep_first else 0:]):
        return exc
    replaced: BaseException | None = None
    for original in reversed(chain):  # from the innermost: each replacement chains to the one below it
        if _shown_whole(original, limit) or (keep_first and original is exc):
            if replaced is not None and _next_in_chain(original) is not replaced:
                _chain_to(original, replaced)
            replaced = original
            continue
        stand_in = UnshownException(f"{_type_name(original)}: {message(original, limit)}")
        stand_in.__traceback__ = original.__traceback__
        if replaced is not None:
            _chain_to(stand_in, replaced)
        replaced = stand_in
    assert replaced is not None
    return replaced


def _next_in_chain(exc: BaseException) -> BaseException | None:
    """The exception pytest shows below ``exc``: its cause, else its context unless suppressed."""
    if exc.__cause__ is not None:
        return exc.__cause__
    return None if exc.__suppress_context__ else exc.__context__


def _chain_to(exc: BaseException, below: Any) -> None:
    exc.__cause__ = below
    exc.__suppress_context__ = True
