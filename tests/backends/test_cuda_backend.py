"""The CUDA backend's own tests.

Without a GPU: the package imports without building, says why it cannot run, raises the contract's input
errors, and its sources compile with nvcc (when nvcc is present). On a GPU: bitwise parity with the native
reference (forward, forward_fp32, dx) over dims that take every kernel path and over value families at the
edges of the reciprocal (zeros, tiny, huge and subnormal values, NaN/Inf; an eps that is 0 in fp32); the
dw, bit for bit, in the canonical order too; batch invariance; the custom operators under ``torch.library.opcheck``,
``torch.compile(fullgraph=True)`` and CUDA-graph replay, each bitwise equal to eager; and the variants (fused
add, in place too; weight offset; no weight) against straightforward torch formulas of the contract's
definitions.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rmsnorm_conformance.backends.cuda_rmsnorm import CudaRMSNormOp, _build, _ops
from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.contract import profile
from rmsnorm_conformance.contract.reference import sum_fixed_order

ROOT = Path(__file__).resolve().parents[2]
OP = CudaRMSNormOp()
REFERENCE = NativeRMSNormOp()
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SEED = profile("seed")


needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")


@pytest.fixture
def gpu() -> None:
    """Skip unless the kernels can run here; on a GPU machine the first use builds them."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    reason = OP.unavailable_reason("cuda")
    if reason:
        pytest.skip(reason)


# ------------------------------------------------------------------------------------------------------
# Anywhere.


def test_a_dead_builds_lock_is_removed_and_a_live_ones_kept(tmp_path, capsys):
    """torch's build lock left by a killed build would make every later run wait forever; a recent one is a build in
    progress and stays."""
    lock = tmp_path / "lock"
    lock.touch()
    now = lock.stat().st_mtime
    assert not _build.clear_stale_lock(str(tmp_path), now=now + 30)  # a build under way
    assert lock.exists()
    assert _build.clear_stale_lock(str(tmp_path), now=now + _build.STALE_LOCK_SECONDS + 1)
    assert not lock.exists()
    assert "left by a build that was killed" in capsys.readouterr().err
    assert not _build.clear_stale_lock(str(tmp_path))  # no lock: nothing to do


