"""The shipped suites' test modules, collected under the package's name wherever pytest finds them.

pytest imports a test file by its path: in a source checkout, ``pytest suites`` would load ``suites/test_x.py`` as
the top-level module ``suites.test_x``, beside the ``rmsnorm_conformance.suites.test_x`` that ``--pyargs`` and the
rule index load, and a suite's relative imports of the harness would have no package to be relative to. Each
suite module is imported here by its one name instead, so a module of the package never loads under two.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from .activation import suites_dir

# The suites' package, by its one name.
SUITES = f"{__name__.partition('.')[0]}.suites"


class SuiteModule(pytest.Module):
    """A module of the shipped suites, imported as ``rmsnorm_conformance.suites.<name>``."""

    def _getobj(self) -> Any:
        return importlib.import_module(f"{SUITES}.{self.path.stem}")


class SuitePackage(pytest.Package):
    """The shipped suites' folder: its ``__init__`` imported by the package's name, where pytest would import it by
    path for a ``setup_module`` (the suites have none)."""

    def setup(self) -> None:
        importlib.import_module(SUITES)


def collect_module(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """A suite module's collector, or None for any other file (pytest's own then)."""
    if module_path.suffix != ".py" or module_path.resolve().parent != suites_dir():
        return None
    return SuiteModule.from_parent(parent, path=module_path)


def collect_package(path: Path, parent: pytest.Collector) -> pytest.Package | None:
    """The suites folder's collector, or None for any other folder."""
    if path.resolve() != suites_dir() or not (path / "__init__.py").is_file():
        return None
    return SuitePackage.from_parent(parent, path=path)
