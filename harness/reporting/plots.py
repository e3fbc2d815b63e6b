"""The report's pictures: PNGs written beside a markdown report and linked from it, when matplotlib is installed
(``pip install 'rmsnorm-conformance[plots]'``).

ULP-error histograms per backend and dtype (Axis-B output), worst margin against dim, bandwidth against rows
(from a benchmark JSON) and a parity heat map (backend x backend, share of bitwise-equal rows). Drawing never
fails a report: ``draw`` returns what it drew and, for the rest, why not.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...contract.families import axis_b, parity
from ..vocabulary.records import Collector
from .pick_a_kernel import (
    BENCH_ALIASES,
    DTYPE_ORDER,
    SHORT_DTYPE,
    TARGET_BENCH_DIMS,
    _machine,
    bench_device,
    bench_dtype,
)

INSTALL_HINT = "pip install 'rmsnorm-conformance[plots]'"
KINDS = ("ulp-histogram", "margin-vs-dim", "bandwidth-vs-rows", "parity", "fingerprint")
_DPI = 110
HATCHES = ("", "//", "..", "xx")
MARKERS = ("o", "^", "s", "D")
# One colour per backend across every picture of a report (set by draw).
_COLOURS: dict[str, str] = {}


def _colour(label: str) -> str:
    return _COLOURS.get(label.split(" on ")[0], "grey")


@dataclass
class Pictures:
    """What ``draw`` wrote: (title, file name beside the report) per picture, and why the others are missing."""

    images: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def draw(c: Collector, bench: dict[str, Any] | None, directory: str | Path, stem: str) -> Pictures:
    """Draw every picture the records allow into ``directory`` as ``<stem>-<kind>.png``; remove a previous run's
    pictures of kinds not drawn now, so the folder never shows stale ones beside the report. Never raises."""
    out = Pictures()
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)  # no display, no GUI toolkit: files only
        import matplotlib.pyplot as plt
    except Exception as exc:  # not installed, or broken: the report says so and goes on
        reason = "matplotlib is not installed" if isinstance(exc, ImportError) else f"matplotlib failed: {exc}"
        out.notes.append(f"Pictures were not drawn: {reason} ({INSTALL_HINT}).")
        return out
    directory = Path(directory)
    _COLOURS.clear()
    names = {s.backend for s in c.summaries.values() if "=" not in s.backend}
    names |= {BENCH_ALIASES.get(r.get("backend", ""), r.get("backend", "")) for r in (bench or {}).get("records", [])}
    _COLOURS.update({name: f"C{i % 10}" for i, name in enumerate(sorted(names - {"copy", ""}))})
    drawers = {"ulp-histogram": ("ULP error per backend and dtype (Axis-B output)", _ulp_histogram),
               "margin-vs-dim": ("Worst Axis-B margin against dim", _margin_vs_dim),
               "bandwidth-vs-rows": ("Forward bandwidth against rows (benchmark)", _bandwidth_vs_rows),
               "parity": ("Parity: share of bitwise-equal rows", _parity),
               "fingerprint": ("Reduction order at the two settings of the first diagnosed breach", _fingerprint)}
    for kind in KINDS:
        title, drawer = drawers[kind]
        name = f"{stem}-{kind}.png"
        fig = None
        try:
            fig, missing = drawer(plt, c, bench)
            if fig is None:
                out.notes.append(f"{title}: not drawn, {missing}.")
                with contextlib.suppress(OSError):
                    (directory / name).unlink()
                continue
            _save(fig, directory / name)
            out.images.append((title, name))
        except Exception as exc:  # a picture must never cost the report
            out.notes.append(f"{title}: not drawn, plotting failed: {type(exc).__name__}: {exc}.")
        finally:
            if fig is not None:
                plt.close(fig)
    return out


def temporary_beside(path: Path) -> tuple[int, str]:
    """A new temporary file beside ``path``, to be renamed onto it once written (so that a reader never sees half
    a file), with the mode any file the process makes gets: mkstemp makes it for its owner alone (0600), and a
    report is read by whoever reads the run's output (a CI job's upload step, another user)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    mask = os.umask(0o022)  # read by setting it: os has no getter
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
    return fd, tmp


def _save(fig: Any, path: Path) -> None:
    """Atomically, as the report itself is written: a reader never sees half a PNG."""
    fd, tmp = temporary_beside(path)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=_DPI, bbox_inches="tight")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _dtype_key(dtype: str) -> int:
    return DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)


