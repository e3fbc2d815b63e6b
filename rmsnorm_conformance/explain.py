"""What a contract rule means, for a person: its statement, severity, what breaks it, the planted defects that show
it, the suite tests that check it, and how to replay a breach.

``rmsnorm-conformance explain RULE`` prints one rule; the docs' rule reference (a page per rule family) is rendered
by the same functions when the site is built, so the command and the pages say the same thing. Everything is read
from the contract (the rules), the defect zoo (each defect names the rule it breaks and, in its docstring, the
real kernel bug it imitates) and the suites (the tests that declare the rule), so nothing here restates them.
"""

from __future__ import annotations

import difflib
import inspect
import sys
from dataclasses import dataclass

from .contract import ALL_RULES, Rule

# What a breach of each severity does to a run (contract/rules.py's SEVERITIES).
SEVERITY_EFFECT: dict[str, str] = {
    "numerics": "a breach fails the run",
    "interface": "a breach is a warning in the report, with its detail and replay; it fails the run only under "
                 "`--strict-interface`",
}
# Where the zoo's planted defects live: the import spec a --backend takes is MODULE:CLASS.
ZOO = "rmsnorm_conformance.zoo"
FAULTS = "rmsnorm_conformance.zoo.faults"


@dataclass(frozen=True)
class Defect:
    """A planted defect: its backend spec, what it does wrong (its docstring's first paragraph) and the real kernel
    bug it imitates (the rest), and whether it is a device or memory fault (zoo.faults: a GPU, or the simulated
    device loss that module describes, runs it)."""

    spec: str
    does: str
    imitates: str
    fault: bool


def _markdown(text: str) -> str:
    """A docstring's reStructuredText literals (````code````) as markdown's (```code```), lines joined."""
    return " ".join(text.replace("``", "`").split())


def _defect(cls: type, module: str) -> Defect:
    doc = inspect.getdoc(cls) or ""
    first, _, rest = doc.partition("\n\n")
    does = first.split(":", 1)[1] if first.startswith("Breaks ") and ":" in first else first
    return Defect(f"{module}:{cls.__name__}", _markdown(does), "\n\n".join(_markdown(p) for p in rest.split("\n\n")
                                                                          if p.strip()), module == FAULTS)


def defects_by_rule() -> dict[str, list[Defect]]:
    """rule id -> the zoo's planted defects that break it, the numerics zoo's first, then its device faults."""
    from .zoo import DEFECTS, faults

    found: dict[str, list[Defect]] = {}
    planted = [(cls, ZOO) for cls in DEFECTS] + [
        (cls, FAULTS) for cls in vars(faults).values()
        if isinstance(cls, type) and cls.__module__ == faults.__name__ and isinstance(vars(cls).get("breaks"), str)]
    for cls, module in planted:
        found.setdefault(vars(cls)["breaks"], []).append(_defect(cls, module))
    return found


def replay_line(rule_id: str, spec: str = "SPEC") -> str:
    """The replay line a breach of ``rule_id`` prints, with its run's values as placeholders: built by the plugin's
    own function, so that it reads as a real one does."""
    from .harness.plugin.replay_commands import replay_command

    class _Spec:
        def __init__(self, spec: str) -> None:
            self.spec = spec

    class _Case:
        def __repr__(self) -> str:
            return "CASE"

    return replay_command(_Spec(spec), "DEVICE", "DTYPE", rule_id, _Case(), "PROFILE")  # type: ignore[arg-type]


@dataclass(frozen=True)
class Family:
    """A rule family as ``contract/families/`` declares it: a module whose docstring opens with what the family
    holds, and whose ``RULES`` lists its rules."""

    name: str
    title: str
    about: str
    rules: tuple[Rule, ...]


def families() -> dict[str, Family]:
    """Family name -> the family, in the contract's order of its first rule."""
    import importlib
    import pkgutil

    from .contract import families as package

    found: list[Family] = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        about = _markdown((inspect.getdoc(module) or info.name).split("\n\n", 1)[0])
        title = about.split(":", 1)[0]
        found.append(Family(info.name, title, about, tuple(getattr(module, "RULES", ()))))
    order = {rule.id: i for i, rule in enumerate(ALL_RULES)}
    found.sort(key=lambda f: min((order.get(r.id, len(order)) for r in f.rules), default=len(order)))
    return {f.name: f for f in found if f.rules}


