"""The inference engines' adapters, without the engines: fake modules put in ``sys.modules`` implement each engine's
entry points with plain torch, as the engine documents them (in-place writes included), and record how they were
called. The adapters must call the right entry point with the right arguments, map the fused add and the Gemma
offset to the right functions, leave the caller's tensors as the protocol says, and, with the package missing,
be skipped with that reason (a run naming only them ends NOT RUN, never PASS)."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from rmsnorm_conformance.backends._engine_support import rows
from rmsnorm_conformance.harness.running.registry import known_backend_names, load_backend

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ["vllm", "vllm_batch_invariant", "flashinfer", "sgl_kernel", "quack", "xformers", "transformer_engine",
           "unsloth", "fla"]
# The modules each adapter checks for; a None entry in sys.modules makes a module unimportable.
PACKAGES = {"vllm": ["vllm"], "vllm_batch_invariant": ["vllm"], "flashinfer": ["flashinfer"],
            "sgl_kernel": ["sgl_kernel"], "quack": ["quack"], "xformers": ["xformers"],
            "transformer_engine": ["transformer_engine", "transformer_engine_torch"], "unsloth": ["unsloth"],
            "fla": ["fla"]}
EPS = 1e-5
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32


def norm(x, weight=None, eps=EPS, offset=0.0, out_dtype=None):
    """The formula every fake computes: fp32 normalized row times the fp32 (offset) weight, rounded once."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * (weight.float() + offset)
    return y.to(out_dtype or x.dtype)


def data(shape=(4, 64), dtype=BF16, w_dtype=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen).to(dtype)
    residual = torch.randn(*shape, generator=gen).to(dtype)
    weight = torch.randn(shape[-1], generator=gen).to(w_dtype or dtype)
    return x, residual, weight


class Calls(list):
    """(function name, positional args, keyword args) of each call a fake received."""

    def names(self):
        return [c[0] for c in self]


