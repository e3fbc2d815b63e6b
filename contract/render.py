"""CONTRACT.md's tables, rendered from the contract module, so that the words and the data cannot drift.

``rmsnorm-conformance contract`` prints the contract (the wheel ships CONTRACT.md beside this module: the rules'
text works from an install, far from a clone); ``--write`` rewrites the generated blocks of a CONTRACT.md in place,
and ``--check`` exits 1 if they differ from the module (CI and tests/package/test_contract_sync.py run that).
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

from tabulate import tabulate

from . import rmsnorm as c
from .canonical_order import render_markdown as _canonical_order
from .rules import Tolerance, UlpBound

BLOCK = re.compile(r"(<!-- generated:(?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S)


def _rules_table(rules: tuple) -> str:
    return tabulate([[f"`{r.id}`", r.title, r.severity, r.statement] for r in rules],
                    ["rule id", "name", "severity", "statement"], tablefmt="github")


def _bound(b: Tolerance | UlpBound) -> tuple[str, str]:
    return (b.describe(), b.why)


def _dtype_pairs_table() -> str:
    swept = ", ".join(c.PAIR_SWEPT_AXES)
    rows = [[x, w, "by default" if x == w else "where the backend declares it"] for x, w in c.DTYPE_PAIRS]
    return (tabulate(rows, ["x dtype", "weight dtype", "taken"], tablefmt="github")
            + f"\n\nMixed precision: {c.MIXED_PRECISION}"
            + f"\n\nSwept over every declared pair: the rules whose ids start with {swept} "
            + "(except " + ", ".join(f"`{r}`" for r in c.WEIGHTLESS_RULES) + ", which take no weight).")

def _counts(values: tuple[int, ...]) -> str:
    """``1–16, 255, 256``: runs of consecutive counts longer than three are written as ranges."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 3 else ", ".join(map(str, r)) for r in runs)


def _thresholds() -> str:
    multiples = ", ".join(map(str, c.THRESHOLD_SM_MULTIPLES))
    return "\n".join([
        f"- **Row counts:** {_counts(c.THRESHOLD_ROWS)}; and k × the GPU's SM count for k in {multiples} "
        f"({c.DEFAULT_SM_COUNT} SMs where no GPU is present).",
        f"- **Dims:** {', '.join(map(str, c.THRESHOLD_DIMS))}.",
        f"- **QK-norm:** `[T, H, {c.TARGET_DIMS['head_dim']}]` with H in {', '.join(map(str, c.QK_NORM_HEADS))} "
        f"and T in {', '.join(map(str, c.QK_NORM_TOKENS))}.",
        f"- **32-bit offsets:** the last {c.INT32_OFFSET_ROWS_CHECKED} rows of a batch of "
        f"{c.INT32_OFFSET_LIMIT // c.INT32_OFFSET_DIM + c.INT32_OFFSET_ROWS_CHECKED} x {c.INT32_OFFSET_DIM} (their "
        f"offsets at or past 2^{c.INT32_OFFSET_LIMIT.bit_length() - 1} elements), and of a strided view of rows "
        f"{2 * c.INT32_OFFSET_DIM} elements apart whose last rows start past it, under Axis-A (batch size) and "
        "Axis-B, where the device's memory holds them (else under \"Did not run\" with the reason).",
    ])


def _fp8_facts() -> str:
    from . import fp8

    return "\n".join([
        f"- **Format:** torch's `float8_e4m3fn`: largest finite {fp8.E4M3_MAX:g}, smallest normal "
        f"2^{round(math.log2(fp8.MIN_NORMAL))}, subnormal spacing "
        f"2^{round(math.log2(fp8.SUBNORMAL_SPACING))}, no infinities; an unsaturated conversion of a "
        f"value past {fp8.E4M3_OVERFLOW:g} gives NaN, so the reference clamps to +-{fp8.E4M3_MAX:g} before its one "
        "rounding.",
        f"- **Dynamic scale floor:** {fp8.MIN_SCALE:.6g} = 1 / (448 * 512), vLLM's `min_scaling_factor`: an all-zero "
        "row gets this scale, never a division by zero.",
        f"- **Output bound:** {c.FP8_OUTPUT_BOUND.describe()} in fp8, by ordered-bit distance. Why: "
        f"{c.FP8_OUTPUT_BOUND.why}",
        f"- **Scale bound:** {c.FP8_SCALE_BOUND.describe()} of the row's own scale. Why: {c.FP8_SCALE_BOUND.why}",
    ])


