"""The harness's own tests: `pytester` drives the plugin end to end in subprocesses."""

import os

import torch

pytest_plugins = ("pytester",)

# The harness's own tests import the Triton backend directly; on a machine with no GPU its kernels must be
# defined under the interpreter. (The plugin sets this only when a run selects the Triton backend.)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
