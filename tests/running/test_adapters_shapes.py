"""Kernels in the shapes their authors ship them (harness/running/adapters.py): functions with and without eps,
nn.Module classes built per hidden size, torch.library ops, partials; their declarations; the error for an
object of no accepted shape; and, end to end, a correct one of each passing and a planted bug failing with its
rule and a replay that reproduces it."""

from __future__ import annotations

import functools
import json
import shlex
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from torch import nn

from rmsnorm_conformance.contract.reference import reference_fp32
from rmsnorm_conformance.harness.running.adapters import (
    ACCEPTED_SHAPES,
    FunctionBackend,
    ModuleBackend,
    OpBackend,
    ShapeError,
    adapt,
    rmsnorm_backend,
    table_declarations,
)
from rmsnorm_conformance.harness.running.backend import Backend, DeclarationError
from tests.helpers.shipped_kernels import BAD, GOOD, KERNELS, QUICK

ROOT = Path(__file__).resolve().parents[2]


def ref(x, weight, eps=1e-6):
    return reference_fp32(x, weight, eps).to(x.dtype)


def rms_norm(x, weight, eps=1e-6):
    return ref(x, weight, eps)


def rms_norm_no_eps(x, weight):
    return ref(x, weight, 1e-5)


def rms_norm_eps_keyword(x, weight, *, eps):
    return ref(x, weight, eps)


class HFStyleRMSNorm(nn.Module):
    """Hugging Face's shape: built with the hidden size, the weight a parameter, forward(x) alone."""

    built: ClassVar[list[int]] = []

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size))  # random: the adapter must not move the RNG
        self.variance_epsilon = eps
        HFStyleRMSNorm.built.append(hidden_size)

    def forward(self, x):
        self.seen = self.weight
        return ref(x, self.weight, self.variance_epsilon)


