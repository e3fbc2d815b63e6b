"""Gradients: fp32 autograd through the reference is the golden source; dx must also be batch-invariant (with the
weight trained and frozen) and dw bitwise identical run to run and across intra-op thread counts, at drawn batches
and at the large-batch thresholds. Swept over every declared (x dtype, weight dtype) pair.
"""

from __future__ import annotations

import contextlib

import torch

from ..contract.families import gradients
from ..contract.reference import gradient_terms, reference_fp32
from ..harness import (
    GradientCase,
    assert_bitwise,
    assert_within,
    conformance,
    drawing_device,
    explicit_cases,
    strategies,
    thresholds,
)
from ..harness.running.modes import intra_op_threads, thread_counts

REPEATS = 3  # atomics' arrival order can agree with the first pass by chance


def _cases(subject):
    # A quarter of the forward budget: backward keeps several batch-sized tensors alive.
    return strategies.gradient_cases(dtype=subject.dtype, max_elements=max(1, subject.max_elements // 4),
                                     model_dims=subject.model_dims)


def _no_backward(subject):
    if subject.backend.supports_backward(subject.device, subject.torch_dtype):
        return None
    return f"{subject.backend.name} has no backward (its output does not require grad)"


def _grads(subject, x, w, g, eps, *, frozen_weight=False):
    """dx and dw of ``g`` through the backend; ``frozen_weight``: the weight requires no grad (LoRA fine-tuning),
    so dw is None, and a backward that branches on which inputs need a gradient takes its other path."""
    x = x.detach().requires_grad_(True)
    w = w.detach().requires_grad_(not frozen_weight)
    subject.backward(subject.forward(x, w, eps), g)
    return x.grad, w.grad


def _inputs(subject, case):
    b = case.batch
    x, w = subject.inputs(b)
    where = drawing_device(b.rows * b.dim, subject.device)  # as x: large ones on the GPU itself
    g = subject.to_device(torch.randn(b.rows, b.dim, generator=b.generator(salt=5, device=where), device=where)
                          .to(x.dtype))
    return x, w, g


@conformance((gradients.DX_TOLERANCE.id, gradients.DW_TOLERANCE.id), GradientCase, _cases, skip_reason=_no_backward)
def test_gradient_accuracy(subject, case):
    b = case.batch
    x, w, g = _inputs(subject, case)
    dx, dw = _grads(subject, x, w, g, b.eps)
    x32 = x.detach().float().requires_grad_(True)
    w32 = w.detach().float().requires_grad_(True)
    reference_fp32(x32, w32, b.eps).backward(g.float())
    dx_terms, dw_terms = gradient_terms(x, w, g, b.eps)
    # Each gradient is held to the bound of its own dtype: dw of an fp32 weight is fp32 even when x is bf16.
    assert_within(subject, case, rule=gradients.DX_TOLERANCE.id, actual=dx, reference=x32.grad,
                  bound=subject.profile.gradient_bound(b.dtype), terms=dx_terms,
                  dim=b.dim, what="dx is off fp32 autograd through the reference")
    assert_within(subject, case, rule=gradients.DW_TOLERANCE.id, actual=dw, reference=w32.grad,
                  bound=subject.profile.gradient_bound(b.weight_dtype), terms=dw_terms,
                  dim=b.dim, what=f"dw over {b.rows} rows is off fp32 autograd through the reference")
    dx_frozen, _ = _grads(subject, x, w, g, b.eps, frozen_weight=True)
    assert_within(subject, case, rule=gradients.DX_TOLERANCE.id, actual=dx_frozen, reference=x32.grad,
                  bound=subject.profile.gradient_bound(b.dtype), terms=dx_terms,
                  dim=b.dim, what="dx with the weight frozen (x alone requiring grad, as under LoRA) is off fp32 "
                                  "autograd through the reference")


@conformance(gradients.DX_BATCH_INVARIANCE.id, GradientCase, _cases, skip_reason=_no_backward)
def test_dx_batch_invariance(subject, case):
    check_dx_batch_invariance(subject, case)


@explicit_cases(gradients.DX_BATCH_INVARIANCE.id, GradientCase, thresholds.small_batch_gradient_plan,
                budget_share=2, skip_reason=_no_backward)
def test_dx_batch_invariance_at_thresholds(subject, case, memo):
    """A few rows alone against a batch past 16 rows, at each threshold dim up to 8192."""
    check_dx_batch_invariance(subject, case)


def check_dx_batch_invariance(subject, case, memo=None):
    """dx of a sub-batch alone against the same rows in the whole batch, with the weight trained and with it frozen
    (LoRA): a backward that branches on which inputs need a gradient has a dx-only path of its own."""
    b = case.batch
    x, w, g = _inputs(subject, case)
    n = case.length
    for frozen, how in ((False, ""), (True, " with the weight frozen (LoRA)")):
        dx_full, _ = _grads(subject, x, w, g, b.eps, frozen_weight=frozen)
        dx_part, _ = _grads(subject, x[:n].clone(), w, g[:n].clone(), b.eps, frozen_weight=frozen)
        assert_bitwise(subject, case, actual=dx_part, expected=dx_full[:n], dim=b.dim,
                       what=f"dx of rows [0:{n}] alone differs from the same rows in a batch of {b.rows}{how}")


def _passes(subject):
    """The intra-op thread count of each repeated backward pass: on a CPU the counts of ``thread_counts()`` (a
    backward may split dw's sum over rows by thread), each at least once, else the process's own count."""
    counts = thread_counts() if subject.device.type == "cpu" else ()
    return [counts[i % len(counts)] if counts else None for i in range(max(REPEATS, len(counts)))]


def check_dw_determinism(subject, case, memo=None):
    b = case.batch
    x, w, g = _inputs(subject, case)
    _, dw_first = _grads(subject, x, w, g, b.eps)
    first = torch.get_num_threads()
    for attempt, threads in enumerate(_passes(subject), start=1):
        with intra_op_threads(threads) if threads else contextlib.nullcontext():
            _, dw_again = _grads(subject, x, w, g, b.eps)
        how = f" (with {threads} intra-op threads, the first pass with {first})" if threads else ""
        assert_bitwise(subject, case, actual=dw_again, expected=dw_first, dim=b.dim,
                       what=f"dw over {b.rows} rows changed on backward pass {attempt + 1} of identical passes{how}")


@conformance(gradients.DW_DETERMINISM.id, GradientCase, _cases, skip_reason=_no_backward)
def test_dw_determinism(subject, case):
    check_dw_determinism(subject, case)


# Half the threshold budget: a backward holds several batch-sized tensors.
@explicit_cases(gradients.DW_DETERMINISM.id, GradientCase, thresholds.large_batch_gradient_plan, budget_share=2,
                skip_reason=_no_backward)
def test_dw_determinism_at_thresholds(subject, case, memo):
    """dw at the largest threshold row count in reach at each threshold dim, across thread counts."""
    check_dw_determinism(subject, case)
