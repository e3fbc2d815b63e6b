"""The docs name tests and files that exist: a page that cites ``tests/test_x.py::test_y`` as the test holding a
promise is wrong once that test is renamed or moved, and the docs build (which checks links) cannot see it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# tests/faults/test_faults.py::test_a_write_outside_the_view_is_found_and_located, in backticks.
CITED = re.compile(r"`((?:tests|suites)/[\w/]+\.py)::(\w+)`")


def _defined(path: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def test_every_test_the_docs_cite_exists():
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "DESIGN.md"]
    cited = [(page, file, name) for page in pages for file, name in CITED.findall(page.read_text())]
    assert any(page.name == "faults.md" for page, _, _ in cited), "docs/faults.md cites no test"
    missing = [f"{page.relative_to(ROOT)} cites {file}::{name}" for page, file, name in cited
               if not (ROOT / file).is_file() or name not in _defined(ROOT / file)]
    assert not missing, "tests the docs cite that do not exist (rename them in the page too):\n" + "\n".join(missing)


# `harness/plugin/options.py`, `zoo/`: a path of the repository in backticks (placeholders such as <name> are not).
PATH = re.compile(r"`((?:contract|harness|suites|backends|zoo|rmsnorm_conformance|tests|benchmarks|reports|docs|"
                  r"examples)/[\w./-]*)`")


def test_every_path_the_architecture_and_docs_name_exists():
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "DESIGN.md", ROOT / "backends" / "TRITON.md",
             ROOT / "backends" / "cuda_rmsnorm" / "README.md"]
    named = [(page, path) for page in pages if page.is_file() for path in PATH.findall(page.read_text())]
    assert any(page.name == "DESIGN.md" for page, _ in named)
    missing = [f"{page.relative_to(ROOT)} names {path}" for page, path in named if not (ROOT / path).exists()]
    assert not missing, "paths the docs name that do not exist (moved? update the page):\n" + "\n".join(missing)
