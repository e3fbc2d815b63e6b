"""Command-line entry: ``python -m rmsnorm_conformance.backends.cuda_rmsnorm --compile-check`` compiles the
sources without a GPU."""

from __future__ import annotations

import sys

from ._build import main

sys.exit(main())