def _label(backend: str, device: str, devices_of: dict[str, set[str]]) -> str:
    return backend if len(devices_of.get(backend, ())) <= 1 else f"{backend} on {_machine(device)}"


def _device_index(label: str, devices_of: dict[str, set[str]]) -> int:
    """Which of its backend's devices a label names: colour says the backend, hatch or marker the device."""
    backend, _, device = label.partition(" on ")
    devices = sorted(_machine(d) for d in devices_of.get(backend, ()))
    return devices.index(device) if device in devices else 0


def _devices_of(c: Collector) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for s in c.summaries.values():
        if "=" not in s.backend:
            found.setdefault(s.backend, set()).add(s.device)
    return found


def _ulp_histogram(plt: Any, c: Collector, bench: Any) -> tuple[Any, str]:
    """One panel per dtype, one bar group per backend: the share of elements at each ULP distance. Log-scaled
    shares, since a kernel's rare 2-ULP elements are the point of the picture."""
    # (here, not at the top: the report's writer needs no torch, so that a run interrupted while it imported torch
    # can still say so in its report, controller.py)
    from ..checking.comparison import ULP_BINS, ulp_bin_label

    hists: dict[str, dict[str, list[int]]] = {}
    devices_of = _devices_of(c)
    for s in c.summaries.values():
        if s.rule != axis_b.OUTPUT.id or not s.ulp_hist:
            continue
        label = _label(s.backend, s.device, devices_of)
        dtype = s.dtype.split("-w_")[0]
        acc = hists.setdefault(dtype, {}).setdefault(label, [0] * ULP_BINS)
        for i, n in enumerate(s.ulp_hist[:ULP_BINS]):
            acc[i] += n
    if not hists:
        return None, "no Axis-B output check recorded a ULP histogram"
    dtypes = sorted(hists, key=_dtype_key)
    used = max(i for per in hists.values() for h in per.values() for i, n in enumerate(h) if n) + 1
    used = max(used, 3)
    fig, axes = plt.subplots(1, len(dtypes), figsize=(max(6.0, 4.2 * len(dtypes)), 4.0), squeeze=False,
                             sharey=True, layout="constrained")
    for ax, dtype in zip(axes[0], dtypes, strict=True):
        per = hists[dtype]
        names = sorted(per)
        width = 0.8 / len(names)
        smallest = 1.0
        for j, name in enumerate(names):
            total = sum(per[name]) or 1
            shares = [n / total for n in per[name][:used]]
            smallest = min([smallest, *(v for v in shares if v > 0)])
            xs = [i + (j - (len(names) - 1) / 2) * width for i in range(used)]
            ax.bar(xs, [v if v > 0 else math.nan for v in shares], width=width, color=_colour(name),
                   hatch=HATCHES[_device_index(name, devices_of) % len(HATCHES)], edgecolor="white",
                   linewidth=0.3, label=f"{name} ({_count(total)} elements)")
        ax.set_yscale("log")
        ax.set_ylim(min(1e-3, smallest / 3), 1.5)
        ax.set_xticks(range(used), [ulp_bin_label(i) for i in range(used)], rotation=45 if used > 6 else 0)
        ax.set_xlabel("ULP error")
        ax.set_title(SHORT_DTYPE.get(dtype, dtype))
        ax.grid(axis="y", which="major", alpha=0.3)
    axes[0][0].set_ylabel("share of elements (log)")
    _legend(fig, axes[0][-1])
    fig.suptitle("Axis-B output: ULP error per element, by backend (0 = the reference's bits)")
    fig.supxlabel("ULPs in the output dtype between each element and the reference rounded to it", fontsize=9)
    return fig, ""


