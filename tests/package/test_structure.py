"""The project's structure, read from its files: the import graph (every import, those inside functions included)
has no cycle and no import against the flow, and rule ids are the contract's constants.

The flow: ``contract`` imports nothing of the project; the harness's stages import only the stages before them
(``vocabulary``, the shared words, below them all; then ``drawing``, ``running``, ``checking``, ``reporting``, and
the ``plugin`` last); the harness imports neither the suites, the backends nor the zoo. Imports made for the type
checker alone (``if TYPE_CHECKING:``) count for the flow, which is about meaning, and not for cycles, which are
about what runs at import. Run ``python tests/package/test_structure.py`` to print the graph's cycles and its imports
against the flow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "rmsnorm_conformance"
# The source folders the package is made of, and what each may import besides itself.
ALLOWED: dict[str, tuple[str, ...]] = {
    "contract": (),
    "harness": ("contract",),
    "backends": ("contract",),
    "zoo": ("contract", "backends"),
    "suites": ("contract", "harness"),
}
# The harness's stages, in the order data flows through them: each imports only those before it.
STAGES: tuple[str, ...] = ("vocabulary", "drawing", "running", "checking", "reporting", "plugin")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, named from the package root ("harness.plugin.hooks")
    target: str  # the imported module, named alike ("" for the package itself)
    line: int
    typing_only: bool  # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        return f"{self.source} -> {self.target or PACKAGE} (line {self.line})"


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package, named from the package root: the source folders and the package's own
    ``__init__``/``__main__`` (in the root, or in a folder named after the package)."""
    found: dict[str, Path] = {}
    for folder in ALLOWED:
        for path in sorted((root / folder).rglob("*.py")):
            found[_name(path.relative_to(root))] = path
    for home in (root, root / PACKAGE):
        for stem in ("__init__", "__main__"):
            if (home / f"{stem}.py").is_file():
                found[_name(Path(f"{stem}.py"))] = home / f"{stem}.py"
    return found


def _name(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(root: Path = ROOT) -> list[Import]:
    """Every import of a module of the package by another, absolute (``rmsnorm_conformance.x``) or relative."""
    known = modules(root)
    found: dict[tuple[str, str, bool], Import] = {}
    for source, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        package = source.split(".") if path.name == "__init__.py" and source else source.split(".")[:-1]
        for node, typing_only in _imports(tree):
            for target in _targets(node, package, known):
                if target != source:
                    found.setdefault((source, target, typing_only), Import(source, target, node.lineno, typing_only))
    return list(found.values())


def _imports(tree: ast.AST, typing_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, typing_only
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), typing_only)
        else:
            yield from _imports(node, typing_only)


