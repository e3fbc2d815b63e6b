"""The names of the entry points a backend is called through: the words a drawn case, its replay and a check
share. What each one takes, returns and is held to is ``running/entry_points.py``'s; a case only names one, so the
drawing stage reads the names here, below the running stage that calls them.
"""

from __future__ import annotations

# The entry points of the plain norm, drawn together by forward's sweeps: both take (x, weight, eps).
FORWARD_ENTRY_POINTS: tuple[str, ...] = ("forward", "forward_fp32")
# The entry points a case may name (the replay vocabulary): the plain norm's, then the variants engines ship.
AXIS_A_ENTRY_POINTS: tuple[str, ...] = (*FORWARD_ENTRY_POINTS, "fused_add", "forward_offset", "forward_unweighted")