def _margin_vs_dim(plt: Any, c: Collector, bench: Any) -> tuple[Any, str]:
    """Worst margin per drawn dim, one line per backend, one panel per dtype: the bound is 1."""
    points: dict[str, dict[str, dict[int, float]]] = {}
    devices_of = _devices_of(c)
    for s in c.summaries.values():
        if not s.rule.startswith("axis_b.") or not s.dim_margins:
            continue
        dtype = s.dtype.split("-w_")[0]
        per = points.setdefault(dtype, {}).setdefault(_label(s.backend, s.device, devices_of), {})
        for dim, margin in s.dim_margins.items():
            if isinstance(margin, float) and math.isfinite(margin):
                per[int(dim)] = max(per.get(int(dim), margin), margin)
    if not points:
        return None, "no Axis-B check recorded a margin per dim"
    dtypes = sorted(points, key=_dtype_key)
    fig, axes = plt.subplots(1, len(dtypes), figsize=(max(6.0, 4.2 * len(dtypes)), 4.0), squeeze=False,
                             sharey=True, layout="constrained")
    top = max(v for per in points.values() for line in per.values() for v in line.values())
    for ax, dtype in zip(axes[0], dtypes, strict=True):
        for name in sorted(points[dtype]):
            line = points[dtype][name]
            dims = sorted(line)
            # Drawn dims are a scatter, not a series: no lines between them. Colour says the backend, the
            # marker its device.
            ax.scatter(dims, [line[d] for d in dims], s=22, label=name, color=_colour(name), alpha=0.8,
                       marker=MARKERS[_device_index(name, devices_of) % len(MARKERS)])
        ax.axhline(1.0, color="red", linestyle="--", linewidth=1, label="bound (margin 1)")
        for target in TARGET_BENCH_DIMS:
            ax.axvline(target, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib_ticker().FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("dim (log scale; dotted: 128 and 4096)")
        ax.set_title(SHORT_DTYPE.get(dtype, dtype))
        ax.set_ylim(0, max(1.1, top * 1.1))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("worst error / allowed error")
    _legend(fig, axes[0][-1])
    fig.suptitle("Axis-B: worst margin per dim (above 1 fails)")
    return fig, ""


def _bandwidth_vs_rows(plt: Any, c: Collector, bench: dict[str, Any] | None) -> tuple[Any, str]:
    """GB/s against rows, per target dim, one line per backend plus the device copy: log on both axes, since
    rows span 1 to millions."""
    if not bench:
        return None, "no benchmark JSON was given (--bench-json, or merge's --bench)"
    dtype = bench_dtype(bench)
    lines: dict[int, dict[str, dict[int, float]]] = {}
    for r in bench.get("records", []):
        if (r.get("dtype") != dtype or r.get("variant", "rms_norm") != "rms_norm"
                or r.get("kind", "forward") not in ("forward", "latency") or not r.get("gbps")):
            continue
        name = BENCH_ALIASES.get(r["backend"], r["backend"])
        lines.setdefault(r["dim"], {}).setdefault(name, {})[r["rows"]] = r["gbps"]
    if not lines:
        return None, "the benchmark JSON holds no forward or latency record with GB/s"
    dims = sorted(lines, reverse=True)
    fig, axes = plt.subplots(1, len(dims), figsize=(max(6.0, 4.6 * len(dims)), 4.0), squeeze=False,
                             layout="constrained")
    names = sorted({n for per in lines.values() for n in per if n != "copy"})
    for ax, dim in zip(axes[0], dims, strict=True):
        for name in names:
            line = lines[dim].get(name)
            if line:
                rows = sorted(line)
                ax.plot(rows, [line[n] for n in rows], marker="o", markersize=4, label=name, color=_colour(name))
        copy = lines[dim].get("copy")
        if copy:
            rows = sorted(copy)
            ax.plot(rows, [copy[n] for n in rows], linestyle="--", color="black", linewidth=1,
                    label="device copy")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rows (log scale)")
        ax.set_title(f"dim {dim}")
        ax.grid(which="major", alpha=0.3)
    axes[0][0].set_ylabel("GB/s (log scale)")
    _legend(fig, axes[0][-1])
    where = _machine(bench_device(bench)) or "the benchmark's device"
    fig.suptitle(f"Forward bandwidth against rows, {dtype} on {where} (higher is better; 0 GB/s not drawn)")
    return fig, ""


def _parity(plt: Any, c: Collector, bench: Any) -> tuple[Any, str]:
    """Backend x backend, one panel per device: the share of plain random rows with identical bits
    (cross-backend parity); a pair the parity gate checked also shows how many of its checks were equal."""
    rows, gate = _parity_counts(c)
    if not rows and not gate:
        return None, "no parity was recorded (it needs two backends on one device, or --require-parity)"
    devices = sorted({k[0] for k in (*rows, *gate)})
    names_of = {d: sorted({n for k in (*rows, *gate) if k[0] == d for n in k[1:]}) for d in devices}
    size = max(len(names) for names in names_of.values())
    side = 0.8 * size + 1.6
    fig, axes = plt.subplots(1, len(devices), figsize=(side * len(devices) + 1.2, side + 0.6), squeeze=False,
                             layout="constrained")
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="#dddddd")  # grey: the diagonal, and pairs never compared
    image = None
    for ax, device in zip(axes[0], devices, strict=True):
        names = names_of[device]
        grid, text = _parity_grid(device, names, rows, gate)
        image = ax.imshow(grid, vmin=0, vmax=1, cmap=cmap)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_yticks(range(len(names)), names)
        for i in range(len(names)):
            for j in range(len(names)):
                value = grid[i][j]
                dark = not math.isnan(value) and (value > 0.85 or value < 0.15)
                ax.text(j, i, text[i][j] or "–", ha="center", va="center", fontsize=8,
                        color="white" if dark else "black")
        ax.set_title(device)
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), label="share bitwise equal", shrink=0.8)
    fig.suptitle("Parity: rows with identical bits on the same inputs\n(gate: --require-parity checks equal / run)",
                 fontsize=10)
    return fig, ""


