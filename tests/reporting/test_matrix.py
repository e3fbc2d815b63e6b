"""The conformance matrix: merged JSON reports become one table with footnoted failures."""

from __future__ import annotations

import json

from rmsnorm_conformance.harness.reporting.merge import main, merge
from rmsnorm_conformance.harness.vocabulary.records import Check, Collector


def _report(path, backend, device, device_name, *, fail_rule=None):
    c = Collector(environment={"date": "d", "torch": "t", f"device {device}": device_name})
    for rule in ("axis_a.batch_size", "axis_b.output"):
        stats = {"max_abs": 0.01, "max_rel": 0.01, "max_ulp": 1, "margin": 0.5} if rule == "axis_b.output" else {}
        c.add(Check(backend, device, "bfloat16", 4096, rule, True, **stats))
        if rule == fail_rule:
            c.add(Check(backend, device, "bfloat16", 4096, rule, False, case="Case(min)", replay="pytest r",
                        size=4, **stats))
    c.add_not_run("cuda", "cpu", "cuda runs on cuda, not cpu")
    path.write_text(json.dumps(c.to_json()))
    return path


def test_merge_puts_each_backend_device_on_a_row_and_footnotes_failures(tmp_path):
    a = _report(tmp_path / "cpu.json", "native", "cpu", "x86_64")
    b = _report(tmp_path / "gpu.json", "triton", "cuda:0", "NVIDIA H200", fail_rule="axis_a.batch_size")
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"records": [
        {"backend": "triton", "kind": "forward", "rows": 65536, "dim": 4096, "dtype": "bfloat16",
         "gbps": 4000.0, "copy_gbps": 4100.0}]}))
    text = merge([a, b], bench=bench)
    assert "| native" in text and "cuda (NVIDIA H200)" in text
    assert "FAIL [1]" in text and "Case(min)" in text and "pytest r" in text
    assert "4000 (0.98) \\| –" in text  # the pipe is escaped: it is inside a table cell
    assert "cuda on cpu did not run: cuda runs on cuda, not cpu" in text


def test_merge_command_writes_the_file(tmp_path, capsys):
    a = _report(tmp_path / "cpu.json", "native", "cpu", "x86_64")
    assert main([str(a), "--out", str(tmp_path / "m.md")]) == 0
    assert (tmp_path / "m.md").read_text().startswith("# Conformance matrix")


def test_a_test_that_failed_without_a_check_still_fails_its_row(tmp_path):
    """A crashed worker or a setup error records no check; merge must not read the row as ok."""
    c = Collector(environment={"date": "d", "torch": "t"})
    c.add(Check("crashy", "cpu", "float32", 8, "axis_b.output", True))
    c.outcomes["test_axis_b.py::test_output[crashy-cpu-float32]"] = {
        "outcome": "failed", "reason": "worker 'gw0' crashed while running it", "backend": "crashy", "device": "cpu",
        "where": "crashy-cpu-float32"}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(c.to_json()))
    text = merge([path])
    assert "FAIL [1]" in text and "worker 'gw0' crashed" in text
    assert "errors" in text


def test_the_command_line_runs_each_of_its_commands(tmp_path):
    """``rmsnorm-conformance merge`` and ``contract`` as a user types them, in a fresh interpreter: the entry point
    must import what each command needs (a renamed module once broke merge there alone)."""
    import subprocess
    import sys

    a = _report(tmp_path / "cpu.json", "native", "cpu", "x86_64")
    merged = subprocess.run([sys.executable, "-m", "rmsnorm_conformance", "merge", str(a), "--out",
                             str(tmp_path / "m.md")], capture_output=True, text=True, check=False)
    assert merged.returncode == 0, merged.stderr[-2000:]
    assert (tmp_path / "m.md").read_text().startswith("# Conformance matrix")
    contract = subprocess.run([sys.executable, "-m", "rmsnorm_conformance", "contract", "--check"],
                              capture_output=True, text=True, check=False)
    assert contract.returncode == 0, contract.stderr[-2000:]
    # From a folder without CONTRACT.md (a kernel author's, with the wheel), and on a file without the generated
    # blocks: a usage error that names the file, not a traceback.
    (tmp_path / "notes.md").write_text("# notes\n")
    for args in (["--check"], ["--check", "notes.md"]):
        bad = subprocess.run([sys.executable, "-m", "rmsnorm_conformance", "contract", *args], cwd=tmp_path,
                             capture_output=True, text=True, check=False)
        assert bad.returncode == 2, bad.stderr[-2000:]
        assert "Traceback" not in bad.stderr
        assert ("CONTRACT.md: no such file" if args == ["--check"] else "notes.md: CONTRACT.md lacks") in bad.stderr


def test_the_command_line_says_what_was_wrong(tmp_path):
    """Help is not an error; an unknown command, a file that is not a report and a report of something else are
    usage errors that name what was wrong, never a traceback."""
    import subprocess
    import sys

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "rmsnorm_conformance", *args], cwd=tmp_path,
                              capture_output=True, text=True, check=False)

    helped = cli("--help")
    assert helped.returncode == 0 and "merge" in helped.stdout and "contract" in helped.stdout
    unknown = cli("bogus")
    assert unknown.returncode == 2 and "unknown command 'bogus'" in unknown.stderr
    (tmp_path / "report.md").write_text("# a markdown report\n")
    (tmp_path / "other.json").write_text('{"name": "something else"}')
    for name, says in (("report.md", "report.md: not a JSON report"),
                       ("other.json", "other.json is not a conformance report"), ("missing.json", "missing.json")):
        bad = cli("merge", name)
        assert bad.returncode == 2, (name, bad.stderr[-2000:])
        assert says in bad.stderr and "Traceback" not in bad.stderr, bad.stderr[-2000:]