def install(monkeypatch, name, **attrs):
    """A fake module ``name`` (its parent packages too, where not faked already) holding ``attrs``."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if not isinstance(sys.modules.get(parent), types.ModuleType) or not getattr(sys.modules[parent], "_fake", 0):
            pkg = types.ModuleType(parent)
            pkg._fake = True
            pkg.__path__ = []
            monkeypatch.setitem(sys.modules, parent, pkg)
    module = types.ModuleType(name)
    module._fake = True
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    if len(parts) > 1:
        monkeypatch.setattr(sys.modules[".".join(parts[:-1])], parts[-1], module, raising=False)
    return module


def in_place_fused_add(calls, fn_name, offset=0.0):
    """An engine's in-place fused add: residual += input (fp32 sum rounded to residual's dtype), then input is
    overwritten with the normalized residual."""
    def fused_add(input, residual, weight, eps=1e-6, *rest, **kw):
        calls.append((fn_name, (input, residual, weight, eps, *rest), kw))
        residual.copy_((input.float() + residual.float()).to(residual.dtype))
        input.copy_(norm(residual, weight, eps, offset))
    return fused_add


def test_engine_adapters_are_registered_by_entry_point():
    for name in ENGINES:
        assert name in known_backend_names()
        assert load_backend(name).name == name


def test_the_device_script_imports_each_engine_it_runs():
    """benchmarks/engines_on_device.sh names an adapter with --backend only after importing the module that
    adapter calls; every engine in its default list needs that module in its map, and the adapter's source names
    the same module."""
    script = (ROOT / "benchmarks" / "engines_on_device.sh").read_text()
    default = re.search(r"^ENGINES=(\S+)$", script, re.M).group(1).split(",")
    modules = dict(re.findall(r'"(\w+)": "([\w.]+)"', script[script.index("modules = {"):]))
    assert {"liger", "fla", "flashinfer", "quack", "xformers"} <= set(default)
    for name in default:
        assert name in known_backend_names() and name in modules, name
        source = sys.modules[type(load_backend(name).impl).__module__].__file__
        assert modules[name] in Path(source).read_text(), (name, modules[name])


# --- vLLM ----------------------------------------------------------------------------------------------------

@pytest.fixture
def fake_vllm(monkeypatch):
    calls = Calls()

    def rms_norm(out, input, weight, epsilon):
        calls.append(("rms_norm", (out, input, weight, epsilon), {}))
        out.copy_(norm(input, weight, epsilon))

    install(monkeypatch, "vllm._custom_ops", rms_norm=rms_norm,
            fused_add_rms_norm=in_place_fused_add(calls, "fused_add_rms_norm"))
    return calls


def test_vllm_writes_into_a_contiguous_out_and_fuses_the_add_in_place(fake_vllm):
    backend = load_backend("vllm")
    assert backend.fused_add_in_place and backend.dtype_pairs == ((F32, F32), (BF16, BF16), (F16, F16))
    assert backend.unavailable_reason("cpu") == "vLLM's kernels run on CUDA GPUs only, not on cpu"
    x, residual, weight = data()
    strided = torch.cat([x, x], dim=1)[:, :64]
    y = backend.forward(strided, weight, EPS)
    name, (out, inp, w, eps), _ = fake_vllm[-1]
    assert name == "rms_norm" and out is y and out.is_contiguous() and inp is strided and w is weight and eps == EPS
    assert torch.equal(y, norm(x, weight))
    assert torch.equal(backend.forward_unweighted(x, EPS), norm(x))
    assert fake_vllm[-1][1][2] is None  # weight=None: vLLM's RMSNorm(has_weight=False)

    before = x.clone(), residual.clone()
    y, residual_out = backend.fused_add(x, residual, weight, EPS)
    name, (inp, res, w, eps), _ = fake_vllm[-1]
    assert name == "fused_add_rms_norm" and inp is y and res is residual_out and w is weight and eps == EPS
    expected_residual = (x.float() + residual.float()).to(BF16)
    assert torch.equal(residual_out, expected_residual) and torch.equal(y, norm(expected_residual, weight))
    assert torch.equal(x, before[0]) and torch.equal(residual, before[1])  # the harness gave the kernel copies


@pytest.mark.parametrize("where", ["vllm.model_executor.determinism.batch_invariant",
                                   "vllm.model_executor.layers.batch_invariant"])
def test_vllm_batch_invariant_calls_the_batch_invariant_entry_point(monkeypatch, fake_vllm, where):
    calls = Calls()

    def batch_invariant(input, weight, eps=1e-6, residual=None):
        calls.append(("batch_invariant", (input, weight, eps), {"residual": residual}))
        if residual is not None:
            sys.modules["vllm._custom_ops"].fused_add_rms_norm(input, residual, weight, eps)
            return input, residual
        return norm(input, weight, eps)

    if where.endswith("determinism.batch_invariant"):
        install(monkeypatch, where, rms_norm_batch_invariant=batch_invariant)
    else:  # older vLLM: the function is rms_norm in model_executor.layers.batch_invariant
        install(monkeypatch, where, rms_norm=batch_invariant)
    backend = load_backend("vllm_batch_invariant")
    x, residual, weight = data()
    assert torch.equal(backend.forward(x, weight, EPS), norm(x, weight))
    assert calls[-1][1] == (x, weight, EPS) and calls[-1][2] == {"residual": None}
    assert torch.equal(backend.forward_unweighted(x, EPS), norm(x)) and calls[-1][1][1] is None
    y, residual_out = backend.fused_add(x, residual, weight, EPS)
    assert calls[-1][2]["residual"] is residual_out and fake_vllm.names()[-1] == "fused_add_rms_norm"
    assert torch.equal(y, norm(residual_out, weight))


# --- FlashInfer and sgl-kernel (the same four entry points) -------------------------------------------------

def norm_entry_points(calls):
    def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
        calls.append(("rmsnorm", (input, weight, eps), {}))
        return norm(input, weight, eps)

    def gemma_rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
        calls.append(("gemma_rmsnorm", (input, weight, eps), {}))
        return norm(input, weight, eps, offset=1.0)

    return {"rmsnorm": rmsnorm, "gemma_rmsnorm": gemma_rmsnorm,
            "fused_add_rmsnorm": in_place_fused_add(calls, "fused_add_rmsnorm"),
            "gemma_fused_add_rmsnorm": in_place_fused_add(calls, "gemma_fused_add_rmsnorm", offset=1.0)}


@pytest.mark.parametrize(("name", "module"), [("flashinfer", "flashinfer.norm"), ("sgl_kernel", "sgl_kernel")])
def test_flashinfer_style_entry_points_map_plain_fused_and_gemma(monkeypatch, name, module):
    calls = Calls()
    install(monkeypatch, module, **norm_entry_points(calls))
    backend = load_backend(name)
    assert backend.fused_add_in_place and backend.offset_dtype == "float32"
    x, residual, weight = data()

    assert torch.equal(backend.forward(x, weight, EPS), norm(x, weight))
    assert calls[-1][0] == "rmsnorm" and calls[-1][1] == (x, weight, EPS)
    assert torch.equal(backend.forward_offset(x, weight, EPS), norm(x, weight, offset=1.0))
    assert calls[-1][0] == "gemma_rmsnorm"

    y, residual_out = backend.fused_add(x, residual, weight, EPS)
    fn, (inp, res, w, eps), _ = calls[-1]
    assert fn == "fused_add_rmsnorm" and inp is y and res is residual_out and w is weight and eps == EPS
    assert torch.equal(y, norm(residual_out, weight))

    x_io, residual_io = x.clone(), residual.clone()
    backend.impl.fused_add_offset(x_io, residual_io, weight, EPS)
    assert calls[-1][0] == "gemma_fused_add_rmsnorm" and calls[-1][1][0] is x_io and calls[-1][1][1] is residual_io
    assert torch.equal(x_io, norm(residual_io, weight, offset=1.0))


def test_flashinfer_takes_3d_as_is_and_other_ranks_as_rows_written_back(monkeypatch):
    calls = Calls()
    install(monkeypatch, "flashinfer.norm", **norm_entry_points(calls))
    backend = load_backend("flashinfer")
    x, residual, weight = data((2, 3, 4, 64))
    y = backend.forward(x[0], weight, EPS)  # [tokens, heads, head_dim]: FlashInfer's per-head kernel
    assert calls[-1][1][0].shape == (3, 4, 64) and y.shape == (3, 4, 64)
    y = backend.forward(x, weight, EPS)
    assert calls[-1][1][0].shape == (24, 64) and y.shape == x.shape and torch.equal(y, norm(x, weight))
    # A fused add on a layout with no 2-D view: the engine gets copies, its writes land in the caller's tensors.
    x_io, residual_io = (t.transpose(0, 1).contiguous().transpose(0, 1) for t in (x, residual))
    assert rows(x_io) is None and torch.equal(x_io, x)
    backend.impl.fused_add(x_io, residual_io, weight, EPS)
    expected = (x.float() + residual.float()).to(BF16)
    assert torch.equal(residual_io, expected) and torch.equal(x_io, norm(expected, weight))


def test_flashinfer_declares_fp32_only_on_its_cute_dsl_path(monkeypatch):
    monkeypatch.setitem(sys.modules, "cutlass", types.ModuleType("cutlass"))
    monkeypatch.delenv("FLASHINFER_USE_CUDA_NORM", raising=False)
    assert (F32, F32) in load_backend("flashinfer").dtype_pairs
    monkeypatch.setenv("FLASHINFER_USE_CUDA_NORM", "1")  # the CUDA JIT kernels: fp16 and bf16 only
    assert load_backend("flashinfer").dtype_pairs == ((BF16, BF16), (F16, F16))
    assert load_backend("sgl_kernel").dtype_pairs == ((BF16, BF16), (F16, F16))


# --- quack -----------------------------------------------------------------------------------------------------

def test_quack_passes_residual_out_dtype_and_offset_by_keyword(monkeypatch):
    calls = Calls()

    def rmsnorm(x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None, eps=1e-6,
                prenorm=False, weight_offset=0.0):
        calls.append(("rmsnorm", (x, weight), {"residual": residual, "out_dtype": out_dtype, "eps": eps,
                                                "residual_dtype": residual_dtype, "prenorm": prenorm,
                                                "weight_offset": weight_offset}))
        if residual is None:
            return norm(x, weight, eps, weight_offset, out_dtype)
        summed = x.float() + residual.float()
        y = norm(summed, weight, eps, weight_offset).to(out_dtype or x.dtype)
        return (y, summed.to(residual_dtype)) if prenorm else y

    install(monkeypatch, "quack", rmsnorm=rmsnorm)
    backend = load_backend("quack")
    assert backend.fused_add_fp32_residual and not backend.fused_add_in_place and backend.has_forward_fp32
    x, residual, weight = data(w_dtype=F32)
    assert torch.equal(backend.forward(x, weight, EPS), norm(x, weight)) and calls[-1][2]["eps"] == EPS
    assert backend.forward_fp32(x, weight, EPS).dtype == F32 and calls[-1][2]["out_dtype"] == F32
    backend.forward_offset(x, weight, EPS)
    assert calls[-1][2]["weight_offset"] == 1.0
    backend.forward_unweighted(x, EPS)
    assert calls[-1][1][1] is None
    residual32 = residual.float()
    y, residual_out = backend.fused_add(x, residual32, weight, EPS)
    kw = calls[-1][2]
    assert kw["residual"] is residual32 and kw["prenorm"] and kw["residual_dtype"] == F32
    assert y.dtype == BF16 and residual_out.dtype == F32


# --- xformers --------------------------------------------------------------------------------------------------

def test_xformers_adds_into_a_copy_of_the_residual(monkeypatch):
    calls = Calls()

    def rms_norm(x, weight, eps=1e-6):
        calls.append(("rms_norm", (x, weight, eps), {}))
        return norm(x, weight, eps)

    def rms_norm_add(x, y, weight, eps=1e-6):
        calls.append(("rms_norm_add", (x, y, weight, eps), {}))
        x.copy_((x.float() + y.float()).to(x.dtype))
        return norm(x, weight, eps)

    install(monkeypatch, "xformers.ops.rmsnorm", rms_norm=rms_norm, rms_norm_add=rms_norm_add)
    backend = load_backend("xformers")
    # Declared without a backward (xformers' kernels have none); this stand-in's torch ops would be probed as one.
    assert not backend.fused_add_in_place and backend.impl.supports_backward is False
    x, residual, weight = data()
    assert torch.equal(backend.forward(x, weight, EPS), norm(x, weight))
    assert torch.equal(backend.forward_unweighted(x, EPS), norm(x)) and calls[-1][1][1] is None
    before = residual.clone()
    y, residual_out = backend.fused_add(x, residual, weight, EPS)
    fn, (first, second, w, eps), _ = calls[-1]
    assert eps == EPS and w is weight
    assert fn == "rms_norm_add" and first is residual_out and first is not residual and second is x
    assert torch.equal(residual, before)
    assert torch.equal(residual_out, (x.float() + before.float()).to(BF16)) and torch.equal(y, norm(residual_out, w))


# --- flash-linear-attention (fla-core) --------------------------------------------------------------------------

def test_fla_passes_no_bias_and_fuses_the_add_out_of_place_with_the_residuals_dtype(monkeypatch):
    calls = Calls()

    def rms_norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False, residual_in_fp32=False):
        """As fla-core 0.6.0 computes it: the fp32 sum is stored in the residual's dtype and normalized as is."""
        calls.append(("rms_norm", (x, weight, bias), {"residual": residual, "eps": eps, "prenorm": prenorm,
                                                       "residual_in_fp32": residual_in_fp32}))
        summed = x.float() if residual is None else x.float() + residual.float()
        y = norm(summed, weight, eps).to(x.dtype)
        residual_out = summed.to(residual.dtype) if residual is not None else x
        return (y, residual_out) if prenorm else y

    install(monkeypatch, "fla.modules.layernorm", rms_norm=rms_norm)
    backend = load_backend("fla")
    assert backend.fused_add_fp32_residual and not backend.fused_add_in_place and not backend.has_forward_fp32
    assert backend.dtype_pairs == ((F32, F32), (BF16, BF16), (F16, F16), (BF16, F32), (F16, F32))
    assert backend.rounding_classes == {"forward": "product_fp32", "forward_unweighted": "product_fp32"}
    assert not backend.offers("forward_offset")
    assert backend.supports_backward("cpu") is True
    x, residual, weight = data(w_dtype=F32)

    assert torch.equal(backend.forward(x, weight, EPS), norm(x, weight))
    assert calls[-1][1] == (x, weight, None) and calls[-1][2]["eps"] == EPS and not calls[-1][2]["prenorm"]
    assert torch.equal(backend.forward_unweighted(x, EPS), norm(x)) and calls[-1][1][1] is None

    before = x.clone(), residual.clone()
    for res in (residual, residual.float()):
        y, residual_out = backend.fused_add(x, res, weight, EPS)
        (inp, w, bias), kw = calls[-1][1], calls[-1][2]
        assert inp is x and w is weight and bias is None and kw["residual"] is res and kw["prenorm"]
        assert kw["eps"] == EPS and not kw["residual_in_fp32"]
        assert y.dtype == BF16 and residual_out.dtype == res.dtype
        assert torch.equal(residual_out, (x.float() + res.float()).to(res.dtype))
    assert torch.equal(x, before[0]) and torch.equal(residual, before[1])