def test_import_builds_nothing():
    code = (
        "import sys, rmsnorm_conformance.backends.cuda_rmsnorm as m\n"
        "assert m._ops._library is None and m._ops._error is None\n"
        "assert 'torch.utils.cpp_extension' not in sys.modules\n"
        "m.CudaRMSNormOp()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_declared_capabilities():
    assert OP.name == "cuda"
    assert OP.devices == ("cuda",)
    assert set(OP.dtypes) == set(DTYPES)
    assert OP.supports_backward is True
    assert OP.fused_add_in_place is False
    assert OP.offset_dtype == "float32"
    for method in ("forward_fp32", "fused_add", "fused_add_", "forward_offset", "forward_unweighted"):
        assert callable(getattr(OP, method)), method


def test_unavailable_on_cpu():
    reason = OP.unavailable_reason("cpu")
    assert reason is not None and "cuda" in reason


@needs_no_gpu
def test_unavailable_without_gpu_says_why():
    reason = OP.unavailable_reason("cuda")
    assert reason, "a machine without a GPU must give a reason"
    assert "CUDA" in reason or "GPU" in reason


def test_registry_resolves_without_failing():
    from rmsnorm_conformance.harness.running.registry import load_backend

    backend = load_backend("cuda")
    assert backend.name == "cuda"
    assert backend.unavailable_reason("cpu") is not None


def test_cpu_tensors_raise_the_reason():
    x, w = torch.randn(2, 8), torch.randn(8)
    with pytest.raises(RuntimeError, match="cannot run on cpu"):
        OP.forward(x, w)
    with pytest.raises(RuntimeError, match="cannot run on cpu"):
        OP.fused_add(x, x.clone(), w)


@pytest.mark.parametrize(
    ("x", "w", "eps", "error"),
    [
        (torch.randn(2, 8).double(), torch.randn(8).double(), 1e-6, TypeError),
        (torch.randn(2, 8), torch.randn(8).half(), 1e-6, TypeError),
        (torch.randn(2, 8), torch.randn(7), 1e-6, ValueError),
        (torch.randn(2, 8), torch.randn(8), 0.0, ValueError),
        (torch.randn(2, 8), torch.randn(8), float("nan"), ValueError),
        (torch.randn(2, 8), torch.randn(8), True, ValueError),
    ],
    ids=["float64", "weight dtype", "weight shape", "eps zero", "eps nan", "eps bool"],
)
def test_input_errors_match_native(x, w, eps, error):
    with pytest.raises(error) as ours:
        OP.forward(x, w, eps)
    with pytest.raises(error) as native:
        REFERENCE.forward(x, w, eps)
    assert str(ours.value) == str(native.value)


@pytest.mark.parametrize("entry", ["forward", "forward_fp32", "forward_offset", "fused_add", "fused_add_"])
def test_an_undeclared_weight_dtype_is_refused_in_the_contracts_words(entry):
    """The kernels take the weight in x's dtype only: a bf16 x with an fp32 weight (a pair the contract defines,
    which the reference takes) fails the contract's check with both dtypes named, before the operator's own
    message (which names them as C++ does, "BFloat16" and "Float") can reach the user. Found on an H200."""
    x, w = torch.randn(2, 8).bfloat16(), torch.randn(8)
    args = (x, x.clone(), w) if entry.startswith("fused_add") else (x, w)
    with pytest.raises(TypeError) as raised:
        getattr(OP, entry)(*args)
    assert "float32" in str(raised.value) and "bfloat16" in str(raised.value)


def test_shorten_keeps_the_error_lines():
    log = "\n".join(["noise"] * 50 + ["rmsnorm_kernels.cu(12): error: identifier x is undefined"] + ["tail"] * 5)
    short = _build.shorten(log)
    assert "error: identifier x is undefined" in short
    assert "noise" not in short


def test_extension_name_tracks_sources_and_arch():
    assert _build.extension_name() == _build.extension_name()
    assert _build.extension_name("80") != _build.extension_name()
    flags = _build.nvcc_flags()
    assert "-gencode=arch=compute_90,code=[sm_90,compute_90]" in flags
    assert "-fmad=false" in flags and "--use_fast_math" not in flags


def test_the_build_compiles_every_unit_and_the_digest_covers_every_source(tmp_path, monkeypatch):
    """Every .cu and .cpp beside the build is one of its units (a unit left out would fail only at load, on a
    GPU), and a change to any source or header, or a new one, changes the extension's name (so no stale
    library is loaded)."""
    units = {p.name for p in _build.SOURCE_DIR.iterdir() if p.suffix in (".cu", ".cpp")}
    assert units == {*_build.KERNEL_UNITS, *_build.BINDING_UNITS}
    for src in _build.source_files():
        (tmp_path / src.name).write_bytes(src.read_bytes())
    monkeypatch.setattr(_build, "SOURCE_DIR", tmp_path)
    before = _build.source_digest()
    seen = {before}
    for path in sorted(tmp_path.iterdir()):
        original = path.read_bytes()
        path.write_bytes(original + b"\n")
        seen.add(_build.source_digest())
        path.write_bytes(original)
    assert _build.source_digest() == before
    assert len(seen) == 1 + len(list(tmp_path.iterdir())) >= 1 + 13 + 3
    (tmp_path / "extra.h").write_text("// new\n")
    assert _build.source_digest() not in seen


def test_a_broken_prebuilt_library_is_the_reason(tmp_path, monkeypatch):
    bogus = tmp_path / "not_a_library.so"
    bogus.write_text("not an ELF file")
    monkeypatch.setenv(_build.LIBRARY_ENV, str(bogus))
    with pytest.raises(RuntimeError, match="loading RMSNORM_CUDA_LIBRARY"):
        _build.build()


@pytest.mark.early  # most of a minute of nvcc: started first, it runs while the other worker drains the rest
@pytest.mark.skipif(_build.find_nvcc() is None, reason="nvcc not found (set CUDA_HOME or NVCC)")
def test_sources_compile_with_nvcc(tmp_path):
    result = _build.compile_check(out_dir=str(tmp_path))
    assert result.ok, result.report
    for unit in _build.KERNEL_UNITS:  # every kernel unit compiled, not only the first
        assert (tmp_path / unit.replace(".cu", ".cubin")).stat().st_size > 0, unit
    for unit in (*_build.KERNEL_UNITS, *_build.BINDING_UNITS):
        assert f"{unit}: compiled" in result.report, result.report


# The compile check's cache, on a copy of the sources and the two quickest kernel units.
CACHED_UNITS = ("rmsnorm_kernels.cu", "fused_add_f32.cu")
needs_nvcc_and_locks = pytest.mark.skipif(_build.find_nvcc() is None or _build.fcntl is None,
                                          reason="nvcc not found (set CUDA_HOME or NVCC), or no POSIX file locks")


@pytest.fixture
def cached_sources(tmp_path, monkeypatch) -> Path:
    """A copy of the backend's folder as the check's sources, two kernel units, no binding units, a cache."""
    source = tmp_path / "src"
    source.mkdir()
    for path in _build.SOURCE_DIR.iterdir():
        if path.is_file():
            (source / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(_build, "SOURCE_DIR", source)
    monkeypatch.setattr(_build, "KERNEL_UNITS", CACHED_UNITS)
    monkeypatch.setattr(_build, "BINDING_UNITS", ())
    monkeypatch.setenv(_build.CHECK_CACHE_ENV, str(tmp_path / "cache"))
    return source


def _check(out: Path) -> dict[str, bool]:
    """Run the check into ``out``; for each unit, whether it came from the cache."""
    result = _build.compile_check(out_dir=str(out))
    assert result.ok, result.report
    lines = {line.split(":", 1)[0]: line for line in result.report.splitlines()}
    for unit in CACHED_UNITS:
        assert (out / unit.replace(".cu", ".cubin")).stat().st_size > 0, unit
    return {unit: "from the cache" in lines[unit] for unit in CACHED_UNITS}


@needs_nvcc_and_locks
def test_the_compile_checks_cache_serves_a_unit_only_for_the_same_command_and_sources(cached_sources, tmp_path,
                                                                                      monkeypatch):
    # The warm-up as CI runs it: the file alone, torch unimportable.
    warm = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", warm, str(cached_sources / "_build.py"), "--warm-check-cache",
                           str(tmp_path / "cache"), "--units", "fused_add_f32.cu"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "fused_add_f32.cu: exit 0" in done.stdout, done.stdout + done.stderr
    assert _check(tmp_path / "a") == {"rmsnorm_kernels.cu": False, "fused_add_f32.cu": True}
    assert _check(tmp_path / "b") == {"rmsnorm_kernels.cu": True, "fused_add_f32.cu": True}
    for unit in CACHED_UNITS:  # the cached machine code is the compiled one
        cubin = unit.replace(".cu", ".cubin")
        assert (tmp_path / "a" / cubin).read_bytes() == (tmp_path / "b" / cubin).read_bytes()
    # Any source changed, a header included or not: every unit is compiled again.
    header = cached_sources / "rmsnorm_plan.h"
    header.write_text(header.read_text() + "// changed\n")
    assert _check(tmp_path / "c") == {"rmsnorm_kernels.cu": False, "fused_add_f32.cu": False}
    # A unit that fails is reported, and never cached: fixed, it is compiled, not served.
    unit = cached_sources / "fused_add_f32.cu"
    good = unit.read_text()
    unit.write_text(good + "\nthis is not C++;\n")
    for _ in range(2):
        result = _build.compile_check(out_dir=str(tmp_path / "d"))
        assert not result.ok and "nvcc failed on fused_add_f32.cu" in result.report, result.report
    unit.write_text(good)  # the sources of the third check again: both served
    assert _check(tmp_path / "e") == {"rmsnorm_kernels.cu": True, "fused_add_f32.cu": True}
    # An entry whose record cannot be read is compiled again (and kept anew); a cache folder that cannot be made
    # leaves the check as it is without one.
    for record in (tmp_path / "cache").glob("rmsnorm_kernels-*.json"):
        record.write_text("{")
    assert _check(tmp_path / "f") == {"rmsnorm_kernels.cu": False, "fused_add_f32.cu": True}
    assert _check(tmp_path / "g") == {"rmsnorm_kernels.cu": True, "fused_add_f32.cu": True}
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv(_build.CHECK_CACHE_ENV, str(tmp_path / "not-a-folder" / "cache"))
    assert _check(tmp_path / "h") == {"rmsnorm_kernels.cu": False, "fused_add_f32.cu": False}


@needs_nvcc_and_locks
def test_a_unit_another_process_is_compiling_is_waited_for_by_the_check_and_left_by_the_warm_up(
        cached_sources, tmp_path):
    import threading

    cache = tmp_path / "cache"
    cache.mkdir()
    std = _build.cxx_standard()
    command = _build._kernel_commands(_build.find_nvcc(), tmp_path, std, False)["fused_add_f32.cu"]
    with open(cache / f"{_build._unit_key('fused_add_f32.cu', command)}.lock", "a") as lock:
        _build.fcntl.flock(lock, _build.fcntl.LOCK_EX)  # as a process compiling it holds it
        lines = _build.warm_check_cache(cache, std=std, units=CACHED_UNITS)
        assert lines[0].startswith("rmsnorm_kernels.cu: exit 0 in "), lines
        assert lines[1] == "fused_add_f32.cu: compiled elsewhere meanwhile", lines
        outcome: dict[str, dict[str, bool]] = {}
        waiting = threading.Thread(target=lambda: outcome.update(check=_check(tmp_path / "out")))
        waiting.start()
        waiting.join(timeout=1.5)
        assert waiting.is_alive(), "the check did not wait for the unit being compiled elsewhere"
    waiting.join(timeout=120)
    # No entry was left for it (the holder made none): compiled by the check itself once the lock was free.
    assert outcome["check"] == {"rmsnorm_kernels.cu": True, "fused_add_f32.cu": False}


# ------------------------------------------------------------------------------------------------------
# On a GPU: helpers.

# Dims that take every kernel path. One thread per row with one and two groups (1-8, 9-16), rows sharing a
# warp (128) or a block across warps (1000, 4096), 256 threads a row (4096, 8192), four groups a thread
# (8192), the streaming kernels (16384, 20000, 70000); dims that are not a multiple of 8 (and rows that are
# not 16-byte aligned), and powers of two and their neighbours, where the zero padding changes.
PARITY_DIMS = (*range(1, 18), 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 1000, 1023, 1024,
               1025, 2047, 2049, 4095, 4096, 4097, 8191, 8192, 8193, 16384, 20000, 70000)
GPU_DIMS = (1, 7, 128, 1000, 1001, 4096, 8192, 20000, 70000)
BATCH_SIZES = (1, 2, 3, 8, 15, 17, 255, 256, 257)
FULL_ROWS = 4100
# Value families beside plain normal values: the edges of the reciprocal 1 / rms (zeros, tiny and huge values,
# subnormal inputs, NaN and Inf), and rows whose scales differ widely.
FAMILIES = ("normal", "tiny", "huge", "zeros", "mixed", "subnormal", "nonfinite")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def _assert_bitwise(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Equal bits, except that any NaN matches any NaN (payloads are not the contract's business)."""
    __tracebackhide__ = True
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (
        f"{what}: {actual.shape}/{actual.dtype} against {expected.shape}/{expected.dtype}")
    a, e = _bits(actual), _bits(expected)
    both_nan = torch.isnan(actual) & torch.isnan(expected)
    if not torch.equal(a.masked_fill(both_nan, 0), e.masked_fill(both_nan, 0)):
        differ = ((a != e) & ~both_nan).nonzero()
        first = tuple(differ[0].tolist())
        pytest.fail(f"{what}: {differ.shape[0]} / {actual.numel()} elements differ bitwise; first at {first}: "
                    f"{actual[first].item()!r} against {expected[first].item()!r}")


def _assert_close(actual: torch.Tensor, reference: torch.Tensor, atol: float, rtol: float, what: str) -> None:
    __tracebackhide__ = True
    torch.testing.assert_close(actual.float(), reference.float(), atol=atol, rtol=rtol, equal_nan=True, msg=what)


def _inputs(rows: int, dim: int, dtype: torch.dtype, seed: int = 0,
            family: str = "normal") -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=gen)
    if family == "tiny":
        x = x * 1e-20
    elif family == "huge":
        x = x * (1e18 if dtype == torch.float32 else 1e4)
    elif family == "zeros":
        x[::2] = 0.0
        x[1::4, ::3] = -0.0
    elif family == "mixed":
        x = x * torch.logspace(-8, 8, rows).unsqueeze(1)
    elif family == "subnormal":
        x = x * 1e-39 if dtype == torch.float32 else x * 1e-6
    elif family == "nonfinite":
        x[1, 0] = float("nan")
        x[2, -1] = float("inf")
        x[3, dim // 2] = -float("inf")
    w = (1 + 0.5 * torch.randn(dim, generator=gen)).to(dtype).cuda()
    return x.to(dtype).cuda(), w


def _rows_for(dim: int) -> int:
    # Keep the batch tests near 64 MB at the widest dims.
    return FULL_ROWS if dim <= 8192 else 300


# ------------------------------------------------------------------------------------------------------
# Parity with the native reference: the canonical order, bit for bit.


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_bitwise_equal_to_native_over_dims(dtype):
    for dim in PARITY_DIMS:
        x, w = _inputs(33 if dim <= 8192 else 5, dim, dtype, seed=dim)
        _assert_bitwise(OP.forward(x, w), REFERENCE.forward(x, w), f"forward, dim {dim}")
        _assert_bitwise(OP.forward_fp32(x, w), REFERENCE.forward_fp32(x, w), f"forward_fp32, dim {dim}")


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_bitwise_equal_to_native_over_values(dtype, family):
    for dim in (7, 128, 1001, 4096):
        for eps in (1e-6, 1e-2, 1e-50):  # 1e-50 is +0.0 in fp32: zero rows have rms 0 and inv +Inf
            x, w = _inputs(40, dim, dtype, seed=dim, family=family)
            _assert_bitwise(OP.forward(x, w, eps), REFERENCE.forward(x, w, eps), f"{family}, dim {dim}, eps {eps}")
            _assert_bitwise(OP.forward_fp32(x, w, eps), REFERENCE.forward_fp32(x, w, eps),
                            f"fp32 out, {family}, dim {dim}, eps {eps}")


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_every_16_bit_pattern_as_input_and_as_weight(dtype):
    # Every one of the 65,536 patterns (subnormals, signed zeros, Inf, NaN) as a weight, through the plain, fp32-out
    # and offset forwards, and as an input, at a dim the fast kernels take: the widening of each element to fp32
    # and the weight's multiply must give native's bits for every value, not only for the values a sample draws
    # (a widening by integer arithmetic was tried on an H200; this is the test it had to pass).
    patterns = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype).reshape(16, 4096)
    gen = torch.Generator().manual_seed(16)
    x = torch.randn(16, 4096, generator=gen).to(dtype).cuda()
    for i in range(16):
        w = patterns[i].cuda()
        _assert_bitwise(OP.forward(x, w), REFERENCE.forward(x, w), f"weights {i}")
        _assert_bitwise(OP.forward_fp32(x, w), REFERENCE.forward_fp32(x, w), f"fp32 out, weights {i}")
        _assert_bitwise(OP.forward_offset(x, w), REFERENCE.forward_offset(x, w), f"offset, weights {i}")
    ones = torch.ones(4096, dtype=dtype).cuda()
    _assert_bitwise(OP.forward(patterns.cuda(), ones), REFERENCE.forward(patterns.cuda(), ones), "inputs")


@pytest.mark.usefixtures("gpu")
def test_forward_equals_the_cpu_reference():
    # The canonical order makes the reference's CPU bits its GPU bits; the kernels must match both.
    for dtype in DTYPES:
        for dim in (5, 128, 4097):
            x, w = _inputs(16, dim, dtype, seed=7)
            _assert_bitwise(OP.forward_fp32(x, w).cpu(), REFERENCE.forward_fp32(x.cpu(), w.cpu()),
                            f"{dtype} dim {dim}")


def _grads(fn, x: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xs = x.detach().requires_grad_(True)
    ws = w.detach().requires_grad_(True)
    fn(xs, ws, 1e-6).backward(g)
    return xs.grad, ws.grad


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dx_bitwise_equal_to_native(dtype):
    for dim in (1, 7, 8, 9, 100, 128, 1000, 1001, 4096, 4097, 8192, 16384, 20000):
        rows = 64 if dim <= 8192 else 6
        x, w = _inputs(rows, dim, dtype, seed=dim)
        for fn_ours, fn_ref in ((OP.forward, REFERENCE.forward), (OP.forward_fp32, REFERENCE.forward_fp32)):
            out_dtype = dtype if fn_ours == OP.forward else torch.float32
            g = torch.randn(rows, dim, generator=torch.Generator().manual_seed(dim)).to(out_dtype).cuda()
            dx, _ = _grads(fn_ours, x, w, g)
            dx_ref, _ = _grads(fn_ref, x, w, g)
            _assert_bitwise(dx, dx_ref, f"dx through {fn_ours.__name__}, dim {dim}")


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dw_bitwise_equal_to_native(dtype):
    # dw follows the canonical tree over rows: the reference's bits, on the GPU and on the CPU, whatever the
    # blocks, slots and stack levels the plan spreads it over (rows around powers of two, wide rows that
    # stream, rows that several slots of a block share), and the same bits run after run.
    for rows, dim in ((1, 7), (300, 128), (70, 1001), (40, 4096), (5, 20000), (2049, 128), (16384, 1024),
                      (65536, 128), (4096, 8200), (1000, 4097), (33, 64), (3, 8192)):
        x, w = _inputs(rows, dim, dtype, seed=rows, family="mixed")
        g = torch.randn(rows, dim, generator=torch.Generator().manual_seed(1)).to(dtype).cuda()
        _, dw = _grads(OP.forward, x, w, g)
        _, dw_ref = _grads(REFERENCE.forward, x, w, g)
        _assert_bitwise(dw, dw_ref, f"dw, {rows}x{dim}")
        if rows <= 300:
            _, dw_cpu = _grads(REFERENCE.forward, x.cpu(), w.cpu(), g.cpu())
            _assert_bitwise(dw.cpu(), dw_cpu, f"dw against the CPU reference, {rows}x{dim}")
        _, dw_again = _grads(OP.forward, x, w, g)
        _assert_bitwise(dw_again, dw, f"dw run to run, {rows}x{dim}")


@pytest.mark.usefixtures("gpu")
def test_dw_bitwise_at_every_depth_of_the_final_kernels_tree():
    # dw's final kernel adds each thread's Q / 32 partial rows as a tree unrolled for each power of two up to 32
    # (Q up to 1024) and streams more: the batches that reach 16, 32 and 64 partial rows a thread, which the tests
    # above (Q <= 256) do not, at 8192 columns (32 rows of dw a block).
    for rows, per_thread in ((16384, 16), (32768, 32), (65536, 64)):
        programs = _ops.op("backward_plan")(rows, 8192, torch.bfloat16)[1]
        assert programs == 32 * per_thread, (rows, programs)
        x, w = _inputs(rows, 8192, torch.bfloat16, seed=rows, family="mixed")
        g = torch.randn(rows, 8192, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16).cuda()
        _, dw = _grads(OP.forward, x, w, g)
        _, dw_ref = _grads(REFERENCE.forward, x, w, g)
        _assert_bitwise(dw, dw_ref, f"dw, {rows}x8192 ({per_thread} partial rows a thread of the final kernel)")
        del x, g, dw, dw_ref


# ------------------------------------------------------------------------------------------------------
# Batch invariance, accuracy, gradients.


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dim", GPU_DIMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batch_size_and_slice_views_bitwise(dtype, dim):
    rows = _rows_for(dim)
    x, w = _inputs(rows, dim, dtype, seed=1)
    for fn in (OP.forward, OP.forward_fp32):
        full = fn(x, w)
        for b in BATCH_SIZES:
            if b > rows - 20:
                continue
            _assert_bitwise(fn(x[:b].clone(), w), full[:b], f"{fn.__name__} rows [0:{b}] alone")
            for a in (1, 3, 17):
                _assert_bitwise(fn(x[a:a + b], w), full[a:a + b], f"{fn.__name__} view x[{a}:{a + b}]")


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dim", GPU_DIMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_rows_and_leading_dims_bitwise(dtype, dim):
    rows = 48
    x, w = _inputs(rows, dim, dtype, seed=2)
    full = OP.forward(x, w)
    for offset, extra in ((0, 8), (1, 3), (3, 16)):
        # Rows of a wider buffer; an odd offset makes every row misaligned for 16-byte loads.
        wide = torch.zeros(rows, dim + offset + extra, dtype=dtype, device="cuda")
        wide[:, offset:offset + dim] = x
        _assert_bitwise(OP.forward(wide[:, offset:offset + dim], w), full, f"strided rows, offset {offset}")
    # A misaligned weight takes the scalar weight path.
    w_buffer = torch.empty(dim + 1, dtype=dtype, device="cuda")
    w_buffer[1:] = w
    _assert_bitwise(OP.forward(x, w_buffer[1:]), full, "misaligned weight")
    _assert_bitwise(OP.forward(x.view(6, 8, dim), w).view(rows, dim), full, "[B, S, D] against [B*S, D]")
    _assert_bitwise(OP.forward(x.t().contiguous().t(), w), full, "column-major layout")
    _assert_bitwise(OP.forward(x, w), full, "repeat")


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dim", GPU_DIMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward(dtype, dim):
    rows = 300 if dim > 8192 else 1500
    x, w = _inputs(rows, dim, dtype, seed=3)
    g = torch.randn(rows, dim, generator=torch.Generator().manual_seed(4)).to(dtype).cuda()
    dx, dw = _grads(OP.forward, x, w, g)
    x32 = x.float().requires_grad_(True)
    w32 = w.float().requires_grad_(True)
    REFERENCE.forward_fp32(x32, w32, 1e-6).backward(g.float())
    bound = SEED.gradient_bound(str(dtype).removeprefix("torch."))
    _assert_close(dx, x32.grad, bound.atol, bound.rtol, "dx")
    _assert_close(dw, w32.grad, bound.atol, bound.rtol, "dw")
    for b in (1, 3, 17, 257):
        dx_part, _ = _grads(OP.forward, x[:b].clone(), w, g[:b].clone())
        _assert_bitwise(dx_part, dx[:b], f"dx of rows [0:{b}] alone")
    dx_view, _ = _grads(OP.forward, x[3:260], w, g[3:260])
    _assert_bitwise(dx_view, dx[3:260], "dx of the view x[3:260]")


@pytest.mark.usefixtures("gpu")
def test_gradient_of_one_input_only():
    x, w = _inputs(64, 1000, torch.bfloat16, seed=5)
    xs = x.detach().requires_grad_(True)
    OP.forward(xs, w).float().sum().backward()
    ws = w.detach().requires_grad_(True)
    OP.forward(x, ws).float().sum().backward()
    both_x, both_w = _grads(OP.forward, x, w, torch.ones_like(x))
    _assert_bitwise(xs.grad, both_x, "dx alone")
    _assert_bitwise(ws.grad, both_w, "dw alone")


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_empty_batch_nonfinite_rows_and_purity(dtype):
    w = torch.ones(64, dtype=dtype, device="cuda")
    empty = torch.empty(0, 3, 64, dtype=dtype, device="cuda")
    out = OP.forward(empty, w)
    assert out.shape == empty.shape and out.dtype == dtype
    x, w = _inputs(40, 64, dtype, seed=6)
    clean = OP.forward(x, w)
    dirty = x.clone()
    dirty[5, 3] = float("nan")
    dirty[9, 0] = float("inf")
    before = dirty.clone()
    out = OP.forward(dirty, w)
    _assert_bitwise(dirty, before, "input unchanged")
    keep = [i for i in range(40) if i not in (5, 9)]
    _assert_bitwise(out[keep], clean[keep], "rows beside NaN/Inf rows")
    assert torch.isnan(out[5]).all() and torch.isnan(out[9, 0]) and not torch.isnan(out[9, 1:]).any()


@pytest.mark.usefixtures("gpu")
def test_the_direct_entry_is_used_and_subclasses_take_torch_ops():
    assert _ops.fast_module(_ops._library) is not None, "the library's Python entry did not load"
    assert _ops.rms_norm is _ops.fast_module(_ops._library).rms_norm

    class Marked(torch.Tensor):
        pass

    x, w = _inputs(9, 100, torch.bfloat16, seed=13)
    _assert_bitwise(OP.forward(x.as_subclass(Marked), w).as_subclass(torch.Tensor), OP.forward(x, w),
                    "a tensor subclass through torch.ops")
    _assert_bitwise(OP.forward(x, torch.nn.Parameter(w, requires_grad=False)), OP.forward(x, w), "a Parameter")


@pytest.mark.usefixtures("gpu")
def test_bad_cuda_inputs_raise_the_contracts_errors():
    x, w = _inputs(4, 16, torch.bfloat16)
    # An fp32 weight with bf16 x: a contract pair that native declares and this backend does not.
    # Both dtypes named: in the contract's words (torch.bfloat16, caught first) or torch's C++ names (BFloat16).
    with pytest.raises(TypeError, match=r"x\.dtype=[\w.]+ and weight\.dtype=[\w.]+"):
        OP.forward(x, w.float(), 1e-6)
    cases = [((x, w[:8], 1e-6), ValueError), ((x, w, -1.0), ValueError),
             ((x.double(), w.double(), 1e-6), TypeError), ((x, w.cpu(), 1e-6), ValueError)]
    for args, error in cases:
        with pytest.raises(error) as ours:
            OP.forward(*args)
        with pytest.raises(error) as native:
            REFERENCE.forward(*args)
        assert str(ours.value) == str(native.value)


# ------------------------------------------------------------------------------------------------------
# Custom operators: opcheck, torch.compile, CUDA graphs.


@pytest.mark.usefixtures("gpu")
def test_opcheck_every_operator():
    x, w = _inputs(6, 40, torch.bfloat16, seed=8)
    r = torch.randn_like(x)
    grad_x = x.detach().clone().requires_grad_(True)
    grad_w = w.detach().clone().requires_grad_(True)
    samples = [
        ("rms_norm", (grad_x, grad_w, 1e-6, False)),
        ("rms_norm", (grad_x, grad_w, 1e-6, True)),
        ("rms_norm", (x.float(), w.float(), 1e-5, False)),
        ("rms_norm_backward", (torch.randn_like(x), x, w, 1e-6, True)),
        ("rms_norm_backward", (torch.randn_like(x, dtype=torch.float32), x, w, 1e-6, False)),
        ("rms_norm_offset", (x, w, 1e-6)),
        ("rms_norm_unweighted", (x, 1e-6)),
        ("fused_add_rms_norm", (x, r, w, 1e-6)),
        ("fused_add_rms_norm_", (x.clone(), r.clone(), w, 1e-6)),
    ]
    for name, args in samples:
        torch.library.opcheck(_ops.op(name), args)


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compiled_fullgraph_is_bitwise_eager(dtype):
    torch._dynamo.reset()
    x, w = _inputs(70, 1001, dtype, seed=9)
    r = torch.randn_like(x)
    g = torch.randn_like(x)

    def step(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, r_out = OP.fused_add(x, r, w)
        return (OP.forward(x, w), OP.forward_fp32(x, w), OP.forward_offset(x, w), OP.forward_unweighted(x),
                y, r_out)

    compiled = torch.compile(step, fullgraph=True)
    for ours, eager in zip(compiled(x, w, r), step(x, w, r), strict=True):
        _assert_bitwise(ours, eager, "compiled against eager")

    def train(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return OP.forward(x, w) * 2

    compiled_train = torch.compile(train, fullgraph=True)
    eager_dx, eager_dw = _grads(lambda a, b, eps: train(a, b), x, w, g)
    ours_dx, ours_dw = _grads(lambda a, b, eps: compiled_train(a, b), x, w, g)
    _assert_bitwise(ours_dx, eager_dx, "compiled dx")
    _assert_bitwise(ours_dw, eager_dw, "compiled dw")


@pytest.mark.usefixtures("gpu")
def test_cuda_graph_replay_is_bitwise_eager():
    x, w = _inputs(257, 4096, torch.bfloat16, seed=10)
    r = torch.randn_like(x)
    static_x, static_r = x.clone(), r.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up outside the capture
            OP.forward(static_x, w)
            OP.fused_add(static_x, static_r, w)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = OP.forward(static_x, w)
        y32 = OP.forward_fp32(static_x, w)
        fy, fr = OP.fused_add(static_x, static_r, w)
    for seed in (11, 12):
        new_x, _ = _inputs(257, 4096, torch.bfloat16, seed=seed)
        static_x.copy_(new_x)
        graph.replay()
        torch.cuda.synchronize()
        _assert_bitwise(y, OP.forward(new_x, w), "graph forward")
        _assert_bitwise(y32, OP.forward_fp32(new_x, w), "graph forward_fp32")
        ey, er = OP.fused_add(new_x, r, w)
        _assert_bitwise(fy, ey, "graph fused_add y")
        _assert_bitwise(fr, er, "graph fused_add residual")


# ------------------------------------------------------------------------------------------------------
# Variants: the contract's definitions in plain torch, on the reference's canonical sum.


def _normalized(x32: torch.Tensor, eps: float) -> torch.Tensor:
    dim = x32.shape[-1]
    mean = sum_fixed_order(x32 * x32) / torch.full((), dim, device=x32.device)
    rms = torch.sqrt((mean + torch.full((), eps, device=x32.device)).double()).float()
    return x32 * (torch.full((), 1.0, device=x32.device) / rms)


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_variants_follow_their_definitions(dtype):
    for dim in (1, 7, 16, 128, 1001, 4096, 20000):
        rows = 37 if dim <= 4096 else 4
        x, w = _inputs(rows, dim, dtype, seed=dim)
        r = torch.randn(rows, dim, generator=torch.Generator().manual_seed(dim + 1)).to(dtype).cuda()
        residual_out = (x.float() + r.float()).to(dtype)
        y, r_out = OP.fused_add(x, r, w)
        _assert_bitwise(r_out, residual_out, f"fused_add residual_out, dim {dim}")
        _assert_bitwise(y, REFERENCE.forward(residual_out, w), f"fused_add y, dim {dim}")
        offset = (_normalized(x.float(), 1e-6) * (1 + w.float())).to(dtype)
        _assert_bitwise(OP.forward_offset(x, w), offset, f"forward_offset, dim {dim}")
        plain = _normalized(x.float(), 1e-6).to(dtype)
        _assert_bitwise(OP.forward_unweighted(x), plain, f"forward_unweighted, dim {dim}")


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_add_in_place_and_batch_invariant(dtype):
    for dim in (7, 128, 4096):
        x, w = _inputs(300, dim, dtype, seed=dim)
        r = torch.randn_like(x)
        y, r_out = OP.fused_add(x, r, w)
        for b, a in ((1, 0), (3, 5), (17, 1), (257, 2)):
            yb, rb = OP.fused_add(x[a:a + b], r[a:a + b], w)
            _assert_bitwise(yb, y[a:a + b], f"fused_add y, rows [{a}:{a + b}], dim {dim}")
            _assert_bitwise(rb, r_out[a:a + b], f"fused_add residual, rows [{a}:{a + b}], dim {dim}")
            _assert_bitwise(OP.forward_offset(x[a:a + b], w), OP.forward_offset(x, w)[a:a + b], "offset slice")
        xi, ri = x.clone(), r.clone()
        returned = OP.fused_add_(xi, ri, w)
        assert returned[0] is xi and returned[1] is ri
        _assert_bitwise(xi, y, f"in-place y, dim {dim}")
        _assert_bitwise(ri, r_out, f"in-place residual, dim {dim}")
        # Column-major inputs cannot be written in place row by row: computed aside and copied back.
        xc, rc = x.t().contiguous().t(), r.t().contiguous().t()
        OP.fused_add_(xc, rc, w)
        _assert_bitwise(xc.contiguous(), y, f"in-place y, column-major, dim {dim}")
        _assert_bitwise(rc.contiguous(), r_out, f"in-place residual, column-major, dim {dim}")
    # A location written twice is refused before any write, by the operator itself (the fast path) in the contract's
    # words (contract/inputs.py check_in_place).
    xo = x.clone()
    with pytest.raises(ValueError, match="x and residual, which overlap in memory"):
        OP.fused_add_(xo, xo, w)
    with pytest.raises(ValueError, match="overlap in memory"):
        OP.fused_add_(xo[:5], xo[4:9], w)
    with pytest.raises(ValueError, match="writes into x, whose elements share memory"):
        OP.fused_add_(x[0].expand(8, x.shape[1]), r[:8].clone(), w)
    _assert_bitwise(xo, x, "x after the refused calls")
    # No gradient in place: refused where one would be recorded; a graph that saved x before the write refuses it.
    with pytest.raises(RuntimeError, match="requires grad"):
        OP.fused_add_(x.clone().requires_grad_(True), r.clone(), w)
    leaf = x.clone().requires_grad_(True)
    saved = leaf * 2
    out = saved.sin()
    with torch.no_grad():
        OP.fused_add_(saved, r.clone(), w)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
