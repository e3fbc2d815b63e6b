"""Every module name means in a process the harness starts what it means in the process that started it.

A child's ``sys.path`` is not enough for that: pytest puts the folder above the shipped suites' package first on the
test process's path once it has imported the user's kernel, and a fresh interpreter puts its working directory
first. Under an editable install from a clone, the clone's own folders (``zoo``, ``backends``, ``harness``, ...)
then stood before the user's module of the same name in the first-call process, and inside the clone the partial
``rmsnorm_conformance/`` folder stood before the installed package: the child imported something else than the
test process had, or nothing. So the child is told where each top-level module the test process imported came from
(``pins``), and a finder put first in its ``sys.meta_path`` (``PIN_SOURCE``) loads each such name from there; names
the test process never imported resolve by the path as before. The standard library is left to the interpreter.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path
from typing import Any

# Defines ``_pin(pins)``: a meta path finder, first in ``sys.meta_path``, that finds each pinned top-level name where
# the asking process found it. Source text, so that a child runs it before it imports anything of this package (its
# own modules are among the names pinned). A pin: {"origin": file or None, "path": package folders or None}.
PIN_SOURCE = r'''
def _pin(pins):
    import importlib.machinery, importlib.util, sys

    class PinnedModules:
        """Finds each name the asking process had imported where that process found it."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            pin = pins.get(name)
            if pin is None:
                return None
            if pin["origin"] is None:  # a namespace package: its folders, as the asking process had them
                spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
                spec.submodule_search_locations = list(pin["path"])
                return spec
            return importlib.util.spec_from_file_location(name, pin["origin"],
                                                          submodule_search_locations=pin["path"])

    sys.meta_path.insert(0, PinnedModules())
'''

# ``python -c BOOTSTRAP PINS_FILE MODULE ARG...``: the pins read from PINS_FILE (JSON), then MODULE run as ``-m`` runs
# it; for children that are new interpreters.
BOOTSTRAP = PIN_SOURCE + r'''
import json, runpy, sys
with open(sys.argv[1]) as _file:
    _pin(json.load(_file))
sys.argv = [sys.argv[2], *sys.argv[3:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
'''


def _folders(*keys: str) -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(str(Path(paths[key]).resolve()) + "/" for key in keys if key in paths)


def _in_standard_library(where: str) -> bool:
    """In the standard library's folders and not in site-packages (which a venv's platstdlib holds)."""
    resolved = str(Path(where).resolve())
    return resolved.startswith(_folders("stdlib", "platstdlib")) and not resolved.startswith(
        _folders("purelib", "platlib"))


def pins() -> dict[str, dict[str, Any]]:
    """Where this process found each top-level module it imported, outside the standard library: the finder of
    ``PIN_SOURCE`` loads them from there in a child."""
    found: dict[str, dict[str, Any]] = {}
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if "." in name or name == "__main__" or spec is None:
            continue
        locations = spec.submodule_search_locations
        origin = spec.origin if spec.has_location else None
        if origin is None and not locations:
            continue  # built in, frozen, or made at run time: nothing on disk to point at
        if _in_standard_library(origin or next(iter(locations))):
            continue
        found[name] = {"origin": origin, "path": list(locations) if locations is not None else None}
    return found


def write_pins(path: Path) -> Path:
    """``pins()`` written to ``path`` as JSON, for ``BOOTSTRAP``."""
    path.write_text(json.dumps(pins()))
    return path


def bootstrap_command(pins_file: Path, module: str, argv: list[str]) -> list[str]:
    """The command that runs ``python -m module argv...`` in a new interpreter with this process's modules pinned."""
    return [sys.executable, "-c", BOOTSTRAP, str(pins_file), module, *argv]