def test_fla_on_the_cpu_says_why_it_cannot_run(monkeypatch):
    install(monkeypatch, "fla.modules.layernorm", rms_norm=lambda *a, **k: None)
    install(monkeypatch, "einops")
    reason = load_backend("fla").unavailable_reason("cpu")
    assert reason and "interpreter" in reason
    monkeypatch.setitem(sys.modules, "einops", None)  # fla imports einops: without it, that is the reason
    assert load_backend("fla").unavailable_reason("cuda") == "einops is not installed (pip install einops)"


# --- Unsloth ----------------------------------------------------------------------------------------------------

def test_unsloth_reads_weight_and_eps_from_a_module_and_maps_gemma(monkeypatch):
    calls = Calls()

    def fast_rms_layernorm(layernorm, X, gemma=False, save_output=False, reuse_grad=False):
        calls.append(("fast_rms_layernorm", (layernorm, X), {"gemma": gemma}))
        return norm(X, layernorm.weight, layernorm.variance_epsilon, 1.0 if gemma else 0.0)

    install(monkeypatch, "unsloth.kernels", fast_rms_layernorm=fast_rms_layernorm)
    install(monkeypatch, "unsloth.kernels.fused_add_rms_layernorm",
            fast_add_rms_layernorm_inference=in_place_fused_add(calls, "fast_add_rms_layernorm_inference"))
    backend = load_backend("unsloth")
    assert backend.fused_add_in_place and backend.offset_dtype == "float32"
    x, residual, weight = data(w_dtype=F32)
    assert torch.equal(backend.forward(x, weight, EPS), norm(x, weight))
    layernorm = calls[-1][1][0]
    assert layernorm.weight is weight and layernorm.variance_epsilon == EPS and calls[-1][2] == {"gemma": False}
    assert torch.equal(backend.forward_offset(x, weight, EPS), norm(x, weight, offset=1.0))
    assert calls[-1][2] == {"gemma": True}
    y, residual_out = backend.fused_add(x, residual, weight, EPS)
    assert calls[-1][0] == "fast_add_rms_layernorm_inference" and calls[-1][1][0] is y
    assert calls[-1][1][1] is residual_out and calls[-1][1][3] == EPS


