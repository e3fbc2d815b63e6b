"""Which of the package's modules pytest rewrites: the suites, not the harness.

pytest rewrites the ``assert`` statements of every module of a distribution that registers a ``pytest11`` entry
point, so that a failing assert shows its operands. For this package that was all of it, of which only the suites
are tests: the harness, the contract and the backends hold four ``assert`` statements, each an internal invariant.
A rewritten module is parsed, rewritten and compiled from its source on its first import after each install, and
cached apart from the bytecode that ``pip install`` writes: on an H200, a machine's first one-backend run rewrote
207 modules in its controller (this package's, Hypothesis's and pytest-xdist's), 1.75 s of a cProfile of it, and
the import of the plugin's run hooks took 4.1 s against 1.8 s in the next run.

``rewrite_only_the_suites`` narrows pytest's mark from the package to its suites. It runs when the plugin package
is imported, which pytest does for the entry point before the package's other modules load. It reaches into
pytest's rewriting hook (``_must_rewrite``, a set since pytest 3); where that is not there, nothing changes and every
module is rewritten as before. Test files (``test_*.py``) and ``conftest.py`` files are rewritten by their names
either way.
"""

from __future__ import annotations

import sys

PACKAGE = "rmsnorm_conformance"
REWRITTEN = (f"{PACKAGE}.suites",)


def rewrite_only_the_suites() -> bool:
    """Mark the suites for rewriting instead of the whole package; True where pytest's hook was found and changed."""
    changed = False
    for finder in sys.meta_path:
        if type(finder).__name__ != "AssertionRewritingHook":
            continue
        marked = getattr(finder, "_must_rewrite", None)
        if not isinstance(marked, set) or PACKAGE not in marked:
            continue
        marked.discard(PACKAGE)
        marked.update(REWRITTEN)
        cache = getattr(finder, "_marked_for_rewrite_cache", None)
        if isinstance(cache, dict):
            cache.clear()
        changed = True
    return changed
