"""The planted-defect zoo under its historical name, so that ``--backend=tests.defects:X`` and replay lines
printed by earlier runs still load; the zoo itself is ``rmsnorm_conformance.zoo``."""

from rmsnorm_conformance.zoo import *  # noqa: F403
from rmsnorm_conformance.zoo import DEFECTS  # noqa: F401
from rmsnorm_conformance.zoo.defects import _normalise, sum_of_squares_by_lanes  # noqa: F401