def _targets(node: ast.Import | ast.ImportFrom, package: list[str], known: dict[str, Path]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            target = _ours(alias.name, known)
            if target is not None:
                yield target
        return
    if node.level:
        base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
        module = ".".join([*base, *([node.module] if node.module else [])])
    else:
        name = node.module or ""
        if name != PACKAGE and not name.startswith(PACKAGE + "."):
            return
        module = name.removeprefix(PACKAGE).removeprefix(".")
    for alias in node.names:  # ``from package import module`` imports the module; ``import name`` its home
        submodule = f"{module}.{alias.name}" if module else alias.name
        yield submodule if submodule in known else _longest(module, known)


def _ours(name: str, known: dict[str, Path]) -> str | None:
    if name != PACKAGE and not name.startswith(PACKAGE + "."):
        return None
    return _longest(name.removeprefix(PACKAGE).removeprefix("."), known)


def _longest(name: str, known: dict[str, Path]) -> str:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def cycles(found: list[Import]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not, imports for the type checker left out: the
    import graph's strongly connected components of more than one module."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        if not imp.typing_only:
            graph.setdefault(imp.source, set()).add(imp.target)
    reach = {node: _reachable(graph, node) for node in graph}
    components = {tuple(sorted(n for n in reach[node] if node in reach.get(n, ()))) for node in graph}
    return sorted(list(c) for c in components if len(c) > 1)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def against_the_flow(found: list[Import]) -> list[Import]:
    """Imports of a source folder it may not import, and of a later stage of the harness (or of the harness's
    public face, which imports every stage) by an earlier one."""
    wrong = []
    for imp in found:
        home, there = imp.source.split(".")[0], imp.target.split(".")[0]
        if home in ALLOWED and there != home and there not in ALLOWED[home]:
            wrong.append(imp)
        elif home == there == "harness" and _stage(imp.source) is not None:
            stage, other = _stage(imp.source), _stage(imp.target)
            if other is None or STAGES.index(other) > STAGES.index(stage):
                wrong.append(imp)
    return wrong


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def test_the_graph_is_read_from_the_files():
    """The reader finds the imports it must: absolute and relative, at the top and inside functions."""
    found = {(i.source, i.target) for i in imports()}
    assert len(found) > 200
    assert ("harness.plugin.hooks", "harness.plugin.state") in found
    assert ("harness.plugin.hooks", "harness.plugin.active") in found  # inside a function
    assert ("suites.test_axis_b", "harness") in found
    assert ("backends.cuda_rmsnorm.__main__", "backends.cuda_rmsnorm._build") in found


def test_the_reader_sees_a_cycle_and_an_import_against_the_flow(tmp_path):
    """The checks below can fail: a planted cycle and a planted import of a later stage are found."""
    for folder in ALLOWED:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "harness" / "drawing").mkdir()
    (tmp_path / "harness" / "drawing" / "__init__.py").write_text("")
    (tmp_path / "harness" / "drawing" / "a.py").write_text("def f():\n    from . import b\n")
    (tmp_path / "harness" / "drawing" / "b.py").write_text(f"from {PACKAGE}.harness.drawing import a\n")
    (tmp_path / "harness" / "running").mkdir()
    (tmp_path / "harness" / "running" / "__init__.py").write_text("")
    (tmp_path / "harness" / "running" / "c.py").write_text("")
    (tmp_path / "harness" / "drawing" / "d.py").write_text("from ..running import c\nfrom ... import suites\n")
    found = imports(tmp_path)
    assert cycles(found) == [["harness.drawing.a", "harness.drawing.b"]]
    assert {(i.source, i.target) for i in against_the_flow(found)} == {
        ("harness.drawing.d", "harness.running.c"), ("harness.drawing.d", "suites")}


def test_no_import_cycles():
    assert cycles(imports()) == []


def test_no_import_against_the_flow():
    wrong = against_the_flow(imports())
    assert not wrong, "\n".join(map(str, wrong))


def absolute_self_imports(root: Path = ROOT) -> list[str]:
    """Imports of the package by its own name from inside it: each module of the package imports the others
    relatively, so the graph is read from the files as they lie, in a checkout and installed alike."""
    found = []
    for path in modules(root).values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            named = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(n == PACKAGE or n.startswith(PACKAGE + ".") for n in named):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_package_imports_itself_relatively():
    """``from ..contract import rule``, not ``from rmsnorm_conformance.contract import rule``: the tools read the
    structure from the files, and no module can load under a second name through a path (tests/ and benchmarks/,
    outside the package, import it by name)."""
    found = absolute_self_imports()
    assert not found, "\n".join(found)


def test_the_harness_does_not_import_the_suites():
    wrong = [i for i in imports() if i.source.startswith("harness") and i.target.split(".")[0] == "suites"]
    assert not wrong, "\n".join(map(str, wrong))


# Where rule ids may be written out: the contract declares them, and the harness's own tests may name them.
RULE_ID_HOMES = ("contract", "tests")


def _project_files(root: Path) -> list[Path]:
    """The project's own Python files, new ones included: what git does not ignore. A build's copy of the package
    (``build/lib``, which CI's wheel build writes beside the tests) and the virtual environment are not the
    project's, and would repeat every id of ``contract/``. Without git (an unpacked sdist), every file."""
    import subprocess

    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
                                cwd=root, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return sorted(root.rglob("*.py"))
    return sorted(root / name for name in listed if (root / name).is_file())


def quoted_rule_ids(root: Path = ROOT) -> list[str]:
    """Every string literal equal to a rule id in the project's Python files outside ``RULE_ID_HOMES``."""
    from rmsnorm_conformance.contract import ALL_RULES

    ids = {r.id for r in ALL_RULES}
    found = []
    for path in _project_files(root):
        relative = path.relative_to(root)
        if relative.parts[0] in RULE_ID_HOMES or relative.parts[0].startswith("."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Constant) and node.value in ids:
                found.append(f"{relative}:{node.lineno}: {node.value!r}")
    return found


def test_rule_ids_are_the_contracts_constants():
    """A rule id is written once, in its family's module of contract/families/; the suites, the harness, the zoo
    and the benchmarks name it by its constant (``axis_a.BATCH_SIZE.id``), so a misspelt id fails at import."""
    found = quoted_rule_ids()
    assert not found, "\n".join(found)


def test_every_rule_is_a_constant_of_its_family_named_after_it():
    """contract/families/<family>.py holds each rule once, as ``SUFFIX = Rule("prefix.suffix", ...)`` (prefixed
    with the id's first part where it differs from the family's own), and the family's ``RULES`` lists them all."""
    import importlib

    from rmsnorm_conformance.contract import ALL_RULES, Rule

    seen = []
    for path in sorted((ROOT / "contract" / "families").glob("[!_]*.py")):
        family = importlib.import_module(f"{PACKAGE}.contract.families.{path.stem}")
        constants = {name: value for name, value in vars(family).items() if isinstance(value, Rule)}
        assert set(constants.values()) == set(family.RULES), path.name
        for name, rule in constants.items():
            prefix, suffix = rule.id.split(".", 1)
            assert name in (suffix.upper(), f"{prefix}_{suffix}".upper()), (path.name, name, rule.id)
        seen += family.RULES
    assert sorted(r.id for r in seen) == sorted(r.id for r in ALL_RULES)


def test_the_rule_id_reader_finds_a_quoted_id(tmp_path):
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "x.py").write_text('RULE = "axis_a.batch_size"\nOTHER = "axis_a.*"\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "y.py").write_text('RULE = "axis_a.batch_size"\n')
    assert quoted_rule_ids(tmp_path) == ["harness/x.py:1: 'axis_a.batch_size'"]


if __name__ == "__main__":
    graph = imports()
    print(f"{len(modules())} modules, {len({(i.source, i.target) for i in graph})} imports")
    print(f"cycles: {len(cycles(graph))}", *(" <-> ".join(c) for c in cycles(graph)), sep="\n  ")
    print(f"against the flow: {len(against_the_flow(graph))}", *map(str, against_the_flow(graph)), sep="\n  ")
    print(f"absolute imports of the package inside it: {len(absolute_self_imports())}")
    print(f"quoted rule ids outside {' and '.join(RULE_ID_HOMES)}: {len(quoted_rule_ids())}")
