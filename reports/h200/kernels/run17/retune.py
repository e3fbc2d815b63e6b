"""A pytest plugin for kernels run 17: the Triton backward's GPU tuning replaced by the fields in RETUNE_BWD (JSON,
fields of _GPU_BWD), so that the backend's GPU tests run a candidate of benchmarks/triton_tuning.py's sweep
before it becomes the default.
    RETUNE_BWD='{"prefetch": false, "stages": 3}' python3 -m pytest -p retune tests/test_triton_backend.py
"""

from __future__ import annotations

import json
import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import rmsnorm_conformance.backends.triton_rmsnorm as tr

    fields = json.loads(os.environ.get("RETUNE_BWD", "{}"))
    tr._GPU_BWD = tr._GPU_BWD._replace(**fields)
    tr.launch_config.cache_clear()
    print(f"retune: _GPU_BWD = {tr._GPU_BWD}")
