"""The diagnoses of a run's bitwise breaches as a report shows them (markdown, terminal, step summary), and the
revealed reduction trees drawn side by side (a picture beside the report, and the ``fingerprint`` command's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..vocabulary.records import Collector, Summary

DIAGNOSES_TITLE = "Diagnoses of bitwise breaches"


def diagnosed(c: Collector) -> list[Summary]:
    """Summaries carrying a diagnosis, one per (backend, device, dtype, rule): the first kept."""
    seen: dict[tuple[str, str, str, str], Summary] = {}
    for s in sorted(c.summaries.values(), key=lambda s: s.key):
        if s.diagnosis is not None:
            seen.setdefault((s.backend, s.device, s.dtype, s.rule), s)
    return list(seen.values())


def lines_of(d: dict[str, Any], *, markdown: bool) -> list[str]:
    """A diagnosis's three parts, one line each (and a line per revealed reduction)."""
    t, s = d["threshold"], d["stage"]
    bullet = "- " if markdown else "  "
    code = (lambda text: f"`{text}`") if markdown else (lambda text: text)
    out = [f"{bullet}threshold ({t['parameter']}): {t['text']}"]
    if t.get("shows"):
        out.append(f"{bullet}shows at: {t['shows']}")
    out.append(f"{bullet}stage: {s['text']}")
    for f in d["fingerprint"]["reductions"]:
        trees = f.get("trees") or []
        if len(trees) == 2 and all(tree.get("tree") for tree in trees):
            sides = "; ".join(f"{label}: {code(tree['tree'])}" for label, tree in zip(f["settings"], trees,
                                                                                     strict=True))
            level = f.get("first_difference")
            where = "the same tree" if level is None else f"first differ at level {level}"
            out.append(f"{bullet}order, {f['reduction']}: {sides} ({where})")
        else:
            out.append(f"{bullet}order, {f['reduction']}: {f['text']}")
    out += [f"{bullet}note: {n}" for n in d.get("notes", [])]
    return out


def diagnosis_lines(c: Collector, *, markdown: bool) -> list[str]:
    """Every diagnosed breach: a heading line, then its parts."""
    out: list[str] = []
    for s in diagnosed(c):
        head = f"{s.backend} on {s.device}, {s.dtype}: {s.rule}"
        out += ([f"### {head}", ""] if markdown else [head])
        out += lines_of(s.diagnosis or {}, markdown=markdown)
        if markdown:
            out.append("")
    return out


def one_line(d: dict[str, Any]) -> str:
    """The diagnosis in one line, for a step summary's breach: threshold, stage, where the orders part."""
    parts = [d["threshold"]["text"], d["stage"]["kind"]]
    if d["stage"].get("rounding_class"):
        parts[-1] += f" ({d['stage']['rounding_class']})"
    for f in d["fingerprint"]["reductions"]:
        level = f.get("first_difference")
        if level is not None:
            parts.append(f"{f['reduction']}: trees differ from level {level}")
    return "; ".join(parts)


# --- pictures -------------------------------------------------------------------------------------------------


def _layout(tree: Any) -> tuple[dict[int, float], list[tuple[float, float, float, float]], float]:
    """x of each leaf (in tree order), the segments of the dendrogram and its height."""
    xs: dict[int, float] = {}
    segments: list[tuple[float, float, float, float]] = []

    def walk(t: Any) -> tuple[float, float]:
        if isinstance(t, int):
            xs[t] = float(len(xs))
            return xs[t], 0.0
        (xa, ha), (xb, hb) = walk(t[0]), walk(t[1])
        h = 1 + max(ha, hb)
        segments.extend([(xa, ha, xa, h), (xb, hb, xb, h), (xa, h, xb, h)])
        return (xa + xb) / 2, h

    _, height = walk(tree)
    return xs, segments, height


def parse_newick(text: str) -> Any:
    """The tree of ``fingerprint.newick``'s text."""
    pos = 0

    def node() -> Any:
        nonlocal pos
        if text[pos] == "(":
            pos += 1
            left = node()
            pos += 1  # ","
            right = node()
            pos += 1  # ")"
            return (left, right)
        end = pos
        while end < len(text) and text[end].isdigit():
            end += 1
        value, pos = int(text[pos:end]), end
        return value

    return node()


def draw_trees(plt: Any, rows: Sequence[tuple[str, Sequence[tuple[str, Any]], int | None]]) -> Any:
    """A figure with one row per reduction, each with its trees side by side (label, tree) and the first level
    where they differ drawn as a dashed line."""
    fig, axes = plt.subplots(len(rows), max(len(r[1]) for r in rows), squeeze=False,
                             figsize=(5.5 * max(len(r[1]) for r in rows), 2.6 * len(rows)))
    for r, (reduction, sides, level) in enumerate(rows):
        for k, (label, tree) in enumerate(sides):
            ax = axes[r][k]
            ax.set_title(f"{reduction}: {label}", fontsize=9)
            if tree is None:
                ax.text(0.5, 0.5, "not revealed", ha="center", va="center", transform=ax.transAxes)
                ax.axis("off")
                continue
            xs, segments, height = _layout(tree)
            for x0, y0, x1, y1 in segments:
                ax.plot([x0, x1], [y0, y1], color="C0", linewidth=1.2)
            ax.set_xticks(list(xs.values()), [str(leaf) for leaf in xs], fontsize=7, rotation=90)
            ax.set_ylabel("level", fontsize=8)
            ax.set_ylim(-0.2, height + 0.5)
            if level is not None:
                ax.axhline(level, color="C3", linestyle="--", linewidth=0.8)
                ax.text(0, level + 0.1, f"first differ: level {level}", color="C3", fontsize=7)
    fig.tight_layout()
    return fig


def fingerprint_rows(d: dict[str, Any]) -> list[tuple[str, list[tuple[str, Any]], int | None]]:
    """The rows ``draw_trees`` draws for one diagnosis."""
    rows = []
    for f in d["fingerprint"]["reductions"]:
        trees = f.get("trees") or []
        sides = [(label, parse_newick(t["tree"]) if t.get("tree") else None)
                 for label, t in zip(f["settings"], trees, strict=False)]
        if sides:
            rows.append((f["reduction"], sides, f.get("first_difference")))
    return rows