ParityCounts = dict[tuple[str, str, str], list[int]]  # (device, backend, backend) -> [equal, compared]


def _parity_counts(c: Collector) -> tuple[ParityCounts, ParityCounts]:
    """Rows with identical bits per backend pair and device, and the parity gate's equal checks per pair."""
    rows: ParityCounts = {}
    gate: ParityCounts = {}
    for p in c.parity:
        a, b = sorted(p["pair"].split(" / ", 1))
        acc = rows.setdefault((p["device"], a, b), [0, 0])
        if "rows" in p:  # rows whose every element has identical bits
            acc[0] += p["equal_rows"]
            acc[1] += p["rows"]
        else:  # a report from before rows were recorded: the share of equal elements
            acc[0] += p["equal"]
            acc[1] += p["total"]
    for s in c.summaries.values():
        if s.rule == parity.BITWISE.id and "=" in s.backend and s.checks and "/" not in s.device:
            a, b = sorted(s.backend.split("=", 1))
            acc = gate.setdefault((s.device, a, b), [0, 0])
            acc[0] += s.checks - s.failures - s.expected_failures
            acc[1] += s.checks
    return rows, gate


def _parity_grid(device: str, names: list[str], rows: ParityCounts,
                 gate: ParityCounts) -> tuple[list[list[float]], list[list[str]]]:
    """One device's panel: the share equal per pair (NaN where never compared) and each cell's text."""
    grid = [[math.nan] * len(names) for _ in names]
    text = [["" for _ in names] for _ in names]
    for i in range(len(names)):
        text[i][i] = "self"
    for (d, a, b), (n_equal, total) in rows.items():
        if d == device and total:
            i, j = names.index(a), names.index(b)
            grid[i][j] = grid[j][i] = n_equal / total
            text[i][j] = text[j][i] = f"{n_equal / total:.0%} rows"
    for (d, a, b), (n_equal, total) in gate.items():
        if d == device and total:
            i, j = names.index(a), names.index(b)
            if math.isnan(grid[i][j]):
                grid[i][j] = grid[j][i] = n_equal / total
            line = f"gate {n_equal}/{total}"
            text[i][j] = text[j][i] = f"{text[i][j]}\n{line}".strip()
    return grid, text


def _fingerprint(plt: Any, c: Collector, bench: Any) -> tuple[Any, str]:
    """The revealed trees of the first diagnosed bitwise breach, side by side (reporting/diagnoses.py)."""
    from .diagnoses import diagnosed, draw_trees, fingerprint_rows

    for s in diagnosed(c):
        rows = fingerprint_rows(s.diagnosis or {})
        if any(tree is not None for _, sides, _ in rows for _, tree in sides):
            fig = draw_trees(plt, rows)
            fig.suptitle(f"{s.backend} on {s.device}, {s.dtype}: {s.rule}", fontsize=10, y=1.02)
            return fig, ""
    return None, "no diagnosed breach has a revealed order"


def matplotlib_ticker() -> Any:
    import matplotlib.ticker

    return matplotlib.ticker


def _count(n: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def _legend(fig: Any, ax: Any) -> None:
    """Beside the last panel, outside the data: 2 to 6 backends must not hide any bar or line."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
