"""``rmsnorm-conformance contract [CONTRACT.md] [--check]``: regenerate or check CONTRACT.md's tables."""

import sys

from .render import main

sys.exit(main())
