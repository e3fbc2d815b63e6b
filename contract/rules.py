"""The vocabulary of a numerical contract: tolerances, ULP bounds, rules and profiles.

These are plain frozen dataclasses so that a contract is data that suites, reports and CONTRACT.md all
read, and no number is ever restated in code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# One rounding in fp32, relative: the unit of a bound's allowance for the terms of a sum.
FP32_ROUNDING = 2.0 ** -24


@dataclass(frozen=True)
class Tolerance:
    """An elementwise bound ``|actual - reference| <= atol + rtol * |reference| + term_roundings * 2^-24 * terms``.

    ``terms`` is the size of the terms the element is a sum of (``reference.gradient_terms``): where they cancel,
    every fp32 order of the sum is off by a few roundings of them, however small the sum, and atol and rtol alone
    would fail a correct kernel there. Only the gradient bounds allow for terms; the others leave it 0.
    """

    atol: float
    rtol: float
    why: str
    term_roundings: float = 0.0

    def allowed(self, reference_abs: float, terms: float = 0.0) -> float:
        """The error allowed at an element whose reference magnitude is ``reference_abs`` and whose terms sum to
        ``terms`` in magnitude."""
        return self.atol + self.rtol * reference_abs + self.term_roundings * FP32_ROUNDING * terms

    def describe(self) -> str:
        head = f"atol {self.atol:g}, rtol {self.rtol:g}"
        return f"{head}, {self.term_roundings:g} fp32 roundings of the terms" if self.term_roundings else head


@dataclass(frozen=True)
class UlpBound:
    """At most ``max_ulp`` units in the last place of the output dtype from the correctly rounded value."""

    max_ulp: int
    why: str

    def describe(self) -> str:
        return f"<= {self.max_ulp} ULP"


Bound = Tolerance | UlpBound


# What a breach of a rule means for the verdict. `numerics` rules gate: the bits and the values a kernel
# computes. `interface` rules say how a kernel refuses bad input (which exception, which words): a breach is a
# warning unless the run asks for `--strict-interface`, because a gate that is red for every real kernel over
# exception-type policy gets switched off.
SEVERITIES: tuple[str, ...] = ("numerics", "interface")


@dataclass(frozen=True)
class Rule:
    """One clause of the contract; ``id`` is what tests, records and reports call it."""

    id: str
    title: str
    statement: str
    severity: str = "numerics"

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"rule {self.id}: severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")

    @property
    def axis(self) -> str:
        return self.id.split(".", 1)[0]


@dataclass(frozen=True)
class Profile:
    """A named set of bounds: what the output of each dtype must meet.

    ``output`` bounds hold the forward result against the reference; ``gradients`` hold dx and dw
    against fp32 autograd of the reference.
    """

    name: str
    description: str
    output: Mapping[str, Bound] = field(default_factory=dict)
    gradients: Mapping[str, Tolerance] = field(default_factory=dict)

    def output_bound(self, dtype_name: str) -> Bound:
        try:
            return self.output[dtype_name]
        except KeyError:
            raise KeyError(f"profile {self.name!r} has no output bound for dtype {dtype_name!r}") from None

    def gradient_bound(self, dtype_name: str) -> Tolerance:
        try:
            return self.gradients[dtype_name]
        except KeyError:
            raise KeyError(f"profile {self.name!r} has no gradient bound for dtype {dtype_name!r}") from None
