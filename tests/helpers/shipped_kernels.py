"""A user's kernels in the shapes kernels ship in, as source for a user's directory: shared by the adapter
tests and the wheel-install test (importing this module defines nothing in torch)."""

KERNELS = '''\
"""A user's kernels in four shapes, each correct, and the same four with a planted batch-size bug."""
import functools

import torch
from torch import nn


def _tree(t):
    width = 1 << max(t.shape[-1] - 1, 0).bit_length()
    t = torch.nn.functional.pad(t, (0, width - t.shape[-1]))
    while t.shape[-1] > 1:
        half = t.shape[-1] // 2
        t = t[..., :half] + t[..., half:]
    return t


def _norm(x, weight, eps, split=False):
    x32 = x.float()
    rows = x32.numel() // max(x.shape[-1], 1)
    if split and rows < 16:  # the bug: few rows are summed in another order (split-K for small batches)
        total = x32.pow(2).flip(-1).cumsum(-1)[..., -1:]
    else:
        total = _tree(x32 * x32)
    return ((x32 / torch.sqrt(total / x.shape[-1] + eps)) * weight.float()).to(x.dtype)


def rms_norm(x, weight, eps=1e-6):
    return _norm(x, weight, eps)


def rms_norm_bad(x, weight, eps=1e-6):
    return _norm(x, weight, eps, split=True)


class RMSNorm(nn.Module):
    split = False

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x):
        return _norm(x, self.weight, self.eps, split=self.split)


class RMSNormBad(RMSNorm):
    split = True


lib = torch.library.Library("userlib", "DEF")
lib.define("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor")
lib.define("rms_norm_bad(Tensor x, Tensor weight, float eps) -> Tensor")
lib.impl("rms_norm", rms_norm, "CompositeImplicitAutograd")
lib.impl("rms_norm_bad", rms_norm_bad, "CompositeImplicitAutograd")
op = torch.ops.userlib.rms_norm

partial_norm = functools.partial(_norm, split=False)
partial_bad = functools.partial(_norm, split=True)
'''
_GATE = ["--device=cpu", "--sweep=ci", "--dtype=float32", "--rule=axis_a.batch_size,axis_b.output"]
QUICK = [*_GATE, "-k", "not thresholds", "-p", "no:cacheprovider"]
# QUICK with the batch-size thresholds as explicit cases, in a small budget: the bug at 16 rows is then caught by
# the 15/16-row plan at any seed, not only where Hypothesis's draws straddle it (they did not, in one install).
QUICK_WITH_THRESHOLDS = [*_GATE, "-k", "not thresholds and not threshold_dims or test_batch_size_at_thresholds",
                         "--max-elements=131072", "-p", "no:cacheprovider"]
GOOD = "kern:rms_norm,kern:RMSNorm,kern:userlib::rms_norm,kern:partial_norm"
BAD = "kern:rms_norm_bad,kern:RMSNormBad,kern:userlib::rms_norm_bad,kern:partial_bad"
