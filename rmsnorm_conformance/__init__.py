"""rmsnorm-conformance: a numerical-contract conformance harness for RMSNorm kernels, shipped as a pytest plugin.

The distribution installs this one import package. Its parts live in the repository's top-level source
folders and are mapped in here by ``pyproject.toml``: ``contract`` (the rules as data and the reference),
``harness`` (registry, strategies, comparison, report, plugin), ``suites`` (the conformance tests any
backend is held to) and ``backends`` (the implementations under test).

    pip install rmsnorm-conformance
    pytest --pyargs rmsnorm_conformance.suites --backend=mypkg.module:RMSNorm
"""

from __future__ import annotations

import importlib.metadata

from .contract.rmsnorm import VERSION as CONTRACT_VERSION  # the contract this package implements (CONTRACT.md)

try:
    __version__ = importlib.metadata.version("rmsnorm-conformance")
except importlib.metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["CONTRACT_VERSION", "__version__"]