# --- Transformer Engine -------------------------------------------------------------------------------------------

def test_transformer_engine_runs_its_module_with_the_given_weight_and_gradient(monkeypatch):
    built = []

    class RMSNorm(torch.nn.Module):
        def __init__(self, normalized_shape, eps=1e-5, sequence_parallel=None, params_dtype=None,
                     zero_centered_gamma=False, device="cuda"):
            super().__init__()
            built.append({"dim": normalized_shape, "eps": eps, "params_dtype": params_dtype,
                          "zero_centered_gamma": zero_centered_gamma, "device": device})
            self.eps, self.zero_centered_gamma = eps, zero_centered_gamma
            init = torch.zeros if zero_centered_gamma else torch.ones
            self.weight = torch.nn.Parameter(init(normalized_shape, dtype=params_dtype, device=device))

        def forward(self, inp):
            return norm(inp, self.weight, self.eps, 1.0 if self.zero_centered_gamma else 0.0)

    install(monkeypatch, "transformer_engine.pytorch", RMSNorm=RMSNorm)
    install(monkeypatch, "transformer_engine_torch")
    backend = load_backend("transformer_engine")
    x, _, weight = data(dtype=F32)
    weight.requires_grad_(True)
    y = backend.forward(x, weight, EPS)
    assert torch.equal(y, norm(x, weight))
    y.sum().backward()
    assert weight.grad is not None  # the gradient reaches the weight passed in, not the module's parameter
    backend.forward(x, weight, EPS)
    assert len(built) == 1 and built[0] == {"dim": 64, "eps": EPS, "params_dtype": F32, "zero_centered_gamma": False,
                                            "device": x.device}
    assert torch.equal(backend.forward_offset(x, weight, EPS), norm(x, weight, offset=1.0))
    assert built[-1]["zero_centered_gamma"] is True


