"""The Triton backend's own tests: on the CPU through Triton's interpreter, on a GPU compiled.

Accuracy against the reference, bitwise batch invariance of the output and of dx (batch size up to and past
257 rows, strided, misaligned and column-major layouts, leading dims), dw determinism, the wide-row path,
the launch configuration's independence of the row count, and the availability answers.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():  # Triton reads this when the kernels are defined
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton", reason="triton is not installed")

import triton.language as tl

import rmsnorm_conformance.backends.triton_rmsnorm as tr
from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.contract import profile

ROOT = Path(__file__).resolve().parents[1]
OP = tr.TritonRMSNormOp()
REFERENCE = NativeRMSNormOp()
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SEED = profile("seed")
BATCH_SIZES = (1, 2, 3, 8, 15, 17, 255, 256, 257)  # where kernels change behaviour, and their neighbours


def _devices() -> list:
    found = []
    for name in ("cpu", "cuda"):
        reason = OP.unavailable_reason(name)
        found.append(pytest.param(name, marks=pytest.mark.skip(reason=reason)) if reason else name)
    return found


DEVICES = _devices()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view: bitwise comparison that also tells -0.0 from 0.0 and compares NaN payloads."""
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def assert_bitwise(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    __tracebackhide__ = True
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    diff = (_bits(actual) != _bits(expected)).nonzero()
    assert diff.numel() == 0, f"{what}: {diff.shape[0]} elements differ, first at {diff[0].tolist()}"


def assert_close(actual: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype, what: str,
                 gradients: bool = False) -> None:
    __tracebackhide__ = True
    name = str(dtype).removeprefix("torch.")
    bound = SEED.gradient_bound(name) if gradients else SEED.output_bound(name)
    torch.testing.assert_close(actual.float(), reference.float(), atol=bound.atol, rtol=bound.rtol,
                               equal_nan=True, msg=lambda m: f"{what}: {m}")


def _data(rows: int, dim: int, dtype: torch.dtype, device: str, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=gen) * (1 + torch.rand(rows, 1, generator=gen) * 3)
    w = torch.randn(dim, generator=gen)
    g = torch.randn(rows, dim, generator=gen)
    return tuple(t.to(dtype).to(device) for t in (x, w, g))


def _grads(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, fp32_out: bool = False):
    x = x.detach().clone().requires_grad_(True)
    w = w.detach().clone().requires_grad_(True)
    y = (OP.forward_fp32 if fp32_out else OP.forward)(x, w, 1e-6)
    y.backward(g)
    return y.detach(), x.grad, w.grad


def _golden(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor):
    """fp32 autograd through the reference, on upcast inputs: the contract's golden gradients."""
    x32 = x.detach().float().requires_grad_(True)
    w32 = w.detach().float().requires_grad_(True)
    REFERENCE.forward_fp32(x32, w32, 1e-6).backward(g.float())
    return x32.grad, w32.grad


@pytest.fixture
def wide_rows_in_a_loop(monkeypatch):
    """Make every row 'wide' so that the column-chunk loop paths run at small dims under test."""
    for name in ("_INTERP", "_GPU_FWD", "_GPU_BWD"):
        monkeypatch.setattr(tr, name, getattr(tr, name)._replace(max_block=64, loop_block=32))
    tr.launch_config.cache_clear()
    yield
    tr.launch_config.cache_clear()


# ------------------------------------------------------------------------------------------------------
# Configuration and availability: anywhere.


def test_declared_capabilities():
    assert OP.name == "triton"
    assert OP.devices == ("cpu", "cuda")
    assert set(OP.dtypes) == set(DTYPES)
    assert OP.supports_backward is True
    assert OP.interpreted is (os.environ.get("TRITON_INTERPRET") == "1")


@pytest.mark.parametrize("interpreted", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_launch_config_is_a_function_of_dim_and_dtype(dtype, interpreted):
    """The row count is no input of the configuration, so it cannot change a row's reduction."""
    assert set(inspect.signature(tr.launch_config).parameters) == {"dim", "dtype", "backward", "interpreted"}
    for dim in (1, 2, 7, 64, 127, 128, 129, 1000, 4096, 5120, 8192, 12288, 16384, 20000, 131072):
        for backward in (False, True):
            cfg = tr.launch_config(dim, dtype, backward=backward, interpreted=interpreted)
            assert cfg.rows >= 1 and cfg.rows & (cfg.rows - 1) == 0, cfg
            assert cfg.block & (cfg.block - 1) == 0 and cfg.block * cfg.chunks >= dim, cfg
            assert cfg.chunks == 1 or cfg.rows == 1, cfg
            assert dim % cfg.vec == 0 and cfg.vec * torch.empty((), dtype=dtype).element_size() <= 16, cfg
            assert cfg.rows * cfg.block <= 1 << 20, cfg  # Triton's largest tensor
    if not interpreted:
        # At head_dim several rows share a program: one row per program is far from copy speed there.
        assert tr.launch_config(128, dtype, interpreted=False).rows >= 8


@pytest.mark.parametrize("interpreted", [False, True])
def test_dw_partition_covers_every_row_once(interpreted):
    for rows_per_tile in (1, 4, 32):
        for n_rows in (1, 2, 15, 16, 17, 255, 1000, 4097, 65536, 2_000_003):
            chunk_rows, n_chunks = tr.dw_partition(n_rows, rows_per_tile, interpreted=interpreted)
            assert chunk_rows % rows_per_tile == 0
            assert (n_chunks - 1) * chunk_rows < n_rows <= n_chunks * chunk_rows
            limit = tr._INTERP_MAX_DW_CHUNKS if interpreted else tr._GPU_MAX_DW_CHUNKS
            assert n_chunks <= limit


def test_cpu_needs_the_interpreter():
    """Imported without TRITON_INTERPRET=1 and without a GPU, the CPU is refused with a reason."""
    code = (
        "import torch, rmsnorm_conformance.backends.triton_rmsnorm as m\n"
        "op = m.TritonRMSNormOp()\n"
        "reason = op.unavailable_reason('cpu')\n"
        "assert reason and 'TRITON_INTERPRET' in reason, reason\n"
        "assert not op.interpreted\n"
        "try:\n"
        "    op.forward(torch.ones(2, 8), torch.ones(8))\n"
        "except RuntimeError as exc:\n"
        "    assert 'TRITON_INTERPRET' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('ran on the CPU without the interpreter')\n"
        "if not torch.cuda.is_available():\n"
        "    assert 'GPU' in op.unavailable_reason('cuda')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr


def test_imports_without_triton():
    """A missing triton is a reason not to run, not an import error."""
    code = (
        "import sys\n"
        "sys.modules['triton'] = None\n"
        "import rmsnorm_conformance.backends.triton_rmsnorm as m\n"
        "reason = m.TritonRMSNormOp().unavailable_reason('cuda')\n"
        "assert reason and 'triton is not importable' in reason, reason\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_direct_launch_keys_name_every_binary(monkeypatch):
    """A launch reuses a compiled binary only when everything Triton would key that binary on is the same:
    pointer dtypes, constexprs, warps, and whether an integer needs 64 bits (a fake kernel stands in)."""
    through_triton, direct = [], []

    class Compiled:
        function, packed_metadata = "function", "metadata"

        @staticmethod
        def run(*args):
            direct.append(args[9:])

    class FakeKernel:
        @staticmethod
        def fn(x_ptr, n_rows, eps, DIM: tl.constexpr, FLAG: tl.constexpr):
            pass

        def __getitem__(self, grid):
            return lambda *args, **options: through_triton.append(args) or Compiled()

    monkeypatch.setattr(tr, "_INTERPRETED", False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: None, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0, raising=False)
    launch = tr._Launcher(FakeKernel())
    device = torch.device("cpu")
    x16, x32 = torch.empty(4, dtype=torch.float16), torch.empty(4)
    calls = [
        ((x16, 10, 1e-6, 128, True), "triton"),
        ((x16, 99, 1e-5, 128, True), "direct"),  # other runtime values: the same binary
        ((x32, 10, 1e-6, 128, True), "triton"),  # another pointer dtype
        ((x16, 10, 1e-6, 136, True), "triton"),  # another constexpr
        ((x16, 10, 1e-6, 128, False), "triton"),
        ((x16, 2**31, 1e-6, 128, True), "triton"),  # an i64 integer
        ((x16, 2**40, 1e-6, 128, True), "direct"),
    ]
    for args, route in calls:
        before = (len(through_triton), len(direct))
        launch(1, args, 4, device)
        took = "triton" if len(through_triton) > before[0] else "direct"
        assert took == route, f"{args[1:]} went {took}, expected {route}"
    launch(1, calls[0][0], 8, device)
    assert len(direct) == 2, "another warp count is another binary"


@pytest.mark.parametrize("device", DEVICES)
def test_input_errors_are_the_shared_ones(device):
    x = torch.ones(2, 8, device=device)
    with pytest.raises(TypeError, match="dtype"):
        OP.forward(x.double(), torch.ones(8, device=device, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"weight.shape=\(7,\)"):
        OP.forward(x, torch.ones(7, device=device))
    with pytest.raises(ValueError, match="eps"):
        OP.forward(x, torch.ones(8, device=device), eps=0.0)


# ------------------------------------------------------------------------------------------------------
# Forward.


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [1, 7, 127, 128, 1000, 4096])
def test_forward_accuracy(device, dtype, dim):
    x, w, _ = _data(33, dim, dtype, device)
    y = OP.forward(x, w)
    assert y.dtype == dtype and y.shape == x.shape and y.device == x.device
    assert_close(y, REFERENCE.forward_fp32(x, w), dtype, f"forward at dim {dim}")
    y32 = OP.forward_fp32(x, w)
    assert y32.dtype == torch.float32
    assert_close(y32, REFERENCE.forward_fp32(x, w), torch.float32, f"forward_fp32 at dim {dim}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_invariance_bitwise(device, dtype):
    """Rows [0:b] alone, for b across the sizes where kernels change behaviour, equal the same rows in a
    big batch; the GPU sweep uses a batch of 4099 rows and the target dims."""
    on_gpu = device == "cuda"
    plans = [(128, 4099), (1000, 4099), (4096, 4099), (8192, 4099)] if on_gpu else [(128, 300), (1000, 260)]
    for dim, n in plans:
        x, w, _ = _data(n, dim, dtype, device, seed=dim)
        for forward in (OP.forward, OP.forward_fp32):
            full = forward(x, w)
            for b in BATCH_SIZES:
                assert_bitwise(forward(x[:b].clone(), w), full[:b], f"{forward.__name__} rows [0:{b}] of {n}")
            assert_bitwise(forward(x[n - 5 :], w), full[n - 5 :], "a view of the last 5 rows")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layouts_match_a_contiguous_copy(device, dtype):
    """Strided rows (used in place), misaligned starts and column-major layouts (copied once) and leading
    dims all give the bits of a contiguous copy."""
    dim = 1000
    buf, w, _ = _data(40, dim + 24, dtype, device)
    w = w[:dim]
    for x in (
        buf[:, :dim],  # rows inside a wider buffer: row stride 1024
        buf[:, 1 : dim + 1],  # rows starting one element in: misaligned, copied
        buf[3:37, 8 : dim + 8],  # 16-byte-aligned offset inside the row
        buf[:, :dim].t().contiguous().t(),  # column-major
        buf.flatten()[1 : 1 + 30 * dim].view(30, dim),  # contiguous but misaligned start
        buf[:1, :dim].expand(6, dim),  # one row broadcast to six: row stride 0
    ):
        expected = OP.forward(x.contiguous(), w)
        assert_bitwise(OP.forward(x, w), expected, f"strides {x.stride()} offset {x.storage_offset()}")
    x = buf[:, :dim].contiguous()
    full = OP.forward(x, w)
    assert_bitwise(OP.forward(x.view(4, 10, dim), w), full.view(4, 10, dim), "[B, S, D] against [B*S, D]")
    heads = buf[:, :128].contiguous()
    assert_bitwise(OP.forward(heads.view(5, 8, 128), w[:128]), OP.forward(heads, w[:128]).view(5, 8, 128),
                   "[T, H, 128] against [T*H, 128]")
    assert_bitwise(OP.forward(x[0], w), full[0], "a 1-D x")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_batches(device, dtype):
    w = torch.ones(64, dtype=dtype, device=device)
    for shape in ((0, 64), (2, 0, 64), (0, 3, 64)):
        x = torch.empty(shape, dtype=dtype, device=device)
        for forward, out in ((OP.forward, dtype), (OP.forward_fp32, torch.float32)):
            y = forward(x, w)
            assert y.shape == shape and y.dtype == out
    x = torch.empty(0, 64, dtype=dtype, device=device, requires_grad=True)
    wg = w.clone().requires_grad_(True)
    OP.forward(x, wg).sum().backward()
    assert x.grad.shape == (0, 64)
    assert torch.equal(wg.grad, torch.zeros_like(w))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nonfinite_stays_in_its_row(device, dtype):
    x, w, _ = _data(24, 256, dtype, device)
    clean = OP.forward(x, w)
    dirty = x.clone()
    dirty[3, 5] = float("nan")
    dirty[7, :] = float("inf")
    dirty[11, 9] = -float("inf")
    y = OP.forward(dirty, w)
    untouched = [r for r in range(24) if r not in (3, 7, 11)]
    assert_bitwise(y[untouched], clean[untouched], "rows beside NaN/Inf rows")
    assert torch.isnan(y[3]).all() and torch.isnan(y[7]).all()


def test_interpreter_rounds_bf16_like_torch():
    """Under the interpreter the kernels round fp32 to bf16 themselves: to nearest even and overflow to Inf,
    exactly as torch's own conversion; NaN stays NaN (its payload is torch's business)."""
    if not OP.interpreted:
        pytest.skip("only the interpreter converts bf16 in the kernels' own code")
    gen = torch.Generator().manual_seed(3)
    scales = 10.0 ** torch.randint(-30, 30, (64, 1), generator=gen)
    x = (torch.randn(64, 128, generator=gen) * scales).bfloat16()
    x[0, 0] = float("nan")
    w = torch.randn(128, generator=gen).bfloat16()
    w[1] = 3e38  # products past bf16's largest finite value
    y, expected = OP.forward(x, w), OP.forward_fp32(x, w).bfloat16()
    assert torch.isinf(y).any()
    assert torch.equal(torch.isnan(y), torch.isnan(expected))
    assert_bitwise(y[1:], expected[1:], "bf16 rounding")


# ------------------------------------------------------------------------------------------------------
# Backward.


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [1, 7, 128, 1000, 4096])
def test_gradients_against_the_golden_source(device, dtype, dim):
    x, w, g = _data(40, dim, dtype, device)
    _, dx, dw = _grads(x, w, g)
    assert dx.dtype == dtype and dw.dtype == dtype
    gx, gw = _golden(x, w, g)
    assert_close(dx, gx, dtype, f"dx at dim {dim}", gradients=True)
    assert_close(dw, gw, dtype, f"dw at dim {dim}", gradients=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dx_invariant_and_dw_deterministic(device, dtype):
    on_gpu = device == "cuda"
    plans = [(128, 4099), (1000, 4099), (4096, 4099), (8192, 4099)] if on_gpu else [(128, 300), (1000, 260)]
    for dim, n in plans:
        x, w, g = _data(n, dim, dtype, device, seed=dim)
        _, dx, dw = _grads(x, w, g)
        for b in BATCH_SIZES:
            _, dx_part, _ = _grads(x[:b].clone(), w, g[:b].clone())
            assert_bitwise(dx_part, dx[:b], f"dx of rows [0:{b}] of {n} at dim {dim}")
        _, dx_again, dw_again = _grads(x, w, g)
        assert_bitwise(dw_again, dw, f"dw run to run at dim {dim}")
        assert_bitwise(dx_again, dx, f"dx run to run at dim {dim}")


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_of_forward_fp32_and_of_one_input(device):
    x, w, g = _data(20, 256, torch.bfloat16, device)
    g32 = g.float() * 3
    _, dx, dw = _grads(x, w, g32, fp32_out=True)
    gx, gw = _golden(x, w, g32)
    assert_close(dx, gx, torch.bfloat16, "dx through forward_fp32", gradients=True)
    assert_close(dw, gw, torch.bfloat16, "dw through forward_fp32", gradients=True)
    xr = x.clone().requires_grad_(True)
    OP.forward(xr, w).backward(g)
    assert_bitwise(xr.grad, _grads(x, w, g)[1], "dx with weight not requiring grad")
    wr = w.clone().requires_grad_(True)
    OP.forward(x, wr).backward(g)
    assert_bitwise(wr.grad, _grads(x, w, g)[2], "dw with x not requiring grad")
    with torch.no_grad():
        assert OP.forward(xr, wr).grad_fn is None


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_of_strided_inputs(device):
    buf, w, g = _data(30, 1030, torch.float16, device)
    x = buf[:, 3:1003]  # misaligned view: copied for the kernels, gradient goes back to the view
    _, dx, dw = _grads(x, w[:1000], g[:, :1000])
    _, dx_c, dw_c = _grads(x.contiguous(), w[:1000], g[:, :1000].contiguous())
    assert_bitwise(dx, dx_c, "dx of a strided view")
    assert_bitwise(dw, dw_c, "dw of a strided view")
    # A broadcast upstream gradient (row stride 0), as y.sum(0).backward() produces.
    xr = x.contiguous().requires_grad_(True)
    OP.forward(xr, w[:1000]).sum(0).backward(torch.ones(1000, dtype=torch.float16, device=device))
    assert_bitwise(xr.grad, _grads(x.contiguous(), w[:1000], torch.ones_like(g[:, :1000]))[1], "broadcast dy")


# ------------------------------------------------------------------------------------------------------
# Rows too wide for one tile: the column-chunk loops (forced at small dims here).


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_row_path(device, dtype, wide_rows_in_a_loop):
    dim, n = 200, 40
    assert tr.launch_config(dim, dtype).chunks > 1
    x, w, g = _data(n, dim, dtype, device)
    y = OP.forward(x, w)
    assert_close(y, REFERENCE.forward_fp32(x, w), dtype, "looped forward")
    _, dx, dw = _grads(x, w, g)
    gx, gw = _golden(x, w, g)
    assert_close(dx, gx, dtype, "looped dx", gradients=True)
    assert_close(dw, gw, dtype, "looped dw", gradients=True)
    for b in (1, 3, 17):
        assert_bitwise(OP.forward(x[:b].clone(), w), y[:b], f"looped forward rows [0:{b}]")
        assert_bitwise(_grads(x[:b].clone(), w, g[:b].clone())[1], dx[:b], f"looped dx rows [0:{b}]")
    assert_bitwise(_grads(x, w, g)[2], dw, "looped dw run to run")


@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_rows_on_gpu(dtype):
    """Past the widest single tile (16384 columns forward, 8192 backward) the GPU loops over chunks."""
    if OP.unavailable_reason("cuda"):
        pytest.skip(OP.unavailable_reason("cuda"))
    for dim in (12288, 20000):
        x, w, g = _data(300, dim, dtype, "cuda", seed=dim)
        y = OP.forward(x, w)
        assert_close(y, REFERENCE.forward_fp32(x, w), dtype, f"forward at dim {dim}")
        _, dx, dw = _grads(x, w, g)
        gx, gw = _golden(x, w, g)
        assert_close(dx, gx, dtype, f"dx at dim {dim}", gradients=True)
        assert_close(dw, gw, dtype, f"dw at dim {dim}", gradients=True)
        for b in (1, 2, 17):
            assert_bitwise(OP.forward(x[:b].clone(), w), y[:b], f"forward rows [0:{b}] at dim {dim}")
            dx_part = _grads(x[:b].clone(), w, g[:b].clone())[1]
            assert_bitwise(dx_part, dx[:b], f"dx rows [0:{b}] at dim {dim}")


def test_gpu_launches_skip_the_binder_after_the_first():
    """The second call of a configuration goes straight to the compiled kernel's launcher."""
    if OP.unavailable_reason("cuda") or OP.interpreted:
        pytest.skip("needs a GPU and compiled kernels")
    x, w, _ = _data(3, 4096, torch.bfloat16, "cuda")
    first = OP.forward(x, w)
    assert any(entry is not None for entry in tr._launch_fwd._compiled.values())
    assert_bitwise(OP.forward(x, w), first, "direct launch against Triton's own launch")
