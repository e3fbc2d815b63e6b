"""Refused inputs: what a backend may declare it does not take, and what a clear exception on an input it did not
declare means for the verdict. A kernel that refuses loudly is safe to deploy with a guard in front of it; one
that returns wrong bits silently is not, so the two are told apart and gate differently.
"""

from __future__ import annotations

# How a tensor argument (x, a residual, the weight) sits in memory, as a backend's ``layouts`` names them.
LAYOUTS: dict[str, str] = {
    "contiguous": "dense row-major, starting at a 16-byte aligned address",
    "offset": "dense row-major, starting at an address that is not 16-byte aligned (a slice one element into a "
              "larger buffer, rows [a:b] of an odd dim)",
    "strided": "not dense row-major: a stride-2 weight, rows inside a wider buffer, column-major rows, query heads "
               "of a fused projection, a 3-D view whose last dim is strided",
}
# Address alignment below which a dense tensor reads as "offset": the 16-byte vector loads kernels issue.
ALIGNMENT_BYTES = 16

# What a backend may declare about the inputs it takes; every limit applies to every entry point.
INPUT_LIMITS: dict[str, str] = {
    "layouts": "the layouts (" + ", ".join(LAYOUTS) + ") every tensor argument may have; default: all",
    "min_dim": "the smallest last dim taken; default: 1",
    "max_dim": "the largest last dim taken; default: none",
    "dim_multiple_of": "last dims must be a multiple of this (e.g. 8 for 16-byte vectors of bf16); default: 1",
}

REFUSED = (
    "A case outside a backend's declared limits is not run: the report lists it under \"Did not run\" with the "
    "limit, and it counts as neither passed nor failed. A backend that raises an ordinary Python exception "
    "(ValueError, TypeError, NotImplementedError, RuntimeError, ...) on a valid input it did not declare it "
    "refuses, before giving any output (no input or memory beside it changed), has refused that input: the report "
    "lists the input and the exception in its own table, \"Pick a kernel\" shows them as the backend's limits, "
    "and the check is counted neither passed nor failed. A refusal gates only under --strict-interface, as "
    "interface breaches do. A device fault, an out-of-memory error, a hang, a crash, a returned value that is "
    "not a tensor, and an input changed before raising are not refusals; wrong bits returned without an "
    "exception stay a numerics failure of the rule the case checks. A refusal is judged where every check calls the "
    "backend, so it reads the same in every check; a check that asks for an exception (a wrong-shaped weight, a bad "
    "eps) or judges one (an empty batch of a dim the backend takes) judges it itself.\n\n"
    "Coverage decides the verdict. A run has target dims: the contract's (hidden 4096, head_dim 128) unless "
    "`--target-dims` names a model's own. A backend that refuses a target dim (a contiguous input at that dim "
    "refused, and no check of it run there) or whose declared limits keep one out (or contiguous rows) cannot pass: "
    "with nothing failed it reads `INCOMPLETE (not checked at hidden 4096 (refused))`, naming each target dim it left "
    "unchecked and why, and the run exits non-zero. A backend that refuses other shapes, or a target dim only at some "
    "batch sizes, passes with its refusals listed as its limits."
)