# --- a missing package is a skip with its reason, and a run of only such backends is NOT RUN ----------------------

@pytest.mark.parametrize("name", ENGINES)
def test_a_missing_package_is_the_reason_on_every_device(monkeypatch, name):
    for module in PACKAGES[name]:
        monkeypatch.setitem(sys.modules, module, None)
    backend = load_backend(name)
    for device in ("cpu", "cuda"):
        reason = backend.unavailable_reason(device)
        assert reason and "not installed" in reason, reason


def test_without_cuda_the_reason_says_so(monkeypatch):
    install(monkeypatch, "quack")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert load_backend("quack").unavailable_reason("cuda") == "no CUDA device is available on this machine"


def test_a_run_naming_only_missing_engines_is_not_run(pytester, monkeypatch):
    missing = [name for name in ENGINES if "not installed" in (load_backend(name).unavailable_reason("cpu") or "")]
    if not missing:
        pytest.skip("every engine package is installed here")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess(
        "--pyargs", "rmsnorm_conformance.suites", f"--backend={','.join(missing)}", "--device=cpu",
        "--rule=axis_b.output", "--dtype=bfloat16", "--report=r.json", "-p", "no:cacheprovider")
    assert result.ret == 5  # nothing ran at all
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["verdict"] == "NOT RUN" and sorted(report["named_but_not_run"]) == sorted(missing)
    skips = [o["reason"] for o in report["outcomes"].values() if o["outcome"] == "skipped"]
    for name in missing:  # each skip says which package is missing
        pip_name = load_backend(name).unavailable_reason("cpu").split(" is not installed")[0]
        assert any(reason.startswith(f"{pip_name} is not installed") for reason in skips), (name, skips)