def _refused() -> str:
    from . import refusals

    layouts = tabulate([[f"`{name}`", what] for name, what in refusals.LAYOUTS.items()], ["layout", "what it is"],
                       tablefmt="github")
    limits = tabulate([[f"`{name}`", what] for name, what in refusals.INPUT_LIMITS.items()],
                      ["declaration", "what it limits"], tablefmt="github")
    return f"{limits}\n\n{layouts}\n\n{refusals.REFUSED}"


def render_blocks() -> dict[str, str]:
    header = "\n".join([
        f"- **Version:** {c.VERSION}",
        f"- **Formula:** `{c.FORMULA}`; default eps {c.DEFAULT_EPS:g}.",
        f"- **Dtypes:** {', '.join(c.DTYPES)}.",
        "- **Target dims:** " + ", ".join(f"{k} {v}" for k, v in c.TARGET_DIMS.items()) + ".",
        f"- **Domain:** {c.DOMAIN}",
    ])
    bounds_rows = []
    for prof in c.PROFILES.values():
        for dtype in c.DTYPES:
            bounds_rows.append([prof.name, dtype, "output", *_bound(prof.output_bound(dtype))])
        for dtype in c.DTYPES:
            bounds_rows.append([prof.name, dtype, "gradients", *_bound(prof.gradient_bound(dtype))])
    profiles = tabulate([[p.name, p.description] for p in c.PROFILES.values()], ["profile", "meaning"],
                        tablefmt="github")
    return {
        "header": header,
        "axis_a": _rules_table(c.AXIS_A_VARIANTS),
        "thresholds": _thresholds(),
        "axis_b": _rules_table(c.AXIS_B_RULES),
        "profiles": profiles,
        "bounds": tabulate(bounds_rows, ["profile", "dtype", "applies to", "bound", "why"], tablefmt="github"),
        "semantics": _rules_table(c.SEMANTIC_RULES),
        "gradients": _rules_table(c.GRADIENT_RULES),
        "interface": _rules_table(c.INTERFACE_RULES),
        "refused": _refused(),
        "parity": _rules_table(c.PARITY_RULES),
        "canonical_order": _canonical_order(),
        "dtype_pairs": _dtype_pairs_table(),
        "variant_forms": tabulate([[f"`{name}`", form] for name, form in c.VARIANTS.items()],
                                  ["method", "what it computes"], tablefmt="github"),
        "variants": _rules_table(c.VARIANT_RULES),
        "rounding_classes": tabulate(
            [[f"`{name}`", "every entry point", what] for name, what in c.ROUNDING_CLASSES.items()]
            + [[f"`{name}`", "fused_add's input", what] for name, what in c.FUSED_ADD_INPUTS.items()],
            ["class", "applies to", "where it rounds"], tablefmt="github"),
        "fp8_facts": _fp8_facts(),
        "fp8": _rules_table(c.FP8_RULES),
        "fp8_rounding_classes": tabulate([[f"`{name}`", what] for name, what in c.FP8_ROUNDING_CLASSES.items()],
                                         ["class", "where it rounds"], tablefmt="github"),
    }


def render(text: str) -> str:
    """``text`` with every generated block replaced by what the module says now."""
    blocks = render_blocks()
    missing = set(blocks) - {m.group("name") for m in BLOCK.finditer(text)}
    if missing:
        raise ValueError(f"CONTRACT.md lacks generated blocks: {', '.join(sorted(missing))}")
    return BLOCK.sub(lambda m: m.group(1) + blocks[m.group("name")] + "\n" + m.group(4), text)


# The CONTRACT.md the package ships: in a clone, a link to the one at the top of the repository.
SHIPPED = Path(__file__).with_name("CONTRACT.md")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="rmsnorm-conformance contract", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", default=None,
                        help="the CONTRACT.md to write or check (default: CONTRACT.md); a path alone is written")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the file's generated blocks from the module")
    action.add_argument("--check", action="store_true", help="exit 1 if the file differs from the module")
    args = parser.parse_args(argv)
    if args.path is None and not (args.write or args.check):
        sys.stdout.write(render(SHIPPED.read_text()))
        return 0
    path = Path(args.path or "CONTRACT.md")
    if not path.is_file():
        parser.error(f"{path}: no such file. Give the contract's markdown to check or rewrite, CONTRACT.md at the "
                     "root of a clone of this project (`rmsnorm-conformance contract` alone prints the contract)")
    text = path.read_text()
    try:
        new = render(text)
    except ValueError as exc:
        parser.error(f"{path}: {exc}")
    if args.check:
        if new != text:
            print(f"{path} is out of date with contract/: run `rmsnorm-conformance contract --write {path}`")
            return 1
        print(f"{path} matches contract/ (version {c.VERSION})")
        return 0
    path.write_text(new)
    print(f"wrote {path}")
    return 0
