"""The one command a failure prints to re-run just its case, from any directory where the backend imports: the
suites by package, the backend's spec, device, dtype and rule, and the case as ``--replay`` parses it.
"""

from __future__ import annotations

import shlex
from typing import Any

from rmsnorm_conformance.harness.plugin.parity_gate import ParityPair
from rmsnorm_conformance.harness.running.backend import Backend


def replay_command(backend: Backend, device: str, dtype: str, rule_id: str, case: Any, contract_profile: str) -> str:
    """One command that re-runs just this case."""
    args = ["pytest", "--pyargs", "rmsnorm_conformance.suites", f"--backend={backend.spec}",
            f"--device={device}", f"--dtype={dtype}", f"--rule={rule_id}", f"--contract-profile={contract_profile}"]
    return shlex.join(args) + " --replay=" + _double_quoted(repr(case))


def parity_replay_command(pair: ParityPair, dtype: str, case: Any) -> str:
    """One command that re-runs just this case of the parity gate."""
    specs = ",".join(dict.fromkeys((pair.left_backend.spec, pair.right_backend.spec if not pair.mode
                                    else pair.left_backend.spec)))
    gate = f"--modes={pair.mode}" if pair.mode else f"--require-parity={pair.spec.label.replace('=', ':')}"
    devices = ",".join(dict.fromkeys((str(pair.left_device), str(pair.right_device))))
    args = ["pytest", "--pyargs", "rmsnorm_conformance.suites", f"--backend={specs}", f"--device={devices}",
            f"--dtype={dtype}", "--rule=parity.bitwise", gate]
    return shlex.join(args) + " --replay=" + _double_quoted(repr(case))


def _double_quoted(text: str) -> str:
    """Case reprs hold only names, numbers and single-quoted words: double quotes keep them readable."""
    if any(ch in text for ch in '"$`\\!'):
        return shlex.quote(text)
    return f'"{text}"'