# --- fp8 output: RMSNorm fused with fp8 quantization -------------------------------------------------------

FP8 = torch.float8_e4m3fn


def quantized(x, weight, eps, scale):
    """What every fake fp8 kernel computes: the fake's fp32 normalized row divided by the scale, saturated, cast."""
    return (norm(x, weight, eps, out_dtype=F32) / scale.float()).clamp(-448, 448).to(FP8)


def per_token(x, weight, eps):
    """A fake dynamic per-token quantization of rows x: (q, scales of shape [tokens, 1])."""
    y = norm(x, weight, eps, out_dtype=F32).reshape(-1, x.shape[-1])
    scales = (y.abs().amax(dim=-1, keepdim=True) / 448).clamp_min(1 / (448 * 512))
    return (y / scales).clamp(-448, 448).to(FP8).view(x.shape), scales


def test_vllm_fp8_entry_points_call_its_quant_ops(monkeypatch, fake_vllm):
    from rmsnorm_conformance.backends import vllm as adapter

    def static(out, input, weight, scale, epsilon):
        fake_vllm.append(("rms_norm_static_fp8_quant", (out, input, weight, scale, epsilon), {}))
        out.copy_(quantized(input, weight, epsilon, scale))

    def fused_static(out, input, residual, weight, scale, epsilon):
        fake_vllm.append(("fused_add_rms_norm_static_fp8_quant", (out, input, residual, weight, scale, epsilon), {}))
        residual.copy_((input.float() + residual.float()).to(residual.dtype))
        out.copy_(quantized(residual, weight, epsilon, scale))

    def dynamic(input, weight, epsilon, quant_dtype, scale_ub=None, residual=None):
        fake_vllm.append(("rms_norm_dynamic_per_token_quant", (input, weight, epsilon, quant_dtype),
                          {"residual": residual}))
        if residual is not None:
            residual.copy_((input.float() + residual.float()).to(residual.dtype))
        return per_token(input if residual is None else residual, weight, epsilon)

    monkeypatch.setattr(sys.modules["vllm._custom_ops"], "rms_norm_dynamic_per_token_quant", dynamic, raising=False)
    backend = load_backend("vllm")
    # Into the namespace the adapter's methods read: the module the package attribute names and the one the loaded
    # class was defined in can be two (an in-process pytester run earlier in the same worker drops the modules it
    # imported from sys.modules, not the package's attribute); under pytest-xdist this test once called vLLM's real
    # op that way.
    namespace = type(backend.impl).forward_fp8_static.__globals__
    assert namespace["__name__"] == adapter.__name__
    monkeypatch.setitem(namespace, "_c_ops", lambda: types.SimpleNamespace(
        rms_norm_static_fp8_quant=static, fused_add_rms_norm_static_fp8_quant=fused_static))
    assert all(backend.offers(m) for m in ("forward_fp8_static", "forward_fp8_dynamic", "fused_add_fp8_static",
                                           "fused_add_fp8_dynamic"))
    assert backend.fp8_rounding_classes == {"forward_fp8_static": "through_x_dtype",
                                            "forward_fp8_dynamic": "through_x_dtype",
                                            "fused_add_fp8_static": "through_x_dtype"}
    x, residual, weight = data((2, 3, 64))
    scale = torch.tensor([0.01])
    before = x.clone(), residual.clone()

    q = backend.forward_fp8_static(x, weight, EPS, scale)
    name, (out, inp, w, s, eps), _ = fake_vllm[-1]
    assert name == "rms_norm_static_fp8_quant" and out is q and q.dtype == FP8 and inp is x and s is scale
    assert w is weight and eps == EPS
    assert torch.equal(q.view(torch.uint8), quantized(x, weight, EPS, scale).view(torch.uint8))

    q, scales = backend.forward_fp8_dynamic(x, weight, EPS)
    assert fake_vllm[-1][1][3] == FP8 and fake_vllm[-1][2] == {"residual": None}
    assert scales.shape == (2, 3, 1) and q.shape == x.shape  # vLLM's [tokens, 1] in the protocol's shape

    q, residual_out = backend.fused_add_fp8_static(x, residual, weight, EPS, scale)
    name, (out, inp, res, *_), _ = fake_vllm[-1]
    assert name == "fused_add_rms_norm_static_fp8_quant" and out is q and inp is x and res is residual_out
    assert torch.equal(residual_out, (x.float() + residual.float()).to(BF16))

    q, scales, residual_out = backend.fused_add_fp8_dynamic(x, residual, weight, EPS)
    assert fake_vllm[-1][2]["residual"] is residual_out and scales.shape == (2, 3, 1)
    assert torch.equal(x, before[0]) and torch.equal(residual, before[1])  # the ops were given copies


