"""The report's "Pick a kernel" section and its pictures: first in every report and in merge, sorted as
documented, with parity partners and benchmark speeds; pictures drawn when matplotlib is there, and never an
error when it is not or when drawing fails."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
import torch

from rmsnorm_conformance.contract import Tolerance
from rmsnorm_conformance.harness.checking.comparison import compare_within
from rmsnorm_conformance.harness.plugin.run_options import load_bench as _load_bench
from rmsnorm_conformance.harness.reporting import plots, render
from rmsnorm_conformance.harness.reporting.merge import merge
from rmsnorm_conformance.harness.reporting.pick_a_kernel import SORT_ORDER, labelled, pick_rows
from rmsnorm_conformance.harness.reporting.render import render_markdown, render_report, write_report
from rmsnorm_conformance.harness.vocabulary.records import Check, Collector

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None

BENCH = {"environment": {"device cuda:0": "NVIDIA H200"}, "records": [
    {"backend": "copy", "kind": "forward", "rows": 65536, "dim": 4096, "dtype": "bfloat16", "gbps": 4000.0,
     "copy_gbps": 4000.0},
    {"backend": "fast", "kind": "forward", "rows": 65536, "dim": 4096, "dtype": "bfloat16", "gbps": 3920.0,
     "copy_gbps": 4000.0},
    {"backend": "fast", "kind": "forward", "rows": 2097152, "dim": 128, "dtype": "bfloat16", "gbps": 2000.0,
     "copy_gbps": 4000.0},
    {"backend": "twin", "kind": "forward", "rows": 65536, "dim": 4096, "dtype": "bfloat16", "gbps": 400.0,
     "copy_gbps": 4000.0},
    {"backend": "fast", "kind": "latency", "rows": 1, "dim": 4096, "dtype": "bfloat16", "gbps": 2.0,
     "copy_gbps": 4.0, "us": 11.0, "rms_norm_us": 10.0, "ratio_to_rms_norm": 1.1},
    {"backend": "fast", "kind": "latency", "rows": 256, "dim": 4096, "dtype": "bfloat16", "gbps": 400.0,
     "copy_gbps": 700.0, "us": 9.0, "rms_norm_us": 10.0},
]}


def _add(c, backend, rule="axis_b.output", passed=True, device="cpu", dim=4096, **over):
    stats = {"max_abs": 0.01, "max_rel": 0.01, "max_ulp": 1, "margin": 0.3, "ulp_hist": [90, 10]} \
        if rule.startswith("axis_b.") else {}
    severity = "interface" if rule == "semantics.shape_guard" else "numerics"
    c.add(Check(backend, device, "bfloat16", dim, rule, passed, severity=severity,
                gating=severity == "numerics", detail="" if passed else f"{backend} broke {rule}",
                **{**stats, **over}))


def _collector():
    """Five backends, one per sorting step: a numerics failure, an interface warning, a pair bitwise equal
    to each other (one faster), and one alone."""
    c = Collector(environment={"device cuda:0": "NVIDIA H200"})
    for name in ("broken", "impolite", "fast", "twin", "alone"):
        _add(c, name)
    _add(c, "broken", rule="axis_a.batch_size", passed=False)
    _add(c, "impolite", rule="semantics.shape_guard", passed=False)
    c.add(Check("fast=twin", "cpu", "bfloat16", 128, "parity.bitwise", True))
    c.parity += [{"device": "cpu", "dtype": "bfloat16", "dim": 128, "pair": "fast / twin", "equal": 256,
                  "total": 256, "max_ulp": 0, "equal_rows": 2, "rows": 2},
                 {"device": "cpu", "dtype": "bfloat16", "dim": 128, "pair": "fast / alone", "equal": 200,
                  "total": 256, "max_ulp": 1, "equal_rows": 1, "rows": 2}]
    return c


def _section(text):
    start = text.index("## Pick a kernel")
    return text[start: text.index("### Breaches", start)]


def test_the_section_comes_first_and_is_sorted_as_documented():
    md = render_markdown(_collector(), bench=BENCH)
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Pick a kernel"
    assert SORT_ORDER in md  # the order is written beside the table
    rows = pick_rows(labelled(_collector()), BENCH)
    # PASS before FAIL; no interface warning before one; more partners first; then more bandwidth.
    assert [r.backend for r in rows] == ["fast", "twin", "alone", "impolite", "broken"]
    assert rows[-1].verdict == "FAIL" and rows[-1].numerics_breached == ["axis_a.batch_size"]
    assert rows[-2].interface_breached == ["semantics.shape_guard"]


def test_parity_partners_and_breaches_by_severity():
    md = render_markdown(_collector(), bench=BENCH)
    rows = {r.backend: r for r in pick_rows(labelled(_collector()))}
    assert rows["fast"].partners == ["twin"] and rows["fast"].required_partners == ["twin"]
    assert rows["alone"].partners == []  # 1 of 2 rows equal: not a partner
    assert "twin (required)" in _section(md)
    breaches = md[md.index("### Breaches"): md.index("## Environment")]
    assert breaches.index("axis_a.batch_size") < breaches.index("semantics.shape_guard")  # numerics first


def test_the_bench_json_gives_copy_fraction_and_latency():
    rows = {r.backend: r for r in pick_rows(labelled(_collector()), BENCH)}
    assert rows["fast"].speed.copy_fraction == {"4096": 0.98, "128": 0.5}
    assert rows["fast"].speed.latency == pytest.approx((0.9, 1.1))
    assert rows["fast"].speed_elsewhere  # measured on a GPU, the rows are on the CPU
    section = _section(render_markdown(_collector(), bench=BENCH))
    assert "0.98 / 0.50 †" in section and "0.90–1.10× †" in section and "NVIDIA H200" in section
    data = json.loads(render_report(_collector(), "r.json", bench=BENCH))
    assert data["pick"]["rows"][0]["backend"] == "fast" and data["pick"]["bench_device"] == "cuda (NVIDIA H200)"
    assert Collector.from_json(data).checks == _collector().checks  # the derived section is not read back


def test_merge_opens_with_the_same_section(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(render_report(_collector(), path))
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(BENCH))
    merged = merge([path], bench=bench)
    assert merged.startswith("# Conformance matrix")
    assert next(ln for ln in merged.splitlines() if ln.startswith("## ")) == "## Pick a kernel"
    assert _section(merged) == _section(render_markdown(_collector(), bench=BENCH))


def test_ulp_histograms_and_margins_per_dim_are_recorded_and_survive_json():
    result = compare_within(torch.tensor([1.0, 1.0078125], dtype=torch.bfloat16), torch.tensor([1.0, 1.0]),
                            Tolerance(0.1, 0.1, "loose"))
    assert result.ulp_hist[:2] == (1, 1)
    c = _collector()
    _add(c, "fast", dim=1000, margin=0.7)
    back = Collector.from_json(json.loads(json.dumps(c.to_json())))
    (summary,) = [s for s in back.summaries.values() if s.backend == "fast" and s.dim == "other"]
    assert summary.ulp_hist == [90, 10] and summary.dim_margins == {"1000": 0.7}


def test_a_bad_bench_json_is_a_usage_error(tmp_path):
    (tmp_path / "b.json").write_text('{"no": "records"}')
    with pytest.raises(pytest.UsageError, match="not a benchmark JSON"):
        _load_bench(str(tmp_path / "b.json"))
    with pytest.raises(pytest.UsageError, match="cannot be read"):
        _load_bench(str(tmp_path / "missing.json"))


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib is not installed (pip install '.[plots]')")
def test_pictures_are_written_beside_the_report_and_embedded(tmp_path):
    write_report(_collector(), tmp_path / "r.md", bench=BENCH, plots=True)
    md = (tmp_path / "r.md").read_text()
    for kind in plots.KINDS:
        png = tmp_path / f"r-{kind}.png"
        if kind == "fingerprint":  # no breach of this run was diagnosed: a note says so, no empty picture
            assert not png.exists() and "no diagnosed breach has a revealed order" in md
            continue
        assert png.read_bytes()[:4] == b"\x89PNG", kind
        assert f"](r-{kind}.png)" in md  # a relative link: the report and its pictures move together


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib is not installed (pip install '.[plots]')")
def test_the_revealed_trees_of_a_diagnosed_breach_are_drawn_beside_the_report(tmp_path):
    from tests.reporting.test_diagnosis import _collector_with_a_diagnosis

    write_report(_collector_with_a_diagnosis(), tmp_path / "r.md", plots=True)
    assert (tmp_path / "r-fingerprint.png").read_bytes()[:4] == b"\x89PNG"
    assert "](r-fingerprint.png)" in (tmp_path / "r.md").read_text()


def test_no_matplotlib_means_a_note_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    write_report(_collector(), tmp_path / "r.md", plots=True)
    md = (tmp_path / "r.md").read_text()
    assert "Pictures were not drawn: matplotlib is not installed" in md and "[plots]" in md
    assert not list(tmp_path.glob("*.png"))


def test_the_report_is_written_when_drawing_raises(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(render, "draw_pictures", broken)
    write_report(_collector(), tmp_path / "r.md", plots=True)
    md = (tmp_path / "r.md").read_text()
    assert md.startswith("# RMSNorm conformance report") and "Pictures were not drawn: RuntimeError: no fonts" in md
    if HAS_MATPLOTLIB:  # one picture failing costs that picture only
        monkeypatch.undo()
        monkeypatch.setattr(plots, "_parity", broken)
        write_report(_collector(), tmp_path / "r.md", plots=True)
        md = (tmp_path / "r.md").read_text()
        assert "plotting failed: RuntimeError: no fonts" in md and "](r-ulp-histogram.png)" in md


def test_a_test_ids_index_less_gpu_joins_its_models_row():
    from rmsnorm_conformance.harness.reporting.pick_a_kernel import device_label

    env = {"device cuda:0": "NVIDIA H200"}
    assert device_label("cuda", env) == device_label("cuda:0", env) == "cuda (NVIDIA H200)"
    two_models = {"device cuda:0": "NVIDIA H200", "device cuda:1": "NVIDIA A100"}
    assert device_label("cuda", two_models) == "cuda"  # which GPU ran it is unknown: no model is claimed
    assert device_label("cpu", env) == "cpu"


def test_a_backend_at_parity_with_itself_elsewhere_is_not_lifted_above_a_faster_peer():
    from rmsnorm_conformance.harness.reporting.pick_a_kernel import PickRow

    reference = PickRow("native", "cuda", "PASS", 10, [], [], "product_fp32", ["cuda", "native@cpu", "triton"])
    kernel = PickRow("cuda", "cuda", "PASS", 10, [], [], "product_fp32", ["native", "triton"])
    assert reference.partner_backends() == kernel.partner_backends() == 2
    fewer = PickRow("other", "cuda", "PASS", 10, [], [], "product_fp32", ["native"])
    assert sorted([fewer, reference], key=PickRow.sort_key)[0] is reference


def test_a_run_that_ended_early_passes_no_backend():
    """A backend with no failure in a run that was stopped reads INCOMPLETE, in "Pick a kernel" and in the
    verdict table: its checks that never started cannot pass. The failing backend stays FAIL."""
    c = _collector()
    c.incomplete = "interrupted (Ctrl-C or a signal)"
    rows = {r.backend: r.verdict for r in pick_rows(labelled(c))}
    assert rows["fast"] == "INCOMPLETE" and rows["broken"] == "FAIL"
    md = render_markdown(c, bench=BENCH)
    assert "| PASS " not in _section(md)
    finished = {r.backend: r.verdict for r in pick_rows(labelled(_collector()))}
    assert finished["fast"] == "PASS"