class NoEpsModule(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return ref(x, self.scale, 1e-6)


_LIB = torch.library.Library("adapters_shapes_test", "DEF")
_LIB.define("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor")
_LIB.define("rms_norm2(Tensor x, Tensor weight) -> Tensor")
_LIB.impl("rms_norm", lambda x, w, eps: ref(x, w, eps), "CompositeImplicitAutograd")
_LIB.impl("rms_norm2", lambda x, w: ref(x, w, 1e-6), "CompositeImplicitAutograd")


def _inputs(rows=3, dim=8):
    g = torch.Generator().manual_seed(0)
    return torch.randn(rows, dim, generator=g), torch.randn(dim, generator=g)


@pytest.mark.parametrize(("obj", "kind", "eps"), [
    (rms_norm, FunctionBackend, 1e-6),
    (rms_norm_eps_keyword, FunctionBackend, 1e-3),
    (rms_norm_no_eps, FunctionBackend, 1e-5),  # declared below via the decorator's eps
    (HFStyleRMSNorm, ModuleBackend, 1e-4),
    (torch.ops.adapters_shapes_test.rms_norm, OpBackend, 1e-6),
    ("adapters_shapes_test::rms_norm", OpBackend, 1e-6),
    (functools.partial(rms_norm, eps=1e-5), FunctionBackend, 1e-5),
    (functools.partial(HFStyleRMSNorm), ModuleBackend, 1e-2),
])
def test_every_shape_becomes_a_backend_that_computes_what_the_kernel_does(obj, kind, eps):
    if obj is rms_norm_no_eps:
        obj = rmsnorm_backend(lambda x, weight: rms_norm_no_eps(x, weight), eps=1e-5)  # a copy to decorate
    impl = adapt(obj)
    assert isinstance(impl, kind), impl
    assert impl.name in ("rms_norm", "rms_norm_eps_keyword", "<lambda>", "HFStyleRMSNorm",
                         "adapters_shapes_test.rms_norm"), impl.name
    backend = Backend(impl)
    x, w = _inputs()
    assert torch.equal(backend.forward(x, w, eps), ref(x, w, eps))
    assert backend.supports_backward("cpu")


def test_a_kernel_without_eps_is_held_at_the_eps_it_uses_and_refuses_another():
    impl = adapt(rms_norm_no_eps)
    assert impl.fixed_eps == 1e-6  # the contract's default, unless declared
    assert adapt(functools.partial(rms_norm, eps=1e-5)).fixed_eps == 1e-5
    x, w = _inputs()
    with pytest.raises(ValueError, match="takes no eps argument"):
        impl.forward(x, w, 1e-3)
    assert adapt(torch.ops.adapters_shapes_test.rms_norm2).fixed_eps == 1e-6
    assert adapt(NoEpsModule, spec="").fixed_eps == 1e-6


def test_a_module_is_built_per_hidden_size_once_and_gets_the_weight_as_given():
    HFStyleRMSNorm.built.clear()
    impl = adapt(HFStyleRMSNorm)
    before = torch.random.get_rng_state()
    for dim in (8, 8, 16):
        x, _ = _inputs(dim=dim)
        storage = torch.randn(2 * dim, generator=torch.Generator().manual_seed(dim))
        w = storage[::2]  # a strided view: the module must see it as it is, not a contiguous copy
        out = impl.forward(x, w, 1e-6)
        seen = impl.module(dim, 1e-6, w.dtype, x.device).seen
        assert seen.data_ptr() == w.data_ptr() and seen.stride() == (2,)
        assert torch.equal(out, ref(x, w, 1e-6))
    assert HFStyleRMSNorm.built == [8, 16]
    assert torch.equal(before, torch.random.get_rng_state()), "building a module moved the caller's RNG"
    # dw reaches the weight the harness passed
    x, w = _inputs()
    w.requires_grad_()
    impl.forward(x, w, 1e-6).sum().backward()
    assert w.grad is not None
    # A weight of another size never reaches a module built for its hidden size: the adapter's shape guard.
    with pytest.raises(ValueError, match=r"weight of shape \(4,\) does not fit x of shape \(3, 8\)"):
        impl.forward(x, torch.ones(4), 1e-6)


def test_a_module_without_the_named_weight_parameter_is_told_how_to_name_it():
    x, w = _inputs()
    with pytest.raises(TypeError, match=r"no parameter 'weight'.*weight_param"):
        adapt(NoEpsModule).forward(x, w, 1e-6)
    named = adapt(rmsnorm_backend(functools.partial(NoEpsModule), weight_param="scale"))
    assert torch.equal(named.forward(x, w, 1e-6), ref(x, w, 1e-6))


@pytest.mark.parametrize(("obj", "words"), [
    (HFStyleRMSNorm(8), "nn.Module instance built for one hidden size"),
    (type("NeedsArgs", (), {"__init__": lambda self, size: None, "forward": lambda self, x, w, eps: x}),
     "its constructor needs size"),
    (type("NoForward", (), {}), "a class without a forward method"),
    (42, "not callable"),
    (lambda x: x, "takes neither"),
])
def test_an_object_of_no_accepted_shape_is_refused_with_every_shape_and_an_example(obj, words):
    with pytest.raises(ShapeError) as info:
        adapt(obj)
    message = str(info.value)
    assert words in message
    for what, example in ACCEPTED_SHAPES:
        assert what in message and example.splitlines()[0] in message


def test_declarations_come_from_the_decorator_or_the_pyproject_table(tmp_path):
    declared = rmsnorm_backend(dtypes=("bfloat16",), devices=("cpu",), name="mine")(
        lambda x, weight, eps: ref(x, weight, eps))
    backend = Backend(adapt(declared))
    assert backend.name == "mine" and backend.dtypes == (torch.bfloat16,) and backend.device_types == ("cpu",)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.rmsnorm_conformance.backends."kern:op"]\n'
        'dtypes = ["float32", "bfloat16"]\nrounding_class = "product_fp32"\nname = "from_toml"\n')
    table = table_declarations("kern:op", tmp_path)
    assert table["dtypes"] == (torch.float32, torch.bfloat16)
    backend = Backend(adapt(torch.ops.adapters_shapes_test.rms_norm, spec="kern:op", start=tmp_path))
    assert backend.name == "from_toml" and backend.dtypes == (torch.float32, torch.bfloat16)
    assert backend.rounding_classes["forward"] == "product_fp32"
    # A variant comes as a function of its own, declared beside the kernel.
    with_variant = Backend(adapt(rmsnorm_backend(rms_norm, forward_unweighted=lambda x, eps: ref(x, torch.ones(
        x.shape[-1]), eps))))
    assert with_variant.offers("forward_unweighted") and not with_variant.offers("fused_add")
    x, _ = _inputs()
    assert torch.equal(with_variant.forward_unweighted(x, 1e-6), ref(x, torch.ones(8), 1e-6))
    with pytest.raises(TypeError, match="unknown declaration"):
        rmsnorm_backend(dtype=("float32",))
    with pytest.raises(DeclarationError, match="rounding_class"):
        Backend(adapt(rmsnorm_backend(rms_norm, rounding_class="nonsense")))