def test_flashinfer_fp8_entry_points_quantize_rows_with_a_static_scale(monkeypatch):
    calls = Calls()

    def rmsnorm_quant(out, input, weight, scale, eps=1e-6, enable_pdl=None):
        calls.append(("rmsnorm_quant", (out, input, weight, scale, eps), {}))
        out.copy_(quantized(input, weight, eps, scale))

    def fused_add_rmsnorm_quant(out, input, residual, weight, scale, eps=1e-6, enable_pdl=None):
        calls.append(("fused_add_rmsnorm_quant", (out, input, residual, weight, scale, eps), {}))
        residual.copy_((input.float() + residual.float()).to(residual.dtype))
        out.copy_(quantized(residual, weight, eps, scale))

    install(monkeypatch, "flashinfer.norm", **norm_entry_points(calls), rmsnorm_quant=rmsnorm_quant,
            fused_add_rmsnorm_quant=fused_add_rmsnorm_quant)
    backend = load_backend("flashinfer")
    assert backend.offers("forward_fp8_static") and backend.offers("fused_add_fp8_static")
    assert not backend.offers("forward_fp8_dynamic")  # FlashInfer ships no dynamic per-token form
    assert backend.fp8_rounding_classes == {"forward_fp8_static": "fp32_once"}
    x, residual, weight = data((2, 3, 64))
    scale = torch.tensor(0.02)
    q = backend.forward_fp8_static(x, weight, EPS, scale)
    name, (out, inp, w, s, eps), _ = calls[-1]
    assert name == "rmsnorm_quant" and inp.shape == (6, 64) and s.shape == (1,) and q.shape == x.shape
    assert out.shape == (6, 64) and w is weight and eps == EPS
    assert torch.equal(q.view(torch.uint8), quantized(x, weight, EPS, scale).view(torch.uint8))
    before = residual.clone()
    q, residual_out = backend.fused_add_fp8_static(x, residual, weight, EPS, scale)
    assert calls[-1][0] == "fused_add_rmsnorm_quant" and q.shape == x.shape and q.dtype == FP8
    assert torch.equal(residual_out, (x.float() + residual.float()).to(BF16)) and torch.equal(residual, before)


def test_sgl_kernel_offers_no_fp8_output(monkeypatch):
    install(monkeypatch, "sgl_kernel", **norm_entry_points(Calls()))
    backend = load_backend("sgl_kernel")
    assert not any(backend.offers(m) for m in ("forward_fp8_static", "forward_fp8_dynamic", "fused_add_fp8_static",
                                               "fused_add_fp8_dynamic"))
