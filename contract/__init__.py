"""The numerical contract for RMSNorm, as data: every suite and report reads it from here."""

from .rmsnorm import (
    ALL_RULES,
    AXIS_A_VARIANTS,
    AXIS_B_RULES,
    DEFAULT_EPS,
    DEFAULT_PROFILE,
    DOMAIN,
    DTYPES,
    FORMULA,
    GRADIENT_RULES,
    PROFILES,
    SEMANTIC_RULES,
    TARGET_DIMS,
    VERSION,
    profile,
    rule,
)
from .rules import Bound, Profile, Rule, Tolerance, UlpBound

__all__ = [
    "ALL_RULES",
    "AXIS_A_VARIANTS",
    "AXIS_B_RULES",
    "DEFAULT_EPS",
    "DEFAULT_PROFILE",
    "DOMAIN",
    "DTYPES",
    "FORMULA",
    "GRADIENT_RULES",
    "PROFILES",
    "SEMANTIC_RULES",
    "TARGET_DIMS",
    "VERSION",
    "Bound",
    "Profile",
    "Rule",
    "Tolerance",
    "UlpBound",
    "profile",
    "rule",
]
