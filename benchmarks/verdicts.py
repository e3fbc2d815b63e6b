"""The verdict each common RMSNorm implementation gets on this machine's CPU, and why: the gate (``--sweep=ci``) run
on each in turn, its JSON report read back into one table.

    python benchmarks/verdicts.py [--out reports/cpu/verdicts.md] [--workers 2] [--deadline 900]

The implementations: ``F.rms_norm`` as given and on an fp32 upcast, ``torch.compile`` of the seed formula (the
harness's adapters for them), a plain function, and Hugging Face's LlamaRMSNorm (Qwen3RMSNorm is the same code) and
GemmaRMSNorm (benchmarks/common_kernels.py). The GPU engines' verdicts come from reports/gpu/engines.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
# (what it is, --backend spec, what a reader should know of it beside its verdict)
IMPLEMENTATIONS: tuple[tuple[str, str, str], ...] = (
    ("`F.rms_norm`", "torch_rms_norm", "torch's own kernel, in x's dtype"),
    ("`F.rms_norm` on an fp32 upcast", "torch_rms_norm_fp32", "x and weight upcast, rounded back once"),
    ("`torch.compile` of the seed formula", "torch_compile", "inductor's generated kernel"),
    ("a plain function", "benchmarks.common_kernels:plain_rms_norm",
     "`x * rsqrt(mean(x^2) + eps) * w` in fp32, no shape check of its own"),
    ("Hugging Face `LlamaRMSNorm` (= `Qwen3RMSNorm`)", "benchmarks.common_kernels:LlamaRMSNorm",
     "the normalized row rounded to x's dtype, then times the weight; eager autograd"),
    ("Hugging Face `GemmaRMSNorm`", "benchmarks.common_kernels:GemmaRMSNorm",
     "fp32 inside, scales by `1 + weight`: not the contract's plain weight"),
)
FIRST_WORDS = 160  # of a breach's detail, in the table


def gate(spec: str, report: Path, args: argparse.Namespace) -> list[str]:
    """The gate's command for one implementation."""
    return [sys.executable, "-m", "pytest", "--pyargs", "rmsnorm_conformance.suites", f"--backend={spec}",
            "--device=cpu", "--sweep=ci", f"--deadline={args.deadline:g}", "-n", str(args.workers), "-q",
            *([f"--max-examples={args.max_examples}"] if args.max_examples else []),
            "-p", "no:cacheprovider", f"--report={report}"]


def why(data: dict, rule: str) -> str:
    """The smallest failing case's detail of ``rule``, cut to its first words."""
    details = [s["failing_detail"] for s in data["summaries"] if s["rule"] == rule and s.get("failing_detail")]
    text = " ".join((details[0] if details else "").split())
    return text if len(text) <= FIRST_WORDS else text[: FIRST_WORDS - 3] + "..."


def row(what: str, spec: str, note: str, data: dict) -> list[str]:
    failed = sorted({s["rule"] for s in data["summaries"] if s["failures"]}
                    | {o.get("rule") or "a test's error" for o in data["outcomes"].values()
                       if o["outcome"] in ("failed", "error")})
    warned = sorted({s["rule"] for s in data["summaries"] if s["warnings"]})
    reasons = "; ".join(f"**{r}**: {why(data, r)}" for r in failed) or "–"
    verdict = data.get("verdict_label") or data["verdict"]
    if data.get("incomplete"):
        verdict += f" ({data['totals']['checks']} checks; {data['incomplete']})"
    return [what, f"`{spec}`", verdict, note, ", ".join(failed) or "–", ", ".join(warned) or "–", reasons]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="reports/cpu/verdicts.md")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--deadline", type=float, default=900, help="seconds each implementation's gate may take")
    parser.add_argument("--max-examples", type=int, default=0, help="examples a sweep test (default: the ci sweep's)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for what, spec, note in IMPLEMENTATIONS:
            report = Path(tmp, spec.replace(":", "-") + ".json")
            done = subprocess.run(gate(spec, report, args), cwd=ROOT, check=False,
                                  env={**os.environ, "CI": "true"}, capture_output=True, text=True)
            if not report.is_file():
                last = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
                rows.append([what, f"`{spec}`", f"no report (exit {done.returncode})", note, "–", "–", last[0]])
                continue
            rows.append(row(what, spec, note, json.loads(report.read_text())))
            print(f"{spec}: {rows[-1][2]}", flush=True)
    command = "python benchmarks/verdicts.py " + shlex.join(
        ["--out", args.out, "--workers", str(args.workers), "--deadline", f"{args.deadline:g}",
         *(["--max-examples", str(args.max_examples)] if args.max_examples else [])])
    text = "\n".join([
        "# Verdicts of common RMSNorm implementations (CPU)", "",
        f"- device: CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch "
        f"{torch.__version__}, Python {platform.python_version()}, {datetime.date.today().isoformat()}",
        f"- command: `{command}`",
        "- each: `pytest --pyargs rmsnorm_conformance.suites --backend=SPEC --device=cpu --sweep=ci "
        f"--deadline={args.deadline:g} -n {args.workers}"
        + (f" --max-examples={args.max_examples}" if args.max_examples else "")
        + "`; a run its deadline cut short reads INCOMPLETE with what it found by then (a breach found is a breach)",
        "- the GPU engines' verdicts: [engines](../gpu/engines.md)",
        "",
        tabulate(rows, ["implementation", "backend", "verdict", "what it is", "numerics breached",
                        "interface warnings", "why (the smallest failing case's detail)"], tablefmt="github"),
        "",
    ])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
