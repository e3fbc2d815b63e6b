"""The CUDA backend's own tests.

Without a GPU: the package imports without building, says why it cannot run, raises the shared input
errors, and its sources compile with nvcc (when nvcc is present). On a GPU: accuracy against the
reference, bitwise batch invariance (batch size, slice views at odd offsets, misaligned strided rows,
leading dims), dx invariance and dw determinism, across dims that take every kernel path.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rmsnorm_conformance.backends.cuda_rmsnorm import CudaRMSNormOp, _build
from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.contract import profile

ROOT = Path(__file__).resolve().parents[1]
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


def test_import_builds_nothing():
    code = (
        "import sys, rmsnorm_conformance.backends.cuda_rmsnorm as m\n"
        "assert m._module is None and m._build_error is None\n"
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
    assert callable(OP.forward_fp32)


def test_unavailable_on_cpu():
    reason = OP.unavailable_reason("cpu")
    assert reason is not None and "cuda" in reason


@needs_no_gpu
def test_unavailable_without_gpu_says_why():
    reason = OP.unavailable_reason("cuda")
    assert reason, "a machine without a GPU must give a reason"
    assert "CUDA" in reason or "GPU" in reason


def test_registry_resolves_without_failing():
    from rmsnorm_conformance.harness.registry import load_backend

    backend = load_backend("cuda")
    assert backend.name == "cuda"
    assert backend.unavailable_reason("cpu") is not None


@needs_no_gpu
def test_forward_without_gpu_raises_the_reason():
    x, w = torch.randn(2, 8), torch.randn(8)
    with pytest.raises(RuntimeError, match="cannot run"):
        OP.forward(x, w)


@pytest.mark.parametrize(
    ("x", "w", "eps", "error"),
    [
        (torch.randn(2, 8).double(), torch.randn(8).double(), 1e-6, TypeError),
        (torch.randn(2, 8), torch.randn(8).half(), 1e-6, TypeError),
        (torch.randn(2, 8), torch.randn(7), 1e-6, ValueError),
        (torch.randn(2, 8), torch.randn(8), 0.0, ValueError),
        (torch.randn(2, 8), torch.randn(8), float("nan"), ValueError),
    ],
    ids=["float64", "weight dtype", "weight shape", "eps zero", "eps nan"],
)
def test_input_errors_match_native(x, w, eps, error):
    with pytest.raises(error) as ours:
        OP.forward(x, w, eps)
    with pytest.raises(error) as native:
        REFERENCE.forward(x, w, eps)
    assert str(ours.value) == str(native.value)


def test_shorten_keeps_the_error_lines():
    log = "\n".join(["noise"] * 50 + ["rmsnorm_kernels.cu(12): error: identifier x is undefined"] + ["tail"] * 5)
    short = _build.shorten(log)
    assert "error: identifier x is undefined" in short
    assert "noise" not in short


def test_extension_name_tracks_sources_and_arch():
    assert _build.extension_name() == _build.extension_name()
    assert _build.extension_name("80") != _build.extension_name()
    assert "-gencode=arch=compute_90,code=[sm_90,compute_90]" in _build.nvcc_flags()


@pytest.mark.skipif(_build.find_nvcc() is None, reason="nvcc not found (set CUDA_HOME or NVCC)")
def test_sources_compile_with_nvcc(tmp_path):
    result = _build.compile_check(out_dir=str(tmp_path))
    assert result.ok, result.report
    assert (tmp_path / "rmsnorm_kernels.o").stat().st_size > 0


# ------------------------------------------------------------------------------------------------------
# On a GPU.

# Dims that take every kernel path (bf16 / fp32): one thread per row (1, 7), several rows per warp (128,
# 1000 bf16), several rows per block across warps (4096 bf16, 1000 fp32), a block per row (8192), a partial
# last chunk with rows that are not 16-byte aligned (7, 1001), 1024 threads per row (20000 bf16) and the
# looping kernels (20000 fp32, 70000; the backward from 20000 bf16).
GPU_DIMS = (1, 7, 128, 1000, 1001, 4096, 8192, 20000, 70000)
BATCH_SIZES = (1, 2, 3, 8, 15, 17, 255, 256, 257)
FULL_ROWS = 4100


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def _assert_bitwise(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    __tracebackhide__ = True
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    if not torch.equal(_bits(actual), _bits(expected)):
        mismatched = (_bits(actual) != _bits(expected)).sum().item()
        pytest.fail(f"{what}: {mismatched} / {actual.numel()} elements differ bitwise")


def _assert_close(actual: torch.Tensor, reference: torch.Tensor, atol: float, rtol: float, what: str) -> None:
    __tracebackhide__ = True
    torch.testing.assert_close(actual.float(), reference.float(), atol=atol, rtol=rtol, equal_nan=True, msg=what)


def _inputs(rows: int, dim: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=gen).to(dtype).cuda()
    w = (1 + 0.5 * torch.randn(dim, generator=gen)).to(dtype).cuda()
    return x, w


def _rows_for(dim: int) -> int:
    # Keep the batch tests near 64 MB at the widest dims.
    return FULL_ROWS if dim <= 8192 else 300


@pytest.mark.usefixtures("gpu")
@pytest.mark.parametrize("dim", GPU_DIMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_accuracy(dtype, dim):
    x, w = _inputs(37, dim, dtype)
    reference = REFERENCE.forward_fp32(x.float(), w.float(), 1e-6)
    bound = SEED.output_bound(str(dtype).removeprefix("torch."))
    _assert_close(OP.forward(x, w), reference, bound.atol, bound.rtol, "forward")
    fp32 = SEED.output_bound("float32")
    out32 = OP.forward_fp32(x, w)
    assert out32.dtype == torch.float32
    _assert_close(out32, reference, fp32.atol, fp32.rtol, "forward_fp32")
    # forward is forward_fp32 rounded once to x.dtype.
    _assert_bitwise(OP.forward(x, w), out32.to(dtype), "forward against rounded forward_fp32")


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

    def grads(xs: torch.Tensor, gs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xs = xs.detach().requires_grad_(True)
        ws = w.detach().requires_grad_(True)
        OP.forward(xs, ws).backward(gs)
        return xs.grad, ws.grad

    dx, dw = grads(x, g)
    x32 = x.float().requires_grad_(True)
    w32 = w.float().requires_grad_(True)
    REFERENCE.forward_fp32(x32, w32, 1e-6).backward(g.float())
    bound = SEED.gradient_bound(str(dtype).removeprefix("torch."))
    _assert_close(dx, x32.grad, bound.atol, bound.rtol, "dx")
    _assert_close(dw, w32.grad, bound.atol, bound.rtol, "dw")
    _, dw_again = grads(x, g)
    _assert_bitwise(dw_again, dw, "dw run to run")
    for b in (1, 3, 17, 257):
        dx_part, _ = grads(x[:b].clone(), g[:b].clone())
        _assert_bitwise(dx_part, dx[:b], f"dx of rows [0:{b}] alone")
    dx_view, _ = grads(x[3:260], g[3:260])
    _assert_bitwise(dx_view, dx[3:260], "dx of the view x[3:260]")


@pytest.mark.usefixtures("gpu")
def test_backward_of_forward_fp32_and_weight_only():
    x, w = _inputs(64, 1000, torch.bfloat16, seed=5)
    xs = x.detach().requires_grad_(True)
    ws = w.detach().requires_grad_(True)
    OP.forward_fp32(xs, ws).sum().backward()
    x32 = x.float().requires_grad_(True)
    w32 = w.float().requires_grad_(True)
    REFERENCE.forward_fp32(x32, w32, 1e-6).sum().backward()
    bound = SEED.gradient_bound("bfloat16")
    _assert_close(xs.grad, x32.grad, bound.atol, bound.rtol, "dx through forward_fp32")
    _assert_close(ws.grad, w32.grad, bound.atol, bound.rtol, "dw through forward_fp32")
    ws2 = w.detach().requires_grad_(True)
    OP.forward(x, ws2).float().sum().backward()
    assert ws2.grad is not None and ws2.grad.shape == w.shape


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