@pytest.fixture
def user(pytester, monkeypatch):
    """An empty directory with the user's kernels module; pytest runs from there as the user would."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    (pytester.path / "kern.py").write_text(KERNELS)
    return pytester


def test_a_correct_kernel_of_each_shape_passes(user):
    result = user.runpytest_subprocess("--pyargs", "rmsnorm_conformance.suites", f"--backend={GOOD}", *QUICK,
                                       "--report=good.json")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    data = json.loads((user.path / "good.json").read_text())
    assert data["verdict"] == "PASS"
    notes = data["environment"]["adapted kernels"]  # the report says what each adapter did
    assert "RMSNorm: nn.Module class built per hidden size; the case's weight replaces its 'weight'" in notes
    assert "userlib.rms_norm: torch.library op userlib::rms_norm" in notes
    assert {s["backend"] for s in data["summaries"]} == {"rms_norm", "RMSNorm", "userlib.rms_norm", "partial_norm"}


# The case on which contract 2.4.0's fp32 gradient bound failed the correct function kernel (its x / rms * w is
# another order than the reference's): a row of small scale whose dx terms, near 400, cancel to 0.077
# (benchmarks/gradient_bound_fp32_dx.py).
CANCELLING_TERMS = ("GradientCase(batch=Batch(dim=3, rows=174763, dtype='float32', values='mixed_rows', "
                    "weight='normal', eps=1e-06, seed=0), length=1)")


def test_a_correct_fp32_backward_in_another_order_passes_where_the_terms_of_dx_cancel(user):
    result = user.runpytest_subprocess("--pyargs", "rmsnorm_conformance.suites", "--backend=kern:rms_norm",
                                       "--device=cpu", "--dtype=float32", "--rule=gradients.dx_tolerance",
                                       f"--replay={CANCELLING_TERMS}", "-p", "no:cacheprovider", "--report=r.json")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    summaries = [s for s in json.loads((user.path / "r.json").read_text())["summaries"]
                 if s["rule"] == "gradients.dx_tolerance"]
    # Two checks of the one case: dx with the weight trained, and with it frozen (contract 2.9.0).
    assert [(s["checks"], s["failures"], s["dims"]) for s in summaries] == [(2, 0, [3])], summaries


def test_a_planted_bug_in_each_shape_fails_with_its_rule_and_a_replay_that_reproduces(user):
    result = user.runpytest_subprocess("--pyargs", "rmsnorm_conformance.suites", f"--backend={BAD}", *QUICK,
                                       "--report=bad.json")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    data = json.loads((user.path / "bad.json").read_text())
    failed = {(o["backend"], o["rule"]) for o in data["outcomes"].values() if o["outcome"] == "failed"}
    assert failed == {(name, "axis_a.batch_size") for name in ("rms_norm_bad", "RMSNormBad",
                                                               "userlib.rms_norm_bad", "partial_bad")}
    replays = {line.split("replay: ", 1)[1] for line in out.splitlines() if line.startswith("  replay: pytest")}
    assert len(replays) == 4, replays
    for replay in (r for r in replays if "RMSNormBad" in r or "userlib" in r):
        command = shlex.split(replay)
        assert command[0] == "pytest", replay
        again = user.runpytest_subprocess(*command[1:], "-p", "no:cacheprovider")
        assert again.ret == 1, again.stdout.str()[-3000:]
        assert "contract rule axis_a.batch_size (batch size) broken" in again.stdout.str()


def test_an_op_is_held_to_opcheck_as_an_interface_rule(user):
    user.path.joinpath("ops.py").write_text(
        "import torch\nfrom kern import rms_norm\n"
        "lib = torch.library.Library('opchecklib', 'DEF')\n"
        "lib.define('good(Tensor x, Tensor weight, float eps) -> Tensor')\n"
        "lib.impl('good', rms_norm, 'CompositeImplicitAutograd')\n"
        "lib.define('no_autograd(Tensor x, Tensor weight, float eps) -> Tensor')\n"
        "lib.impl('no_autograd', rms_norm, 'CompositeExplicitAutograd')\n"
        "torch.library.register_fake('opchecklib::no_autograd')(lambda x, w, eps: torch.empty_like(x))\n")
    result = user.runpytest_subprocess("--pyargs", "rmsnorm_conformance.suites",
                                       "--backend=ops:opchecklib::good,ops:opchecklib::no_autograd",
                                       "--device=cpu", "--sweep=ci", "--dtype=float32", "--rule=interface.opcheck",
                                       "--max-examples=2", "-p", "no:cacheprovider", "--report=op.json")
    data = json.loads((user.path / "op.json").read_text())
    warned = {s["backend"] for s in data["summaries"] if s["warnings"]}
    assert warned == {"opchecklib.no_autograd"}, result.stdout.str()[-3000:]
    assert any("test_autograd_registration" in s["failing_detail"] for s in data["summaries"] if s["warnings"])
    assert result.ret == 0  # an interface rule warns unless --strict-interface