def explain(rule: Rule, defects: list[Defect], tests: list[str], heading: str = "#") -> str:
    """One rule, as markdown that also reads as plain text in a terminal."""
    lines = [f"{heading} `{rule.id}`: {rule.title}", "",
             f"**Severity:** {rule.severity}: {SEVERITY_EFFECT.get(rule.severity, 'see CONTRACT.md')}.", "",
             f"**Statement:** {rule.statement}", ""]
    if defects:
        lines += ["**What breaks it** (the planted defects of the zoo, each the ground truth plus one bug):", ""]
        for d in defects:
            where = " A device or memory fault: it needs a GPU, or the simulated device loss zoo/faults.py " \
                    "describes." if d.fault else ""
            lines += [f"- `{d.spec}`: {d.does}{where}" + (f" {d.imitates}" if d.imitates else "")]
        lines.append("")
    else:
        lines += ["**What breaks it:** no planted defect of the zoo breaks this rule yet; the statement says what "
                  "would.", ""]
    if tests:
        lines += ["**Checked by:** " + ", ".join(f"`suites/{t}`" for t in tests), ""]
    lines += _replay(rule, defects)
    return "\n".join(lines).rstrip() + "\n"


def _replay(rule: Rule, defects: list[Defect]) -> list[str]:
    if rule.id.startswith("parity."):
        return ["**Replay a breach:** parity is checked when a run asks for it (`--require-parity=A:B`, or "
                "`--modes=compile,cudagraph` for a backend against itself); a difference prints the first differing "
                "element, both bit patterns and a `replay:` line that re-runs just that case. Run it as printed."]
    lines = ["**Replay a breach:** every breach prints, for the smallest case Hypothesis found, one line that "
             "re-runs just that case from any folder where the backend imports:", "",
             "```", f"replay: {replay_line(rule.id)}", "```", ""]
    caught = next((d for d in defects if not d.fault), None)
    if caught is not None:
        lines += [f"To see one, run the planted defect `{caught.spec}` against this rule, then run the `replay:` "
                  "line it prints:", "", "```",
                  f"pytest --pyargs rmsnorm_conformance.suites --backend={caught.spec} --rule={rule.id} -x", "```"]
    return lines


def family_page(family: Family, defects: dict[str, list[Defect]], tests: dict[str, list[str]]) -> str:
    head = [f"# {family.title}", "", family.about, "",
            f"Generated from `contract/families/{family.name}.py` and `zoo/` (`rmsnorm-conformance explain "
            f"{family.name}` prints the same). The words around these rules, and the bounds, are in "
            "[CONTRACT.md](../../CONTRACT.md).", ""]
    return "\n".join(head) + "\n" + "\n".join(explain(r, defects.get(r.id, []), tests.get(r.id, []), "##")
                                              for r in family.rules)


def family_pages() -> dict[str, str]:
    """Family name -> its page of the rule reference (docs/rules/<family>.md on the site)."""
    from .suites.rule_index import rule_tests

    defects, tests = defects_by_rule(), rule_tests()
    return {name: family_page(f, defects, tests) for name, f in families().items()}


def near_matches(query: str) -> list[str]:
    """Rule ids a mistyped ``query`` may have meant, nearest first: those that contain it or whose name (the part
    after the family) starts with it, then the closest spellings of the id or of the name alone."""
    q = query.lower().strip()

    def closeness(rule_id: str) -> float:
        name = rule_id.split(".", 1)[-1]
        if q and (q in rule_id or name.startswith(q)):
            return 2.0
        return max(difflib.SequenceMatcher(None, q, rule_id).ratio(), difflib.SequenceMatcher(None, q, name).ratio())

    scored = sorted(((closeness(r.id), r.id) for r in ALL_RULES), key=lambda pair: -pair[0])
    return [rule_id for score, rule_id in scored if score >= 0.75][:5]


def _listing() -> str:
    return "\n".join(f"{name} ({f.title}): " + ", ".join(r.id for r in f.rules) for name, f in families().items())


def main(argv: list[str] | None = None) -> int:
    """``rmsnorm-conformance explain RULE|FAMILY``: print a rule (or every rule of a family); with no argument, or
    ``--list``, the rule ids by family. An unknown id exits 2 and names the nearest ones."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in ([], ["--list"]) or args[0] in ("-h", "--help"):
        print("usage: rmsnorm-conformance explain RULE  (a rule id such as axis_a.padding, or a family such as "
              "axis_a)\n")
        print(_listing())
        return 0
    if len(args) != 1:
        print(f"rmsnorm-conformance explain: one rule id, not {len(args)} arguments: {' '.join(args)}", file=sys.stderr)
        return 2
    query = args[0].strip()
    family = families().get(query)
    chosen = list(family.rules) if family else [r for r in ALL_RULES if r.id == query]
    if not chosen:
        near = near_matches(query)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        print(f"rmsnorm-conformance explain: no contract rule {query!r}{hint}\n"
              "`rmsnorm-conformance explain --list` lists every rule id.", file=sys.stderr)
        return 2
    from .suites.rule_index import rule_tests

    defects, tests = defects_by_rule(), rule_tests()
    print("\n".join(explain(r, defects.get(r.id, []), tests.get(r.id, [])) for r in chosen), end="")
    return 0

