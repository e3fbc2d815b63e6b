"""The element budget: how large a batch (rows x dim) a case may be on a device, for the random sweep and for
the explicit threshold checks.

On a GPU both follow the memory free on it, so that prefill-size batches (16384 rows of 4096, 524288 of 128)
are in reach; on a CPU they are fixed, small enough to keep CI fast. ``--max-elements`` overrides both.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a device is asked about: the plugin's option help reads this module
    import torch

# --- the random sweep ------------------------------------------------------------------------------------
# 4M elements keep a CPU example near 0.1 s and still reach 32768 rows at dim 128.
CPU_SWEEP_ELEMENTS = 1 << 22
# Interpreted kernels (Triton on the CPU) run per program in Python: a sixteenth of that.
INTERPRETED_SWEEP_ELEMENTS = 1 << 18
# On a GPU the sweep's largest batch: 16384 rows of 4096 and 524288 of 128, the prefill sizes engines run.
GPU_SWEEP_ELEMENTS = 1 << 26

# --- the threshold checks -------------------------------------------------------------------------------
# A few large batches per dim and dtype, not hundreds of drawn ones, so the CPU budget is larger than the
# sweep's: 2048 rows of 4096 (a batch of 2047 against one of 2048: the prefill switch) and 65536 of 128
# (Liger's switch at 32768). CI's wall time bounds it (README, "Measured").
CPU_THRESHOLD_ELEMENTS = 1 << 23
# The Triton interpreter runs about 10 M elements a second: 64 rows of 4096, 2048 of 128 (the 1023/1024/1025
# boundary in reach). It checks the kernels' logic, whose launch under the interpreter depends on no row count;
# their thresholds are checked where they compile, on a GPU.
INTERPRETED_THRESHOLD_ELEMENTS = 1 << 18

# Rows wider than this are "wide" (Llama-3.1-405B's 16384, Falcon-180B's 14848: contract WIDE_DIMS).
WIDE_DIM_FROM = 8192
# On a CPU an explicit case at a wide dim keeps to this many elements (32 rows of 16384): a wide row's own paths switch
# at short batches (a row split over more lanes where rows are few), and the CPU budget's 511 rows of 16385 in every
# dtype and entry point would cost the CPU gate more than all its other thresholds. A GPU's budget is not capped.
CPU_WIDE_ELEMENTS = 1 << 19

# Peak bytes a check holds per element of its largest batch: x, its pad or view copy, two outputs, the
# reference's fp32 temporaries (upcast, squares, the padded tree) and the backend's own. Generous on purpose:
# running out of memory loses the whole run, a smaller batch only one threshold.
BYTES_PER_ELEMENT = 64


def _power_of_two_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def workers_per_gpu() -> int:
    """How many pytest-xdist workers share one GPU (``pytest -n N`` spreads workers over the GPUs)."""
    import torch

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 1
    return max(1, -(-workers // max(gpus, 1)))


def fair_share(device: torch.device) -> int:
    """The bytes of ``device`` one process may keep reserved between cases (``device_faults.give_back_surplus``):
    its memory over the processes that share it. The budgets above bound a case's peak; this, what stays after."""
    import torch

    return torch.cuda.get_device_properties(device).total_memory // workers_per_gpu()


def memory_elements(free_bytes: int, *, sharing: int = 1) -> int:
    """The largest power-of-two batch whose checks fit in ``free_bytes`` shared by ``sharing`` processes."""
    if free_bytes < 0 or sharing < 1:
        raise ValueError(f"free_bytes={free_bytes} must be >= 0 and sharing={sharing} >= 1")
    return _power_of_two_floor(free_bytes // (BYTES_PER_ELEMENT * sharing))


@functools.cache
def free_bytes(device: torch.device) -> int:
    """Memory free on ``device`` (CUDA and ROCm devices) when this process first asks: read once, so that a
    run's budget, and with it the cases it checks, does not drift with what other workers hold at the time."""
    import torch

    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def sweep_elements(device: torch.device, *, interpreted: bool, option: int | None = None) -> int:
    """The largest batch a drawn case may have: ``--max-elements`` if given, else the device's default."""
    if option:
        return option
    if device.type == "cuda":
        return min(GPU_SWEEP_ELEMENTS, memory_elements(free_bytes(device), sharing=workers_per_gpu()))
    return INTERPRETED_SWEEP_ELEMENTS if interpreted else CPU_SWEEP_ELEMENTS


def threshold_elements(device: torch.device, *, interpreted: bool, option: int | None = None) -> int:
    """The largest batch the threshold checks may build: ``--max-elements`` if given; on a GPU all its free
    memory allows (its share of it, under pytest-xdist); on a CPU the fixed budget above."""
    if option:
        return option
    if device.type == "cuda":
        return memory_elements(free_bytes(device), sharing=workers_per_gpu())
    return INTERPRETED_THRESHOLD_ELEMENTS if interpreted else CPU_THRESHOLD_ELEMENTS


def at_dim(dim: int, budget: int, device: torch.device) -> int:
    """The budget of an explicit case at ``dim``: ``budget``, capped at CPU_WIDE_ELEMENTS for a wide dim on a CPU."""
    if dim > WIDE_DIM_FROM and device.type == "cpu":
        return min(budget, CPU_WIDE_ELEMENTS)
    return budget


def describe(device: torch.device, *, interpreted: bool, option: int | None) -> str:
    """Where a threshold budget came from, for the report's "Did not run"."""
    if option:
        return "--max-elements"
    if device.type == "cuda":
        return f"{BYTES_PER_ELEMENT} bytes an element of the memory free on {device}"
    # "interpreted": a backend run by an interpreter on the CPU (Triton's), about 30 ms a call; every other backend
    # (native PyTorch included) takes the larger budget.
    return "the CPU's fixed budget" + (" for backends run by an interpreter (Triton's)" if interpreted else "")


# --- the 32-bit offset cases ------------------------------------------------------------------------------
# Bytes per element of the batch past 2^31 elements: x, its guarded copy and the output in x's dtype (up to fp32),
# and a reference backend's fp32 temporaries over the whole batch (upcast, squares, the tree, the product). At
# 2^31 elements that is 64 GiB: one or two processes per H200, not four.
OFFSET_BYTES_PER_ELEMENT = 32


def offset_room(device: torch.device, *, interpreted: bool, option: int | None = None) -> tuple[int, str]:
    """The largest batch the 32-bit offset cases may build, and where that figure comes from: ``--max-elements``
    if given; on a GPU its share of the free memory at ``OFFSET_BYTES_PER_ELEMENT``; on a CPU the thresholds'."""
    if option:
        return option, "--max-elements"
    if device.type == "cuda":
        share = free_bytes(device) // workers_per_gpu()
        return (share // OFFSET_BYTES_PER_ELEMENT,
                f"{OFFSET_BYTES_PER_ELEMENT} bytes an element of {share / 2**30:.1f} GiB, this process's share of "
                f"the memory free on {device}")
    return threshold_elements(device, interpreted=interpreted), describe(device, interpreted=interpreted, option=None)
