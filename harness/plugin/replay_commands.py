"""The one command a failure prints to re-run just its case, from any directory where the backend imports: the
suites by package, the backend's spec, device, dtype and rule, and the case as ``--replay`` parses it.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from ..running.backend import Backend
from .options import short
from .parity_gate import ParityPair


def replay_command(backend: Backend, device: str, dtype: str, rule_id: str, case: Any, contract_profile: str,
                   flag: Callable[[str], str] = short) -> str:
    """One command that re-runs just this case; ``flag`` names each option as this run takes it (``--backend``,
    or ``--rmsnorm-backend`` where a conftest of the project claimed the short name)."""
    args = ["pytest", "--pyargs", "rmsnorm_conformance.suites", f"{flag('backend')}={backend.spec}",
            f"{flag('device')}={device}", f"{flag('dtype')}={dtype}", f"{flag('rule')}={rule_id}",
            f"{flag('contract_profile')}={contract_profile}"]
    return shlex.join(args) + f" {flag('replay')}=" + _double_quoted(repr(case))


def parity_replay_command(pair: ParityPair, dtype: str, case: Any, flag: Callable[[str], str] = short) -> str:
    """One command that re-runs just this case of the parity gate."""
    specs = ",".join(dict.fromkeys((pair.left_backend.spec, pair.right_backend.spec if not pair.mode
                                    else pair.left_backend.spec)))
    gate = f"{flag('modes')}={pair.mode}" if pair.mode else \
        f"{flag('require_parity')}={pair.spec.label.replace('=', ':')}"
    devices = ",".join(dict.fromkeys((str(pair.left_device), str(pair.right_device))))
    args = ["pytest", "--pyargs", "rmsnorm_conformance.suites", f"{flag('backend')}={specs}",
            f"{flag('device')}={devices}", f"{flag('dtype')}={dtype}", f"{flag('rule')}=parity.bitwise", gate]
    return shlex.join(args) + f" {flag('replay')}=" + _double_quoted(repr(case))


def _double_quoted(text: str) -> str:
    """Case reprs hold only names, numbers and single-quoted words: double quotes keep them readable."""
    if any(ch in text for ch in '"$`\\!'):
        return shlex.quote(text)
    return f'"{text}"'
