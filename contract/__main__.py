"""``rmsnorm-conformance contract [--write | --check] [CONTRACT.md]``: print the contract, or rewrite or check a
CONTRACT.md's tables."""

import sys

from .render import main

sys.exit(main())
