"""The report: folding checks, verdicts, JSON round trips, merging, and what the markdown says."""

from __future__ import annotations

import json

from rmsnorm_conformance.harness.reporting.render import render_markdown, render_terminal, write_report
from rmsnorm_conformance.harness.vocabulary.records import Check, Collector, dim_bucket


def _check(**over):
    base = {"backend": "k", "device": "cpu", "dtype": "bfloat16", "dim": 4096, "rule": "axis_b.output",
            "passed": True, "max_abs": 0.01, "max_rel": 0.002, "max_ulp": 1, "margin": 0.4}
    return Check(**{**base, **over})


def test_checks_fold_into_summaries_with_worst_statistics():
    c = Collector()
    c.add(_check())
    c.add(_check(max_abs=0.02, margin=0.9, max_ulp=2))
    c.add(_check(dim=1000))
    (s4096,) = [s for s in c.summaries.values() if s.dim == "4096"]
    assert (s4096.checks, s4096.max_abs, s4096.margin, s4096.max_ulp) == (2, 0.02, 0.9, 2)
    assert dim_bucket(128) == "128" and dim_bucket(1000) == "other"
    assert c.verdict() == "PASS" and c.checks == 3


def test_the_smallest_failure_is_kept_as_the_minimal_case():
    c = Collector()
    c.add(_check(passed=False, case="Case(big)", replay="pytest a", size=1000))
    c.add(_check(passed=False, case="Case(small)", replay="pytest b", size=10))
    c.add(_check(passed=False, case="Case(bigger again)", replay="pytest c", size=500))
    c.add(_check(passed=False, case="Case(small, later)", replay="pytest d", size=10))
    (s,) = c.summaries.values()
    assert (s.failures, s.failing_case, s.replay) == (4, "Case(small, later)", "pytest d")
    assert c.verdict() == "FAIL"


def test_no_checks_with_conformance_tests_is_not_run():
    c = Collector(conformance_tests=3)
    c.add_not_run("cuda", "cpu", "no GPU")
    assert c.verdict() == "NOT RUN"
    md = render_markdown(c)
    assert "NOT RUN" in md and "no GPU" in md


def test_json_round_trip_and_merge_add_up():
    a, b = Collector(), Collector()
    a.add(_check())
    b.add(_check(margin=1.5, passed=False, case="C", replay="r"))
    b.add(_check(rule="axis_a.padding", max_abs=None, max_rel=None, max_ulp=None, margin=None))
    b.outcomes["t::x"] = {"outcome": "failed", "reason": "boom", "replay": "r", "where": "k-cpu"}
    merged = Collector.from_json(json.loads(json.dumps(a.to_json())))
    merged.merge_json(json.loads(json.dumps(b.to_json())))
    assert merged.checks == 3 and merged.failed_checks == 1 and merged.verdict() == "FAIL"
    out = next(s for s in merged.summaries.values() if s.rule == "axis_b.output")
    assert out.margin == 1.5 and out.failing_case == "C"


def test_markdown_and_terminal_show_every_table():
    c = Collector(environment={"torch": "x", "contract version": "1.0.0"})
    c.add(_check())
    c.add(_check(rule="axis_a.batch_size", max_abs=None, max_rel=None, max_ulp=None, margin=None,
                 passed=False, case="BatchSizeCase(...)", replay="pytest x --replay=y"))
    c.add(_check(rule="semantics.purity", max_abs=None, max_rel=None, max_ulp=None, margin=None))
    c.outcomes["suites/t.py::test[k]"] = {"outcome": "failed", "reason": "contract rule axis_a.batch_size",
                                          "replay": "pytest x --replay=y", "where": "k"}
    md = render_markdown(c)
    for heading in ("## Environment", "## Verdict per backend and device", "## Tolerance", "## Axis-A",
                    "## Other rules", "## Did not run", "## Failures"):
        assert heading in md
    assert "BatchSizeCase(...)" in md and "`pytest x --replay=y`" in md
    terminal = "\n".join(render_terminal(c))
    assert "replay: pytest x --replay=y" in terminal and "FAIL" in terminal


def test_write_picks_the_format_by_suffix(tmp_path):
    c = Collector()
    c.add(_check())
    assert json.loads(write_report(c, tmp_path / "a" / "r.json").read_text())["verdict"] == "PASS"
    assert write_report(c, tmp_path / "r.md").read_text().startswith("# RMSNorm conformance report: PASS")


def test_a_failed_test_without_checks_joins_its_backends_device_row():
    """The test id names the device type (cuda), the checks the device (cuda:0): one row, not a second of 0 checks."""
    from rmsnorm_conformance.harness.reporting.render import backend_rows

    c = Collector()
    c.add(_check(device="cuda:0"))
    c.outcomes["suites/t.py::test[k-cuda-bfloat16]"] = {"outcome": "failed", "reason": "boom", "replay": "r",
                                                        "where": "k-cuda", "backend": "k", "device": "cuda",
                                                        "rule": "semantics.empty_batch"}
    rows = backend_rows(c)
    assert [(r[0], r[1], r[4]) for r in rows] == [("k", "cuda:0", "FAIL")]
    assert "semantics.empty_batch" in rows[0][5]


def test_a_summarys_json_record_is_asdicts_without_its_deep_copy():
    from dataclasses import asdict

    from rmsnorm_conformance.harness.vocabulary.records import Summary, _summary_dict

    s = Summary("b", "cpu", "bfloat16", "4096", "axis_b.output", checks=3, failures=1, max_abs=float("inf"),
                max_ulp=7, dims=[4096, 4097], failing_case="c", ulp_hist=[5, 0, 1], dim_margins={"4096": 0.5})
    record = _summary_dict(s)
    assert record == asdict(s)
    record["dims"].append(1)
    record["dim_margins"]["1"] = 2.0
    assert s.dims == [4096, 4097] and s.dim_margins == {"4096": 0.5}  # the summary's own lists stay its own


def test_progress_reports_are_compact_strict_json_and_the_last_one_is_indented(tmp_path):
    c = Collector()
    progress = write_report(c, tmp_path / "p.json", progress=True).read_text()
    final = write_report(c, tmp_path / "f.json").read_text()
    assert json.loads(progress) == json.loads(final)
    assert "\n" not in progress.rstrip("\n") and final.count("\n") > 5


def test_a_json_reports_pick_is_that_of_its_own_records_relabelled():
    """The JSON report derives "pick a kernel" from the records it has just serialised, not from a second
    serialisation: the same rows, and the records beside them untouched by the derivation."""
    from rmsnorm_conformance.harness.reporting.pick_a_kernel import labelled, pick_json
    from rmsnorm_conformance.harness.reporting.render import render_report
    from rmsnorm_conformance.harness.vocabulary.records import finite_tree

    c = Collector(environment={"device cuda:0": "NVIDIA H200"})
    c.add(_check(device="cuda:0", margin=float("inf"), passed=False, case="Case(a)", replay="pytest a", size=3))
    c.add(_check(backend="other", dtype="float16", dim=128))
    c.outcomes["t::x[k-cuda:0-bfloat16]"] = {"outcome": "failed", "backend": "k", "device": "cuda:0", "rule": "r"}
    report = json.loads(render_report(c, "r.json", progress=True))
    assert report["pick"] == json.loads(json.dumps(finite_tree(pick_json(labelled(c)))))
    assert {r["backend"] for r in report["pick"]["rows"]} == {"k", "other"}
    assert report["outcomes"] == json.loads(json.dumps(c.outcomes)) and report["summaries"][0]["device"] == "cuda:0"
