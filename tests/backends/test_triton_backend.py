"""The Triton backend's own tests: on the CPU through Triton's interpreter, on a GPU compiled.

Bitwise equality with the native reference (the canonical order) for the forward, the backward and the
variants over a spread of dims and dtypes, bitwise batch invariance (batch sizes up to and past 257 rows,
strided, misaligned and column-major layouts, leading dims), the wide-row and small-tile paths, the custom
ops (opcheck, torch.compile), the launch configuration's independence of the row count, and the
availability answers.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():  # Triton reads this when the kernels are defined
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton", reason="triton is not installed")

import triton.language as tl

import rmsnorm_conformance.backends.triton_rmsnorm as tr
from rmsnorm_conformance.backends.native import NativeRMSNormOp
from rmsnorm_conformance.contract import profile
from rmsnorm_conformance.contract.canonical_order import padded_width

ROOT = Path(__file__).resolve().parents[2]
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


def _small_tiles(monkeypatch, *, max_block: int, loop_block: int, bwd_tile: int) -> None:
    for name in ("_INTERP_FWD", "_GPU_FWD"):
        monkeypatch.setattr(tr, name, getattr(tr, name)._replace(max_block=max_block, loop_block=loop_block))
    for name in ("_INTERP_BWD", "_GPU_BWD"):
        monkeypatch.setattr(tr, name, getattr(tr, name)._replace(max_block=max_block, loop_block=loop_block,
                                                                 tile=bwd_tile, subtree_elems=0))


@pytest.fixture
def wide_rows_in_a_loop(monkeypatch):
    """Make every row 'wide' so that the strided-tile paths (and the backward's row statistics kernel) run
    at small dims under test."""
    _small_tiles(monkeypatch, max_block=64, loop_block=32, bwd_tile=1 << 12)
    tr.launch_config.cache_clear()
    yield
    tr.launch_config.cache_clear()


@pytest.fixture
def one_row_per_tile(monkeypatch):
    """One row per backward tile, as at 4096 columns on a GPU: dw's subtree goes through the full stack."""
    _small_tiles(monkeypatch, max_block=1 << 16, loop_block=1 << 16, bwd_tile=1)
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
    assert set(inspect.signature(tr.launch_config).parameters) == {"dim", "dtype", "backward", "fused_add",
                                                                   "interpreted"}
    for dim in (1, 2, 7, 64, 127, 128, 129, 1000, 4096, 5120, 8192, 12288, 16384, 20000, 131072):
        for backward, fused_add in ((False, False), (False, True), (True, False)):
            cfg = tr.launch_config(dim, dtype, backward=backward, fused_add=fused_add, interpreted=interpreted)
            assert cfg.rows >= 1 and cfg.rows & (cfg.rows - 1) == 0, cfg
            assert cfg.groups & (cfg.groups - 1) == 0 and cfg.groups * 8 * cfg.tiles == padded_width(dim), cfg
            assert cfg.tiles == 1 or cfg.rows == 1 or backward, cfg
            assert dim % cfg.vec == 0 and cfg.vec * torch.empty((), dtype=dtype).element_size() <= 16, cfg
            assert cfg.rows * cfg.groups * 8 <= 1 << 20, cfg  # Triton's largest tensor
            if backward:
                assert cfg.subtree >= tr.DW_ROWS_PER_PROGRAM and cfg.subtree & (cfg.subtree - 1) == 0, cfg
                assert cfg.rows <= cfg.subtree <= 64 * cfg.rows, cfg  # the stack holds six levels
    if not interpreted:
        # At head_dim several rows share a program: one row per program is far from copy speed there.
        assert tr.launch_config(128, dtype, interpreted=False).rows >= 8
        # The fused add moves twice the bytes a row: four rows a program there (measured on an H200).
        assert tr.launch_config(128, dtype, fused_add=True, interpreted=False).rows == 4
        # The backward's pipeline takes four tiles of eight rows an iteration at head_dim, two one-row tiles at 4096
        # and up: as fast there as four, and half the compile (measured on an H200).
        assert tr.launch_config(128, dtype, backward=True, interpreted=False).unroll == 4
        for dim in (1024, 4096, 5120, 8192):
            assert tr.launch_config(dim, dtype, backward=True, interpreted=False).unroll == 2
        # Up to six stages where a tile is 4096 columns of one row (on an H200: 0.690 -> 0.718 of a copy at
        # 65536 x 4096), as many as fit a block's shared memory beside the two tiles an iteration (four for fp32);
        # three where a tile holds several rows (more cost blocks there: 0.850 -> 0.517 at 6) or fewer columns.
        for dim in (128, 1024, 2048):
            assert tr.launch_config(dim, dtype, backward=True, interpreted=False).stages == 3
        for dim in (4096, 5120, 8192):
            cfg = tr.launch_config(dim, dtype, backward=True, interpreted=False)
            tile_bytes = cfg.rows * cfg.groups * 8 * 2 * torch.empty((), dtype=dtype).element_size()
            assert (cfg.stages - 1) * cfg.unroll * tile_bytes <= tr._STAGED_BYTES, (dim, cfg)
            assert cfg.stages == (4 if dtype == torch.float32 else 6), (dim, cfg)
        # One-element accesses (dims no multiple of 16 bytes: conformance draws, no engine's shape), one tile an
        # iteration: a third of the compile time where a tile holds several rows, 0.55-0.65 of it where it is one.
        for dim in (7, 129, 1001, 4095):
            cfg = tr.launch_config(dim, dtype, backward=True, interpreted=False)
            assert (cfg.vec, cfg.stages, cfg.unroll) == (1, 3, 1), cfg


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_pipelines_tiles_fit_shared_memory(dtype, monkeypatch):
    """Asked for eight tiles an iteration, three stages deep, the backward takes fewer where their x and dy would
    not fit a block's shared memory (fp32 rows of 4096 and up), and as many as asked where they would."""
    monkeypatch.setattr(tr, "_GPU_BWD", tr._GPU_BWD._replace(stages=3, staged_rows=1, prefetch=False, unroll=8,
                                                             row_unroll=8, row_stages=0, unroll_aligned_only=False))
    tr.launch_config.cache_clear()
    try:
        for dim in (128, 1000, 4096, 8192):
            cfg = tr.launch_config(dim, dtype, backward=True, interpreted=False)
            tile_bytes = cfg.rows * cfg.groups * 8 * 2 * torch.empty((), dtype=dtype).element_size()
            assert (cfg.stages - 1) * cfg.unroll * tile_bytes <= tr._STAGED_BYTES, (dim, cfg)
            assert cfg.unroll == 8 or (cfg.stages - 1) * 2 * cfg.unroll * tile_bytes > tr._STAGED_BYTES, (dim, cfg)
        assert tr.launch_config(4096, dtype, backward=True, interpreted=False).unroll == \
            {torch.float32: 2, torch.bfloat16: 4, torch.float16: 4}[dtype]
    finally:
        tr.launch_config.cache_clear()


@pytest.mark.parametrize("subtree", [64, 512])
def test_dw_programs_cover_every_row_once(subtree):
    """Program p owns rows 8 * (p + S * m) + e, e in [0, 8), m in [0, subtree / 8): every row of the padded
    batch once."""
    groups = subtree // 8
    for n_rows in (1, 2, 15, 16, 17, 63, 64, 65, 255, 1000, 4097, 65536):
        programs = tr.dw_programs(n_rows, subtree)
        assert programs & (programs - 1) == 0
        owned = sorted(8 * (p + programs * m) + e for p in range(programs) for m in range(groups) for e in range(8))
        assert owned == list(range(max(padded_width(n_rows), subtree)))


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
        launch((1,), args, 4, device)
        took = "triton" if len(through_triton) > before[0] else "direct"
        assert took == route, f"{args[1:]} went {took}, expected {route}"
    launch((1,), calls[0][0], 8, device)
    assert len(direct) == 2, "another warp count is another binary"


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_one_binary_serves_every_dim_of_a_padded_width(monkeypatch, backward):
    """A GPU compiles one binary per key of the launcher; the dim must not be in it, or every dim a conformance run
    draws costs a compile. Between 65 and 128 columns (one padded width), the keys differ only by the vector width
    (8 in bf16 where the dim is a multiple of 8, else 1) and for 128, a power of two, which keeps its own binary with
    the dim a constant."""
    if tr.triton is None:
        pytest.skip("triton is not importable")
    seen: dict[int, tuple] = {}
    real = {"fwd": tr._launch_fwd, "bwd": tr._launch_bwd}

    def recorder(name):
        def record(grid, args, num_warps, device, maxnreg=0):
            seen.setdefault(dim, {})[name] = real[name]._key(args, num_warps, device, maxnreg)
        return record

    monkeypatch.setattr(tr, "_launch_fwd", recorder("fwd"))
    monkeypatch.setattr(tr, "_launch_bwd", recorder("bwd"))
    monkeypatch.setattr(tr, "_launch_dw", lambda *args, **kwargs: None)
    monkeypatch.setattr(tr, "_launch_stats", lambda *args, **kwargs: None)
    for dim in range(65, 129):
        x = torch.ones(3, dim, dtype=torch.bfloat16)
        w = torch.ones(dim, dtype=torch.bfloat16)
        if backward:
            tr._backward(x, w, x, 1e-6, True, True)
        else:
            tr._forward(x, w, 1e-6, torch.bfloat16)
    name = "bwd" if backward else "fwd"
    keys = {dim: seen[dim][name] for dim in seen}
    by_vec: dict[int, set] = {}
    for dim, key in keys.items():
        if dim != 128:
            by_vec.setdefault(8 if dim % 8 == 0 else 1, set()).add(key)
    assert sorted(by_vec) == [1, 8] and all(len(k) == 1 for k in by_vec.values()), by_vec
    assert keys[128] not in set().union(*by_vec.values()), "a power of two keeps its own binary"
    assert tr.dim_constexpr(128) == 128 and tr.dim_constexpr(127) == 0 and tr.dim_constexpr(4) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_the_weight_modes_share_a_binary(monkeypatch, device):
    """The plain, offset (1 + w) and unweighted forwards differ in a runtime argument, not a constexpr: one binary
    for the three at every dtype pair (as constexprs they were 139 of a cold conformance run's 428 forward
    binaries), while the mode itself still reaches the kernel. So prepare's forward at a pair readies the offset's
    binary there and, where the weight is in x's dtype, the unweighted one's."""
    keys: dict[tuple, tuple] = {}
    modes: dict[tuple, object] = {}
    real = tr._launch_fwd
    params = list(inspect.signature(real.kernel.fn).parameters)
    calling: list[tuple] = [()]

    class Recorder:
        def __call__(self, grid, args, num_warps, device, maxnreg=0):
            keys[calling[0]] = real._key(args, num_warps, device, maxnreg)
            modes[calling[0]] = args[params.index("weight_mode")]

        def binary(self, args, num_warps, device):
            return None  # nothing launched: no plan

    monkeypatch.setattr(tr, "_launch_fwd", Recorder())
    monkeypatch.setattr(tr, "_PLANS", {})  # a plan another test left would launch without the launcher
    for x_dtype, w_dtype in tr.CONTRACT_DTYPE_PAIRS:
        x = torch.ones(3, 96, dtype=x_dtype, device=device)
        w = torch.ones(96, dtype=w_dtype, device=device)
        for calling[0], run in {(x_dtype, w_dtype, "forward"): lambda x=x, w=w: OP.forward(x, w),
                                (x_dtype, w_dtype, "offset"): lambda x=x, w=w: OP.forward_offset(x, w),
                                (x_dtype, "unweighted"): lambda x=x: OP.forward_unweighted(x)}.items():
            run()
        assert keys[x_dtype, w_dtype, "offset"] == keys[x_dtype, w_dtype, "forward"], (x_dtype, w_dtype)
        assert len({modes[x_dtype, w_dtype, "forward"], modes[x_dtype, w_dtype, "offset"],
                    modes[x_dtype, "unweighted"]}) == 3
    for x_dtype, w_dtype in tr.CONTRACT_DTYPE_PAIRS:
        if x_dtype == w_dtype:
            assert keys[x_dtype, "unweighted"] == keys[x_dtype, x_dtype, "forward"], x_dtype


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
# Bitwise equal to the native reference: the canonical order, every entry point.

PARITY_DIMS = (1, 7, 8, 127, 128, 129, 4096, 4097, 5120)


def _native_grads(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, fp32_out: bool = False):
    x = x.detach().clone().requires_grad_(True)
    w = w.detach().clone().requires_grad_(True)
    (REFERENCE.forward_fp32 if fp32_out else REFERENCE.forward)(x, w, 1e-6).backward(g)
    return x.grad, w.grad


def _assert_parity(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, what: str) -> None:
    __tracebackhide__ = True
    assert_bitwise(OP.forward(x, w), REFERENCE.forward(x, w), f"forward {what}")
    assert_bitwise(OP.forward_fp32(x, w), REFERENCE.forward_fp32(x, w), f"forward_fp32 {what}")
    _, dx, dw = _grads(x, w, g)
    ndx, ndw = _native_grads(x, w, g)
    assert_bitwise(dx, ndx, f"dx {what}")
    assert_bitwise(dw, ndw, f"dw {what}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", PARITY_DIMS)
def test_bitwise_equal_to_native(device, dtype, dim):
    """Rows over eight decades of scale, an odd row count: forward, forward_fp32, dx and dw, bit for bit."""
    x, w, g = _data(19, dim, dtype, device, seed=dim)
    x = x * torch.logspace(-4, 4, 19, device=device).to(dtype).unsqueeze(1)
    _assert_parity(x, w, g, f"at dim {dim}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fp32_weight_bitwise_equal_to_native(device, dtype):
    """The mixed-precision pair: an fp32 weight with 16-bit x, forward, dx and the fp32 dw."""
    x, _, g = _data(19, 129, dtype, device, seed=5)
    w = _data(1, 129, torch.float32, device, seed=6)[1]
    _assert_parity(x, w, g, f"{dtype} x with an fp32 weight")
    assert _grads(x, w, g)[2].dtype == torch.float32


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [1, 8, 63, 64, 65, 200])
def test_dw_tree_over_the_rows(device, rows):
    """dw's canonical tree over the rows at row counts below, at and past one program's 64 rows."""
    x, w, g = _data(rows, 96, torch.float32, device, seed=rows)
    _assert_parity(x, w, g, f"with {rows} rows")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("full_pass", [False, True], ids=["own-rows", "full-pass"])
def test_dw_passes_are_the_halving_tree_over_the_partial_rows(device, full_pass, monkeypatch):
    """dw's last step, the halving tree over the programs' partial rows in passes of at most _DW_PASS rows, each
    pass's tile the pass's own rows or (as on the GPU) _DW_PASS rows padded with +0.0: bitwise the halving over the
    rows, + 0.0, rounded to the weight's dtype, for 1 to 256 partial rows (256: two passes), signed zeros too."""
    monkeypatch.setattr(tr, "_DW_FULL_PASS", full_pass)
    gen = torch.Generator().manual_seed(0)
    for n in (1, 2, 4, 16, 64, 128, 256):
        for dim, w_dtype in ((5, torch.float32), (128, torch.bfloat16)):
            partials = torch.randn(n, dim, generator=gen) * torch.rand(n, 1, generator=gen) * 1e3
            partials[:, 0] = -0.0  # every term -0.0: -0.0 up to the final + 0.0
            partials[:, 1] = torch.where(torch.arange(n) % 2 == 0, -0.0, 0.0)
            partials[0, 2] = -0.0
            tree = partials.clone()
            while tree.shape[0] > 1:
                half = tree.shape[0] // 2
                tree = tree[:half] + tree[half:]
            expected = (tree[0] + 0.0).to(w_dtype)
            actual = tr._sum_partials(partials.to(device), torch.empty(dim, dtype=w_dtype, device=device))
            assert_bitwise(actual.cpu(), expected, f"{n} partial rows of {dim}")


def _gpu_backward_tuning(monkeypatch: pytest.MonkeyPatch, param: tuple, **fields: object):
    """A fixture's body: the GPU backward's tuning with ``fields`` replaced, taken by the backward even in Triton's
    interpreter; yields ``param``."""
    monkeypatch.setattr(tr, "_GPU_BWD", tr._GPU_BWD._replace(**fields))
    real = tr.launch_config

    def gpu_backward(dim: int, dtype: torch.dtype, *, backward: bool = False, fused_add: bool = False,
                     interpreted: bool = tr._INTERPRETED) -> tr.LaunchConfig:
        return real(dim, dtype, backward=backward, fused_add=fused_add, interpreted=interpreted and not backward)

    monkeypatch.setattr(tr, "launch_config", gpu_backward)
    real.cache_clear()
    yield param
    real.cache_clear()


@pytest.fixture(params=[(0, 1), (3, 1), (3, 2), (2, 4)], ids=["prefetch", "pipelined", "pipelined-2", "pipelined-4"])
def backward_loop(request, monkeypatch):
    """The GPU backward's loop over tiles with the next tile prefetched into registers, or as Triton's software
    pipeline (loads staged in shared memory), one, two or four tiles an iteration, at every dim: the GPU tuning
    picks the loop by the rows a tile holds. On the CPU the backward takes the GPU tuning too (strided tiles, joint
    sums, flat loads and the loop asked for), run by Triton's interpreter: the GPU's code paths held to native's
    bits where CI runs, not only on a GPU."""
    stages, unroll = request.param
    yield from _gpu_backward_tuning(monkeypatch, request.param, stages=stages, staged_rows=1, prefetch=not stages,
                                    unroll=unroll, row_unroll=unroll, row_stages=0, unroll_aligned_only=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_loops_are_bitwise_native(device, dtype, backward_loop):
    """Each loop at a tile of several rows (128, 129), of one (1000, 4096) and of part of one (8192: row statistics
    from a first kernel, two column chunks), with batches that end inside a tile, a program's subtree and the
    pipeline's stages: dx and dw bit for bit native's."""
    on_gpu = device == "cuda"
    plans = [(dim, rows) for dim in (128, 129, 1000, 4096, 8192) for rows in (1, 5, 33, 70, 4099)] if on_gpu else \
        [(128, 70), (129, 33), (1000, 5), (4096, 3), (8192, 2)]
    for dim, rows in plans:
        cfg = tr.launch_config(dim, dtype, backward=True)
        stages, unroll = backward_loop
        assert (cfg.stages, cfg.unroll, cfg.prefetch, cfg.strided) == (stages, unroll, not stages, True), cfg
        x, w, g = _data(rows, dim, dtype, device, seed=rows + dim)
        _assert_parity(x, w, g, f"{rows} rows at dim {dim}")


@pytest.fixture(params=[(True, False), (False, False), (True, True)], ids=["row-select", "product-select",
                                                                            "split-rows"])
def backward_form(request, monkeypatch):
    """The GPU backward (pipelined, its default loop) under each form of its bookkeeping: a padding row's dw products
    zeroed through its inv or product by product (row_select), and a strided tile's rows computed whole or as a
    loop-invariant part plus one scalar (split_rows); on the CPU through Triton's interpreter, as backward_loop."""
    row_select, split_rows = request.param
    yield from _gpu_backward_tuning(monkeypatch, request.param, row_select=row_select, split_rows=split_rows)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_forms_are_bitwise_native(device, dtype, backward_form):
    """Each form at tiles of several rows (128, 129) and of one (1000, 4096), batches ending inside a tile and a
    program's subtree: forward, dx and dw bit for bit native's."""
    row_select, split_rows = backward_form
    for dim, rows in ((128, 70), (129, 33), (1000, 5), (4096, 3)):
        cfg = tr.launch_config(dim, dtype, backward=True)
        assert (cfg.row_select, cfg.split_rows, cfg.strided) == (row_select, split_rows, True), cfg
        x, w, g = _data(rows, dim, dtype, device, seed=rows + dim)
        _assert_parity(x, w, g, f"{rows} rows at dim {dim}")


@pytest.mark.parametrize("device", DEVICES)
def test_rows_past_the_batch_add_zeros_where_eps_is_zero_in_fp32(device, backward_form):
    """eps = 1e-50 is +0.0 in fp32: a zero row's rms is 0 and its inv +Inf. The rows that pad the batch to its
    subtrees (zeros) must add +0.0 to dw, not 0 * Inf = NaN: dx and dw bit for bit native's, under each form."""
    for dim, rows in ((128, 70), (4096, 3)):
        x, w, g = _data(rows, dim, torch.bfloat16, device, seed=rows)
        grads = []
        for fn in (OP.forward, REFERENCE.forward):
            xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
            fn(xr, wr, 1e-50).backward(g)
            grads.append((xr.grad, wr.grad))
        (dx, dw), (ndx, ndw) = grads
        assert_bitwise(dx, ndx, f"dx, eps 1e-50, {rows} rows at dim {dim}")
        assert_bitwise(dw, ndw, f"dw, eps 1e-50, {rows} rows at dim {dim}")


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_of_forward_fp32_bitwise(device):
    x, w, g = _data(20, 256, torch.bfloat16, device)
    g32 = g.float() * 3
    _, dx, dw = _grads(x, w, g32, fp32_out=True)
    ndx, ndw = _native_grads(x, w, g32, fp32_out=True)
    assert_bitwise(dx, ndx, "dx through forward_fp32")
    assert_bitwise(dw, ndw, "dw through forward_fp32")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_signed_zeros_and_nonfinite_match_native(device, dtype):
    """Zero rows under negative gradients (every dw product -0.0), and NaN/Inf rows: native's bits."""
    x, w, g = _data(16, 64, dtype, device)
    x[:8] = 0
    g[:8] = -g[:8].abs()
    _assert_parity(x[:8], w, g[:8], "on zero rows")
    x[9, 3] = float("nan")
    x[10] = float("inf")
    assert torch.equal(OP.forward(x, w).isnan(), REFERENCE.forward(x, w).isnan()), "NaN positions"
    finite = [r for r in range(16) if r not in (9, 10)]
    assert_bitwise(OP.forward(x, w)[finite], REFERENCE.forward(x, w)[finite], "rows beside NaN/Inf rows")


# ------------------------------------------------------------------------------------------------------
# Variants of the backend protocol, against straightforward torch of their definitions.

VARIANT_DIMS = (1, 7, 128, 129, 4096)


def _norm32(x: torch.Tensor) -> torch.Tensor:
    """x32 * (1 / rms) in the canonical order: the reference with a weight of ones (a multiply by 1 is exact)."""
    return REFERENCE.forward_fp32(x, torch.ones(x.shape[-1], dtype=x.dtype, device=x.device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", VARIANT_DIMS)
def test_fused_add(device, dtype, dim):
    """residual_out = x + residual rounded to the residual's dtype; y = RMSNorm(residual_out as stored)."""
    x, w, r = _data(21, dim, dtype, device, seed=dim)
    y, ro = OP.fused_add(x, r, w)
    assert y.dtype == dtype and ro.dtype == dtype and y.shape == ro.shape == x.shape
    assert_bitwise(ro, (x.float() + r.float()).to(dtype), "residual_out")
    assert_bitwise(y, REFERENCE.forward(ro, w), "y")
    full_y, full_ro = y, ro
    for b in (1, 2, 17):
        y, ro = OP.fused_add(x[:b].clone(), r[:b].clone(), w)
        assert_bitwise(y, full_y[:b], f"y of rows [0:{b}]")
        assert_bitwise(ro, full_ro[:b], f"residual_out of rows [0:{b}]")


@pytest.mark.parametrize("device", DEVICES)
def test_fused_add_with_an_fp32_residual(device):
    x, w, r = _data(9, 200, torch.bfloat16, device)
    y, ro = OP.fused_add(x, r.float(), w)
    assert ro.dtype == torch.float32 and y.dtype == torch.bfloat16
    assert_bitwise(ro, x.float() + r.float(), "fp32 residual_out")
    assert_bitwise(y, REFERENCE.forward_fp32(ro, w.float()).bfloat16(), "y of an fp32 residual")


@pytest.mark.parametrize("device", DEVICES)
def test_fused_add_refuses_a_mismatched_residual(device):
    x, w, r = _data(4, 16, torch.float32, device)
    with pytest.raises(ValueError, match=r"x.shape=\(4, 16\).*residual.shape=\(4, 8\)"):
        OP.fused_add(x, r[:, :8], w)
    with pytest.raises(TypeError, match="float64"):
        OP.fused_add(x, r.double(), w)
    with pytest.raises(TypeError, match="bfloat16"):
        OP.fused_add(x, r.bfloat16(), w)  # a 16-bit residual with fp32 x


def _launches_counted(monkeypatch) -> list:
    """Record each forward launch's output pointers (y, residual_out)."""
    seen = []
    launch = tr._launch_fwd

    def counted(grid, args, *rest, **kw):
        seen.append((args[3].data_ptr(), args[4].data_ptr()))
        return launch(grid, args, *rest, **kw)

    monkeypatch.setattr(tr, "_launch_fwd", counted)
    return seen


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", VARIANT_DIMS)
def test_fused_add_in_place(device, dtype, dim, monkeypatch):
    """fused_add_: y into x and residual_out into residual, fused_add's bits. Dense rows are the kernel's outputs
    (one launch writing into x and residual); rows it cannot write as dense rows (a row stride past the dim,
    column-major) are computed aside and copied back."""
    x, w, r = _data(21, dim, dtype, device, seed=dim)
    y, ro = OP.fused_add(x, r, w)
    launches = _launches_counted(monkeypatch)
    xi, ri = x.clone(), r.clone()
    returned = OP.fused_add_(xi, ri, w)
    assert returned[0] is xi and returned[1] is ri
    assert_bitwise(xi, y, "in-place y")
    assert_bitwise(ri, ro, "in-place residual_out")
    assert launches == [(xi.data_ptr(), ri.data_ptr())], "dense rows are written by the kernel itself"
    for what, lay in (("rows with a stride past the dim", lambda t: torch.cat([t, t], 1)[:, :dim]),
                      ("column-major", lambda t: t.t().contiguous().t()),
                      ("leading dims", lambda t: t.reshape(3, 7, dim))):
        xl, rl = lay(x.clone()), lay(r.clone())
        OP.fused_add_(xl, rl, w)
        assert_bitwise(xl.reshape(21, dim), y, f"in-place y, {what}")
        assert_bitwise(rl.reshape(21, dim), ro, f"in-place residual_out, {what}")


@pytest.mark.parametrize("device", DEVICES)
def test_fused_add_in_place_edges(device):
    """An fp32 residual, an empty batch, and what cannot be written in place: named, before any write."""
    x, w, r = _data(9, 200, torch.bfloat16, device)
    y, ro = OP.fused_add(x, r.float(), w)
    xi, ri = x.clone(), r.float()
    OP.fused_add_(xi, ri, w)
    assert_bitwise(xi, y, "in-place y of an fp32 residual")
    assert_bitwise(ri, ro, "in-place fp32 residual_out")
    empty = x[:0].clone()
    assert OP.fused_add_(empty, empty.clone(), w)[0] is empty
    xo = x.clone()
    with pytest.raises(ValueError, match="overlap in memory"):
        OP.fused_add_(xo, xo, w)
    with pytest.raises(ValueError, match="overlap in memory"):
        OP.fused_add_(xo[:5], xo[4:], w)
    with pytest.raises(ValueError, match=r"writes into x, whose elements share memory"):
        OP.fused_add_(x[0].expand(9, 200), r.clone(), w)
    assert_bitwise(xo, x, "x after the refused calls")
    with pytest.raises(ValueError, match=r"residual\.shape"):
        OP.fused_add_(x.clone(), r[:, :8].clone(), w)
    with pytest.raises(RuntimeError, match="requires grad"):
        OP.fused_add_(x.clone().requires_grad_(True), r.clone(), w)
    with torch.no_grad():
        OP.fused_add_(x.clone().requires_grad_(True), r.clone(), w)
    # A graph that saved x before it was written in place refuses to use it, as after any in-place op.
    leaf = x.float().clone().requires_grad_(True)
    saved = leaf * 2
    out = saved.sin()
    with torch.no_grad():
        OP.fused_add_(saved, r.float().clone(), w.float())
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", VARIANT_DIMS)
def test_weight_offset_and_no_weight(device, dtype, dim):
    """forward_offset: (x32 * inv) * (1 + w32), 1 + w formed in fp32; forward_unweighted: x32 * inv."""
    x, w, _ = _data(21, dim, dtype, device, seed=dim)
    assert OP.offset_dtype == "float32"
    offset = OP.forward_offset(x, w)
    assert_bitwise(offset, (_norm32(x) * (1 + w.float())).to(dtype), "forward_offset")
    plain = OP.forward_unweighted(x)
    assert_bitwise(plain, _norm32(x).to(dtype), "forward_unweighted")
    for b in (1, 2, 17):
        assert_bitwise(OP.forward_offset(x[:b].clone(), w), offset[:b], f"offset rows [0:{b}]")
        assert_bitwise(OP.forward_unweighted(x[:b].clone()), plain[:b], f"unweighted rows [0:{b}]")


@pytest.fixture(params=[False, True], ids=["tile-3d", "tile-flat"])
def forward_layout(request, monkeypatch):
    """The forward's whole-row tiles loaded as [rows, groups, 8] or as [rows, columns] (``flat``), whichever the
    tuning picks on this device: both layouts run here, on the CPU and on a GPU."""
    for name in ("_INTERP_FWD", "_GPU_FWD", "_GPU_FUSED"):
        monkeypatch.setattr(tr, name, getattr(tr, name)._replace(flat=request.param))
    tr.launch_config.cache_clear()
    tr._PLANS.clear()
    yield request.param
    tr.launch_config.cache_clear()
    tr._PLANS.clear()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_tile_layouts_are_bitwise_native(device, dtype, forward_layout):
    """Each layout of the forward's tile, with and without the residual and in every weight mode, at dims of one
    group, of part of one, at head_dim and its neighbour and at hidden: native's bits (rows over eight decades)."""
    for dim in (1, 7, 128, 129, 1000, 4096):
        assert tr.launch_config(dim, dtype).flat == forward_layout
        x, w, r = _data(19, dim, dtype, device, seed=dim)
        x = x * torch.logspace(-4, 4, 19, device=device).to(dtype).unsqueeze(1)
        assert_bitwise(OP.forward(x, w), REFERENCE.forward(x, w), f"forward at {dim}")
        assert_bitwise(OP.forward_fp32(x, w), REFERENCE.forward_fp32(x, w), f"forward_fp32 at {dim}")
        assert_bitwise(OP.forward_offset(x, w), (_norm32(x) * (1 + w.float())).to(dtype), f"offset at {dim}")
        assert_bitwise(OP.forward_unweighted(x), _norm32(x).to(dtype), f"unweighted at {dim}")
        y, ro = OP.fused_add(x, r, w)
        assert_bitwise(ro, (x.float() + r.float()).to(dtype), f"residual_out at {dim}")
        assert_bitwise(y, REFERENCE.forward(ro, w), f"fused add at {dim}")
        for b in (1, 2, 17):
            assert_bitwise(OP.forward(x[:b].clone(), w), REFERENCE.forward(x[:b], w), f"rows [0:{b}] at {dim}")


# ------------------------------------------------------------------------------------------------------
# Custom ops: what torch.compile and graph capture see.

OPS = torch.ops.rmsnorm_conformance


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    """torch.library.opcheck: schema, fake (meta) implementations, autograd registration, AOT dispatch."""
    x, w, g = _data(5, 64, torch.bfloat16, device)
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    torch.library.opcheck(OPS.triton_rms_norm.default, (xr, wr, 1e-6, False, False))
    torch.library.opcheck(OPS.triton_rms_norm.default, (x, w, 1e-6, True, True))
    torch.library.opcheck(OPS.triton_rms_norm.default, (x, None, 1e-6, False, False))
    torch.library.opcheck(OPS.triton_rms_norm_backward.default, (x, w, g, 1e-6, True, True))
    torch.library.opcheck(OPS.triton_rms_norm_backward.default, (x, w, g, 1e-6, False, True))
    torch.library.opcheck(OPS.triton_fused_add_rms_norm.default, (x, g, w, 1e-6))
    torch.library.opcheck(OPS.triton_fused_add_rms_norm_.default, (x.clone(), g.clone(), w, 1e-6))


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_op_is_bitwise_eager(device):
    """torch.compile(fullgraph=True) of a function calling the ops: the eager bits, forward and backward."""
    x, w, g = _data(7, 128, torch.float32, device)
    r = g.clone()

    def step(x, w, r):
        y = OPS.triton_rms_norm(x, w, 1e-6, False, False)
        fused = OPS.triton_fused_add_rms_norm(x.detach(), r, w.detach(), 1e-6)  # inference only
        return y, fused[0], fused[1]

    def step_in_place(x, r, w):
        OP.fused_add_(x, r, w)
        return x * 1, r * 1  # the mutated inputs, read after the op inside the graph

    compiled = torch.compile(step, fullgraph=True)
    xc, wc = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    out = compiled(xc, wc, r)
    xe, we = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    eager = (OP.forward(xe, we), *OP.fused_add(x, r, w))
    xi, ri = x.clone(), r.clone()
    in_place = torch.compile(step_in_place, fullgraph=True)(xi, ri, w)
    out = (*out, *in_place, xi, ri)
    eager = (*eager, *eager[1:], *eager[1:])
    whats = ("y", "fused y", "residual_out", "in-place y read in the graph", "in-place residual_out read in the graph",
             "in-place y", "in-place residual_out")
    for a, b, what in zip(out, eager, whats, strict=True):
        assert_bitwise(a, b, f"compiled {what}")
    out[0].backward(g)
    eager[0].backward(g)
    assert_bitwise(xc.grad, xe.grad, "compiled dx")
    assert_bitwise(wc.grad, we.grad, "compiled dw")


def test_cuda_graph_replay_is_bitwise_eager():
    if OP.unavailable_reason("cuda") or OP.interpreted:
        pytest.skip("CUDA graphs need a GPU and compiled kernels")
    x, w, r = _data(64, 4096, torch.bfloat16, "cuda")
    eager = OP.forward(x, w), *OP.fused_add(x, r, w)
    OP.forward(x, w), OP.fused_add(x, r, w)  # warm: compiled and cached before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = OP.forward(x, w), *OP.fused_add(x, r, w)
    graph.replay()
    torch.cuda.synchronize()
    for a, b, what in zip(captured, eager, ("y", "fused y", "residual_out"), strict=True):
        assert_bitwise(a, b, f"graph replay {what}")


# ------------------------------------------------------------------------------------------------------
# Rows too wide for one tile, and one row per backward tile (forced at small dims here).


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_row_path(device, dtype, wide_rows_in_a_loop):
    dim, n = 200, 40
    assert tr.launch_config(dim, dtype).tiles > 1 and tr.launch_config(dim, dtype, backward=True).tiles > 1
    x, w, g = _data(n, dim, dtype, device)
    _assert_parity(x, w, g, "on the wide-row path")
    y = OP.forward(x, w)
    _, dx, dw = _grads(x, w, g)
    for b in (1, 3, 17):
        assert_bitwise(OP.forward(x[:b].clone(), w), y[:b], f"looped forward rows [0:{b}]")
        assert_bitwise(_grads(x[:b].clone(), w, g[:b].clone())[1], dx[:b], f"looped dx rows [0:{b}]")
    assert_bitwise(_grads(x, w, g)[2], dw, "looped dw run to run")
    r = _data(n, dim, dtype, device, seed=1)[0]
    y, ro = OP.fused_add(x, r, w)
    assert_bitwise(ro, (x.float() + r.float()).to(dtype), "looped fused add: residual_out")
    assert_bitwise(y, REFERENCE.forward(ro, w), "looped fused add: y")
    # In place, its second pass would read the residual it had overwritten: computed aside and copied back.
    xi, ri = x.clone(), r.clone()
    OP.fused_add_(xi, ri, w)
    assert_bitwise(xi, y, "looped fused add in place: y")
    assert_bitwise(ri, ro, "looped fused add in place: residual_out")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("rows", "dim"), [(3, 40), (70, 24), (130, 9)])
def test_one_row_per_backward_tile(device, dtype, rows, dim, one_row_per_tile):
    assert tr.launch_config(dim, dtype, backward=True).rows == 1
    x, w, g = _data(rows, dim, dtype, device, seed=rows)
    _assert_parity(x, w, g, f"one row per tile, {rows} rows")


@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_rows_on_gpu(dtype):
    """Past the widest single tile (16384 columns forward, 4096 backward) the GPU loops over tiles."""
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
    """The second call of a configuration goes straight to the compiled kernel's launcher, through a plan
    keyed on the call's metadata; a misaligned input of the same metadata takes the full path."""
    if OP.unavailable_reason("cuda") or OP.interpreted:
        pytest.skip("needs a GPU and compiled kernels")
    x, w, _ = _data(3, 4096, torch.bfloat16, "cuda")
    first = OP.forward(x, w)
    assert any(entry is not None for entry in tr._launch_fwd._compiled.values())
    assert tr._plan_key(x, w, 1e-6, False) in tr._PLANS
    assert_bitwise(OP.forward(x, w), first, "planned launch against Triton's own launch")
    buf = torch.empty(3 * 4096 + 1, dtype=torch.bfloat16, device="cuda")
    shifted = buf[1:].view(3, 4096)
    shifted.copy_(x)
    assert tr._plan_key(shifted, w, 1e-6, False) in tr._PLANS and shifted.data_ptr() % 16
    assert_bitwise(OP.forward(shifted, w), first, "a misaligned input of a planned shape")


@pytest.fixture
def pointers_as_integers(monkeypatch):
    """Under the interpreter, plans that launch: every tensor torch.empty and torch.empty_like make is kept by its
    address, and each launcher's binary is a stand-in launch function that maps integer arguments back to those
    tensors and runs the kernel in the interpreter. Returns the table of tensors, to which a test adds its inputs."""
    live: dict[int, torch.Tensor] = {}

    def kept(make):
        def allocate(*args, **kwargs):
            t = make(*args, **kwargs)
            live[t.data_ptr()] = t
            return t
        return allocate

    def launch(grid_x, grid_y, grid_z, stream, kernel, *args):
        tensors = [live[a] if type(a) is int and a in live else a for a in args]
        with np.errstate(all="ignore"):
            kernel[(grid_x, grid_y, grid_z)](*tensors)

    monkeypatch.setattr(torch, "empty", kept(torch.empty))
    monkeypatch.setattr(torch, "empty_like", kept(torch.empty_like))
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: None, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0, raising=False)
    for launcher in (tr._launch_stats, tr._launch_bwd, tr._launch_dw):
        monkeypatch.setattr(launcher, "binary", lambda *args, k=launcher.kernel, **kwargs: (launch, (k,)))
    return live


def test_a_backward_plan_replays_the_launchers_bits(monkeypatch, wide_rows_in_a_loop, pointers_as_integers):
    """The plan's bookkeeping, on the CPU: the plan made from a backward's launches (the row statistics first where
    rows take several tiles, dw in two passes where there are four partial rows), replayed by _planned_backward
    with its pointers as integers, gives dx and dw bitwise those of the launchers' path, with x frozen and with the
    weight frozen. On a GPU the test below holds the real launches."""
    if not OP.interpreted:
        pytest.skip("the GPU's own plans are held by test_gpu_backward_launches_from_its_plan_after_the_first")
    monkeypatch.setattr(tr, "_INTERP_BWD", tr._INTERP_BWD._replace(subtree_rows=32))  # 65 rows: 4 partial rows
    monkeypatch.setattr(tr, "_DW_PASS", 2)  # 4 partial rows -> 2 -> 1: dw's passes chained through a scratch row
    tr.launch_config.cache_clear()
    recorded = []
    launcher_call = tr._Launcher.__call__

    def record(self, grid, args, num_warps, device, maxnreg=0):
        recorded.append((self, grid, args, num_warps, maxnreg))
        launcher_call(self, grid, args, num_warps, device, maxnreg)

    monkeypatch.setattr(tr._Launcher, "__call__", record)
    # (rows, dim, dx, dw): the row statistics (rows of four tiles), dw's two passes, x frozen, the weight frozen
    for rows, dim, need_dx, need_dw in ((33, 100, True, True), (65, 40, True, True), (65, 40, True, False),
                                        (65, 40, False, True)):
        x, w, g = _data(rows, dim, torch.bfloat16, "cpu", seed=rows)
        pointers_as_integers.update({t.data_ptr(): t for t in (x, w, g)})
        recorded.clear()
        expected = tr._backward(x, w, g, 1e-6, need_dx, need_dw)
        cfg = tr.launch_config(dim, torch.bfloat16, backward=True)
        plan = tr._make_backward_plan(list(recorded), x.device, rows, dim, cfg)
        assert plan is not None and (plan.stats is not None) == (dim > 64)
        assert len(plan.passes) == (0 if not need_dw else 2 if rows > 64 else 1)
        planned = tr._planned_backward(plan, x, w, g, need_dx, need_dw)
        assert planned is not None
        for a, b, what in zip(expected, planned, ("dx", "dw"), strict=True):
            assert (a is None) == (b is None), what
            if a is not None:
                assert_bitwise(b, a, f"planned {what} against the launchers' {what} ({need_dx=}, {need_dw=})")


@pytest.mark.parametrize("dim", [4096, 12288], ids=["one-tile", "tiled"])
def test_gpu_backward_launches_from_its_plan_after_the_first(dim, monkeypatch):
    """A backward's second call of the same metadata launches from its plan (the stats pass too, where rows take
    several tiles): dx and dw bitwise those of the launchers' path, with x frozen and with the weight frozen; a
    misaligned dy of the same metadata takes the launchers' path again."""
    if OP.unavailable_reason("cuda") or OP.interpreted:
        pytest.skip("needs a GPU and compiled kernels")
    planned = []
    real = tr._planned_backward

    def counted(*args, **kwargs):
        done = real(*args, **kwargs)
        planned.append(done is not None)
        return done

    monkeypatch.setattr(tr, "_planned_backward", counted)
    monkeypatch.setattr(tr, "_BACKWARD_PLANS", {})
    x, w, g = _data(300, dim, torch.bfloat16, "cuda", seed=dim)
    for need_dx, need_dw in ((True, True), (True, False), (False, True)):
        first = tr._backward(x, w, g, 1e-6, need_dx, need_dw)
        assert planned == [True] * len(planned), "a plan would not launch"
        count = len(planned)
        second = tr._backward(x, w, g, 1e-6, need_dx, need_dw)
        assert planned[count:] == [True], "the second call did not launch from its plan"
        for a, b, what in zip(first, second, ("dx", "dw"), strict=True):
            assert (a is None) == (b is None), what
            if a is not None:
                assert_bitwise(b, a, f"planned {what} against the launchers' {what} ({need_dx=}, {need_dw=})")
    assert planned == [True, True, True]
    buf = torch.empty(300 * dim + 1, dtype=torch.bfloat16, device="cuda")
    shifted = buf[1:].view(300, dim)
    shifted.copy_(g)
    assert shifted.data_ptr() % 16
    dx, dw = tr._backward(x, w, shifted, 1e-6, True, True)
    assert planned[-1] is False, "a misaligned dy launched from the plan"
    reference = tr._backward(x, w, g, 1e-6, True, True)
    assert_bitwise(dx, reference[0], "dx of a misaligned dy of a planned shape")
    assert_bitwise(dw, reference[1], "dw of a misaligned dy of a planned shape")


def test_prepare_jobs_take_each_binary_class_once_and_cover_every_prepared_dim():
    dims = [4096, 128, 1, 2, 3, 7, 1000, 8191]
    jobs = tr.prepare_jobs(dims)
    assert len(jobs) == len(set(jobs))
    classes = {(tr.binary_dim_class(dim, x), x, w) for dim, x, w, _ in jobs}
    for dim in tr.dims_of_every_width(dims):
        for x, w in tr.CONTRACT_DTYPE_PAIRS:
            assert (tr.binary_dim_class(dim, x), x, w) in classes, (dim, x, w)
    # 1, 2, 3 and 7 share a class at every dtype (padded width 8, no 16-byte rows): one job set for them all
    assert {dim for dim, *_ in jobs} & {1, 2, 3, 7} == {1}
    # a width that none of the dims stands for with 16-byte rows gets three quarters of it
    assert 96 in tr.dims_of_every_width(dims) and 96 not in dims
    # each call once per class and pair; an fp32 residual: 16-bit x only
    per_pair = {(x, w): {c for d, xx, ww, c in jobs if (xx, ww) == (x, w) and d == 4096}
                for x, w in tr.CONTRACT_DTYPE_PAIRS}
    assert per_pair[torch.float32, torch.float32] == set(tr.PREPARED_CALLS) - {"fused_add_fp32_residual"}
    assert per_pair[torch.bfloat16, torch.float32] == set(tr.PREPARED_CALLS)
    # what a first-call process calls at the first dims comes first, then every other job in the dims' order
    lead = [job for job in jobs if job[0] in dims[:tr.LEAD_DIMS] and job[3] in tr.FIRST_CALLS]
    assert lead and jobs[:len(lead)] == lead
    rest = jobs[len(lead):]
    assert not {j[3] for j in rest if j[0] in dims[:tr.LEAD_DIMS]} & set(tr.FIRST_CALLS)
    order = tr.dims_of_every_width(dims)
    assert [order.index(j[0]) for j in rest] == sorted(order.index(j[0]) for j in rest)


@pytest.mark.parametrize("device", DEVICES)
def test_every_prepared_call_runs(device):
    """prepare's calls go through the backend's own entry points: each of them runs (on the CPU in the
    interpreter, where prepare itself compiles nothing)."""
    for call in tr.PREPARED_CALLS:
        OP.prepared_call(8, torch.bfloat16, torch.float32, call, torch.device(device))
    with pytest.raises(ValueError, match="not one of the prepared calls"):
        OP.prepared_call(8, torch.bfloat16, torch.float32, "backwards", torch.device(device))
    if OP.interpreted or device == "cpu":
        assert OP.prepare(torch.device(device), [8]) is None


def test_a_prepared_binary_is_a_cache_hit_in_another_process(tmp_path):
    """What prepare compiles in one process is what another process's call at a dim of the same class loads: no
    new entry in Triton's cache after the second process's calls."""
    if OP.unavailable_reason("cuda") or OP.interpreted:
        pytest.skip("needs a GPU and compiled kernels")
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    prepare = ("import torch; from rmsnorm_conformance.backends.triton_rmsnorm import TritonRMSNormOp; "
               "TritonRMSNormOp().prepare(torch.device('cuda'), [96])")
    subprocess.run([sys.executable, "-c", prepare], env=env, check=True, timeout=600)
    built = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert built
    calls = ("import torch; from rmsnorm_conformance.backends.triton_rmsnorm import TritonRMSNormOp; op = "
             "TritonRMSNormOp(); x = torch.randn(5, 72, device='cuda', dtype=torch.bfloat16); "
             "w = torch.randn(72, device='cuda', dtype=torch.bfloat16); op.forward(x, w); op.forward_fp32(x, w); "
             "op.fused_add(x, x.clone(), w); x.requires_grad_(); w.requires_grad_(); "
             "op.forward(x, w).sum().backward(); torch.cuda.synchronize()")
    subprocess.run([sys.executable, "-c", calls], env=env, check=True, timeout=600)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == built
