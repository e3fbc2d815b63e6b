"""What the harness's options (``options.Options``) resolve to: one frozen ``RunOptions``, kept in ``config.stash`` in
every process (controller and pytest-xdist workers alike), so fixtures, hooks and the reporter read the same
values and nothing about the run lives in a module global.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import settings

from ...contract import DTYPES, TARGET_DIMS
from ...contract.rmsnorm import QK_NORM_HEADS, THRESHOLD_DIMS, WIDE_TAIL_DIMS
from ..checking.known_failures import Manifest, load_manifest
from ..drawing.replay import ReplayError, parse_case
from ..drawing.strategies import EDGE_DIMS, HEAD_COUNTS, MAX_DIM
from ..drawing.sweeps import SWEEPS, sweep_settings
from ..reporting.render import REPORT_SUFFIXES
from ..running.adapters import adapted_notes
from ..running.backend import Backend, BackendError, DeclarationError
from ..running.devices import (
    device_unavailable_reason,
    parse_device_option,
    worker_cpu_threads,
)
from ..running.isolation import HarnessWatch, watch_functions
from ..running.modes import ModeBackend, describe_sample
from ..running.registry import BUILTIN_BACKENDS, load_backend, parse_backend_option
from . import options
from .options import Options
from .parity_gate import (
    ParityPair,
    ParitySpec,
    parse_modes,
    parse_parity,
    sample_on,
)
from .state import HARNESS_WATCH, RUN_ENDS_AT, WORKER_RUN_ENDS_AT

# Bytes a case may need per element of its batch, across the tensors a check keeps alive (inputs, outputs,
# references, gradients, copies): the element budget must leave this much room in memory.
BYTES_PER_ELEMENT = 64


@dataclass(frozen=True)
class RunOptions:
    """The run's options, parsed and checked once: ``options`` as given, the rest what they resolved to."""

    options: Options
    backends: tuple[Backend, ...]
    devices: tuple[torch.device, ...]
    dtypes: tuple[str, ...]
    rules: tuple[str, ...]
    sweep: str
    settings: settings  # the Hypothesis settings every conformance test of this run sweeps under
    max_examples: int | None
    case_timeout: float
    deadline: float  # seconds the whole run may take (0: no limit)
    run_ends_at: float  # time.time() at which that deadline passes (0: no limit)
    contract_profile: str
    strict_interface: bool
    reports: tuple[str, ...]
    replay_case: Any = None
    manifest: Manifest | None = None
    named_backends: tuple[str, ...] = ()  # named with --backend: each must run a check
    parity_pairs: tuple[ParityPair, ...] = ()
    bench: dict[str, Any] | None = None  # --bench-json's data, for the report's speed columns and pictures
    # (backend, device, reason) for default backends that cannot run on any selected device.
    not_run: tuple[tuple[str, str, str], ...] = ()
    mode_sample: bool = True  # the execution-mode sample (axis_a.execution_mode); off with --modes=none
    shrink: bool = True  # Hypothesis shrinks a failing case to the simplest one; off with --no-shrink
    model_dims: tuple[int, ...] = ()  # --dims: a model's own last dims, drawn and checked beside the contract's
    # --target-dims: the model's dims (name, dim) a backend must be checked at to pass; the contract's by default.
    target_dims: tuple[tuple[str, int], ...] = tuple(TARGET_DIMS.items())

    def environment(self, config: pytest.Config) -> dict[str, str]:
        """The run's settings as the report's environment table shows them."""
        return {
            "contract profile": self.contract_profile,
            "interface rules": "gate (--strict-interface)" if self.strict_interface else "warn",
            "sweep": self.sweep + (f", {self.max_examples} examples a test" if self.max_examples else "")
                     + ("" if self.shrink else ", failing cases not shrunk (--no-shrink)"),
            "backends": ", ".join(b.name for b in self.backends) or "none",
            "command": run_command(config),
            "shapes checked": checked_shapes(self.model_dims, self.sweep),
            "case timeout": f"{self.case_timeout:g} s" if self.case_timeout else "none",
            **({"run deadline": f"{self.deadline:g} s"} if self.deadline else {}),
            "execution modes": (describe_sample(tuple(d.type for d in self.devices)) + " on a sample"
                                if self.mode_sample else "no sample (--modes=none)")
                               + "".join(f"; {m} on the full sweep (--modes)" for m in
                                         dict.fromkeys(p.mode for p in self.parity_pairs if p.mode)),
            **({"adapted kernels": adapted_notes(self.backends)} if adapted_notes(self.backends) else {}),
        }


def checked_shapes(model_dims: tuple[int, ...] = (), sweep: str = "ci") -> str:
    """The dims and QK-norm head counts the run checks, drawn and explicit: a kernel's path for wider rows or more
    heads than these is not checked, and the report says so rather than let a PASS read as covering it."""
    scope = SWEEPS[sweep].scope if sweep in SWEEPS else None
    explicit = [d for d in (*THRESHOLD_DIMS, *model_dims) if scope is None or d not in THRESHOLD_DIMS
                or d in scope.threshold_dims]
    heads = [h for h in QK_NORM_HEADS if scope is None or h in scope.qk_heads]
    own = f"; the model's own (--dims): {', '.join(map(str, model_dims))}" if model_dims else ""
    return (f"dims drawn 1 to {MAX_DIM} (edges {_listed(EDGE_DIMS)}){own}; explicit cases (row thresholds, "
            f"accuracy, 3-D views with a strided last dim) at dims {_listed(dict.fromkeys(explicit))}, accuracy also "
            f"at {_listed(WIDE_TAIL_DIMS)}; QK-norm "
            f"[T, H, 128] with H {_listed(heads)} (drawn: {_listed(HEAD_COUNTS)}); wider rows and more heads are "
            "not checked")


def _listed(numbers: Iterable[int]) -> str:
    return ", ".join(map(str, numbers))


def watch_test_framework() -> None:
    """pytest's outcomes and Hypothesis' in-test functions, watched around every call as the report's json and file
    functions are (isolation.watch_functions): a kernel that made ``pytest.skip`` a no-op had the tests after it run
    past their skips, and native beside it read interface warnings it does not have."""
    import _pytest.outcomes
    import hypothesis

    watch_functions("pytest", pytest, ("fail", "skip", "xfail", "exit", "importorskip", "raises", "warns"))
    watch_functions("_pytest.outcomes", _pytest.outcomes, ("fail", "skip", "xfail", "exit", "importorskip"))
    watch_functions("hypothesis", hypothesis, ("assume", "reject", "event", "note", "target", "given", "settings"))


def run_command(config: pytest.Config) -> str:
    """The run's command line, each option's value joined to it (``-p no:x`` as ``-pno:x``, ``--basetemp d`` as
    ``--basetemp=d``), so that a word standing alone is a target: the re-run commands the report prints keep the
    options and drop the targets, and a value standing alone had been dropped as one, leaving ``-p`` to take the
    next option as its value."""
    args = [str(a) for a in config.invocation_params.args]
    parser = getattr(getattr(config, "_parser", None), "optparser", None)
    actions = getattr(parser, "_option_string_actions", None)
    if not isinstance(actions, dict):
        return "pytest " + shlex.join(args)
    words: list[str] = []
    i = 0
    while i < len(args):
        action = actions.get(args[i])
        if action is not None and action.nargs is None and i + 1 < len(args):
            option, value = args[i], args[i + 1]
            words.append(f"{option}={value}" if option.startswith("--") else option + value)
            i += 2
        else:
            words.append(args[i])
            i += 1
    return "pytest " + shlex.join(words)


def resolve(config: pytest.Config) -> RunOptions:
    """Parse and check every option; a usage error names the option and the value."""
    if HARNESS_WATCH not in config.stash:  # before any backend is imported
        watch_test_framework()
        config.stash[HARNESS_WATCH] = HarnessWatch()
        config.stash[HARNESS_WATCH].take()
    threads = worker_cpu_threads()
    if threads is not None:  # before any backend call: the global-state snapshots start from this
        torch.set_num_threads(threads)
    opts = options.of(config)
    if opts.problems:
        raise pytest.UsageError("the configuration file: " + "; ".join(opts.problems))
    devices = _resolve_devices(opts.device)
    reports = opts.report
    _check_reports(reports)
    bench = load_bench(opts.bench_json)
    _check_budget(opts.max_elements, devices)
    case_timeout = _resolve_case_timeout(opts.case_timeout)
    deadline, run_ends_at = _resolve_deadline(config, opts.deadline)
    sweep = opts.sweep
    dtypes = _resolve_dtypes(opts.dtype, sweep)
    from ...contract import ALL_RULES

    rules = _parse_choice_list(opts.rule, tuple(r.id for r in ALL_RULES), "--rule", patterns=True)
    max_examples = opts.max_examples
    if max_examples is not None and max_examples < 1:
        raise pytest.UsageError(f"--max-examples={max_examples}: must be at least 1")
    replay_case = _parse_replay(opts.replay)
    manifest = _load_known_failures(opts.known_failures)
    _check_baseline(opts.write_known_failures)
    backends, not_run = _resolve_backends(config, opts.backend, devices)
    names = _unique_names(backends)
    target_dims = parse_target_dims(opts.target_dims)
    return RunOptions(
        options=opts, backends=tuple(backends), devices=devices, dtypes=dtypes, rules=rules, sweep=sweep,
        settings=sweep_settings(sweep, max_examples=max_examples, replay=bool(opts.replay), shrink=opts.shrink),
        max_examples=max_examples, shrink=opts.shrink,
        case_timeout=case_timeout, deadline=deadline, run_ends_at=run_ends_at,
        contract_profile=opts.contract_profile,
        strict_interface=opts.strict_interface, reports=reports, replay_case=replay_case,
        manifest=manifest, named_backends=tuple(names) if opts.backend else (),
        parity_pairs=tuple(_resolve_parity(backends, devices, list(opts.require_parity), opts.modes)),
        bench=bench, not_run=tuple(not_run), mode_sample=sample_on(opts.modes),
        model_dims=_model_dims(opts.dims, target_dims), target_dims=target_dims)


def _model_dims(option: str | None, target_dims: tuple[tuple[str, int], ...]) -> tuple[int, ...]:
    """--dims, and the --target-dims that are not the contract's: a target dim is drawn and checked as a model's own
    dim is, so that the verdict can say whether it was."""
    own = [dim for _, dim in target_dims if dim not in TARGET_DIMS.values()]
    return tuple(dict.fromkeys((*_parse_dims(option), *own)))



# The widest dim --dims takes: a row of a million elements, past any model's hidden size.
MAX_MODEL_DIM = 1 << 20


def _parse_dims(option: str | None) -> tuple[int, ...]:
    """--dims parsed: whole numbers from 1 to MAX_MODEL_DIM, each once, in the order given."""
    dims: list[int] = []
    for word in (option or "").split(","):
        word = word.strip()
        if not word:
            continue
        if not word.isdigit() or not 1 <= int(word) <= MAX_MODEL_DIM:
            raise pytest.UsageError(f"--dims={option}: {word!r} is not a dim; give whole numbers from 1 to "
                                    f"{MAX_MODEL_DIM} as a comma list, e.g. --dims=6144,128")
        dims.append(int(word))
    return tuple(dict.fromkeys(dims))



# The widest target dim --target-dims takes: a row of a million elements, past any model's hidden size.
MAX_TARGET_DIM = 1 << 20


def parse_target_dims(option: str | None) -> tuple[tuple[str, int], ...]:
    """--target-dims parsed: (name, dim) pairs from NAME=DIM (a plain DIM is named "dim"), each dim a whole number
    from 1 to MAX_TARGET_DIM, each once; none given, the contract's."""
    if not option:
        return tuple(TARGET_DIMS.items())
    dims: dict[int, str] = {}
    for word in (w.strip() for w in option.split(",")):
        if not word:
            continue
        name, _, value = word.rpartition("=")
        if not value.strip().isdigit() or not 1 <= int(value) <= MAX_TARGET_DIM:
            raise pytest.UsageError(f"--target-dims={option}: {word!r} is not NAME=DIM with DIM a whole number from "
                                    f"1 to {MAX_TARGET_DIM}; e.g. --target-dims=hidden=5120,head_dim=128")
        dims.setdefault(int(value), name.strip() or "dim")
    return tuple((name, dim) for dim, name in dims.items())


def _resolve_devices(option: str | None) -> tuple[torch.device, ...]:
    """--device parsed; a device the user named must exist: a gate that asked for cuda:7 must not pass on the
    CPU alone."""
    try:
        devices = tuple(parse_device_option(option))
    except ValueError as exc:
        raise pytest.UsageError(f"--device: {exc}") from exc
    if option:
        for device in devices:
            reason = device_unavailable_reason(device)
            if reason:
                raise pytest.UsageError(f"--device={option}: {device}: {reason}")
    return devices


def _resolve_dtypes(option: str | None, sweep: str) -> tuple[str, ...]:
    """--dtype parsed; without it, a sweep that is not the gate checks its own dtypes (each test then takes the
    ones for its rules), and the gate every dtype."""
    dtypes = _parse_choice_list(option, DTYPES, "--dtype")
    scope = SWEEPS[sweep].scope
    if scope is not None and not option:
        dtypes = tuple(d for d in DTYPES if d in scope.dtypes + scope.bitwise_dtypes)
    return dtypes


def _resolve_case_timeout(case_timeout: float) -> float:
    if case_timeout < 0:
        raise pytest.UsageError(f"--case-timeout={case_timeout:g}: must be 0 (no deadline) or more")
    return case_timeout


def _resolve_deadline(config: pytest.Config, deadline: float) -> tuple[float, float]:
    """(--deadline in seconds, the time.time() at which it passes); (0, 0) for no limit. The clock starts at
    pytest-xdist's controller's configure (controller.py), else when the options are resolved; workers take the
    controller's end."""
    if deadline < 0:
        raise pytest.UsageError(f"--deadline={deadline:g}: must be 0 (no limit) or more seconds")
    # A worker takes the controller's end; the controller its own, taken at configure (controller.py).
    run_ends_at = float(getattr(config, "workerinput", {}).get(WORKER_RUN_ENDS_AT, 0.0)) \
        or config.stash.get(RUN_ENDS_AT, 0.0) or (time.time() + deadline if deadline else 0.0)
    return deadline, run_ends_at


def _parse_replay(replay: str | None) -> Any:
    """The one case --replay names, or None without it."""
    if not replay:
        return None
    try:
        return parse_case(replay)
    except ReplayError as exc:
        raise pytest.UsageError(str(exc)) from exc


def _load_known_failures(path: str | None) -> Manifest | None:
    if not path:
        return None
    try:
        return load_manifest(path)
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--known-failures: {exc}") from exc


def _check_baseline(path: str | None) -> None:
    """--write-known-failures's path, its folder made: a baseline that cannot be written is an error now, not after
    a run of an hour."""
    if not path:
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
    except OSError as exc:
        raise pytest.UsageError(f"--write-known-failures={path}: cannot be written: {exc.strerror or exc}") from None


def _unique_names(backends: list[Backend]) -> list[str]:
    """The backends' names, each once: names key the report."""
    names = [b.name for b in backends]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise pytest.UsageError(f"--backend: two backends share the name {', '.join(map(repr, duplicates))}; "
                                "names key the report, so each must be unique")
    return names


def _unloadable(spec: str, reason: str) -> Backend:
    class Unloadable:
        name = spec
        devices = None

        def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
            raise RuntimeError(reason)

        def unavailable_reason(self, device: torch.device) -> str:
            return reason

    return Backend(Unloadable(), spec=spec)


def _interpreter_needed(specs: list[str]) -> bool:
    """Triton reads TRITON_INTERPRET when its kernels are defined: set it only for a selected Triton backend on
    a machine with no GPU, and never when the user set it themselves."""
    return "triton" in specs and "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available()


def _resolve_backends(config: pytest.Config, option: str | None, devices: tuple[torch.device, ...],
                      ) -> tuple[list[Backend], list[tuple[str, str, str]]]:
    # By default: this project's own backends. Adapters and entry-point backends run when named or with 'all'.
    specs = parse_backend_option(option) if option else list(BUILTIN_BACKENDS)
    if _interpreter_needed(specs):
        os.environ["TRITON_INTERPRET"] = "1"
    # module:attr specs name the user's own code: import it from where pytest was started.
    invocation_dir = str(config.invocation_params.dir)
    if any(":" in s for s in specs) and invocation_dir not in sys.path:
        sys.path.insert(0, invocation_dir)
    chosen: list[Backend] = []
    not_run: list[tuple[str, str, str]] = []
    watch = config.stash.get(HARNESS_WATCH, None)
    for spec in specs:
        backend = _load_selected(spec)
        replaced = watch.replaced() if watch is not None else []
        if replaced:  # by its import or construction: put back, and its semantics.global_state fails
            backend.import_changes = [*backend.import_changes,
                                      f"the harness's own functions replaced: {', '.join(replaced)}"]
        # A named backend always runs; a default one only where it can run on some selected device.
        reasons = None if option else _reasons_not_run(backend, devices)
        if reasons is None:
            chosen.append(backend)
        else:
            not_run += reasons
    return chosen, not_run


def _load_selected(spec: str) -> Backend:
    """The backend ``spec`` names. A usage error where the user's code or declarations are at fault; one of the
    project's own that cannot load here becomes a stand-in that is skipped with the reason."""
    try:
        return load_backend(spec)
    except DeclarationError as exc:
        raise pytest.UsageError(f"--backend={spec}: {exc}") from exc
    except (ImportError, RuntimeError, OSError) as exc:
        if ":" in spec:  # the user's own module: a typo should stop the run, not skip it
            raise pytest.UsageError(f"--backend={spec}: {exc}") from exc
        return _unloadable(spec, f"{spec} cannot be loaded: {exc}")
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(f"--backend: {exc}") from exc


def _reasons_not_run(backend: Backend, devices: tuple[torch.device, ...]) -> list[tuple[str, str, str]] | None:
    """None where a default backend runs on some selected device; else (name, device, reason) for each."""
    try:
        reasons = {str(d): device_unavailable_reason(d) or backend.unavailable_reason(d) for d in devices}
    except BackendError:
        return None  # its tests fail with the probe's error: never a quiet skip
    if any(r is None for r in reasons.values()):
        return None
    return [(backend.name, device, str(reason)) for device, reason in reasons.items()]


def _resolve_parity(backends: list[Backend], devices: tuple[torch.device, ...], specs: list[str],
                    modes_option: str | None) -> list[ParityPair]:
    """Every required pair on every device it runs on; names must be among the selected backends."""
    by_name = {b.name: b for b in backends}
    try:
        parsed = [parse_parity(v) for v in specs]
        modes = parse_modes(modes_option)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc
    for spec in parsed:
        for name in (spec.left, spec.right):
            if name not in by_name:
                raise pytest.UsageError(f"--require-parity={spec.label.replace('=', ':')}: {name!r} is not a "
                                        f"selected backend (selected: {', '.join(by_name) or 'none'}); "
                                        "add it to --backend")
    pairs: list[ParityPair] = []
    for spec in parsed:
        for left_device, right_device in _pair_devices(spec, devices):
            pairs.append(ParityPair(spec, by_name[spec.left], by_name[spec.right], left_device, right_device))
    for mode in modes:
        for backend in backends:
            moded = Backend(ModeBackend(backend, mode), spec=backend.spec)
            spec = ParitySpec(backend.name, moded.name)
            for device in devices:
                pairs.append(ParityPair(spec, backend, moded, device, device, mode=mode))
    return pairs


def _pair_devices(spec: ParitySpec, devices: tuple[torch.device, ...]) -> list[tuple[torch.device, torch.device]]:
    if spec.left_device and spec.right_device:
        return [(torch.device(spec.left_device), torch.device(spec.right_device))]
    fixed = spec.left_device or spec.right_device
    if fixed:
        return [(torch.device(fixed), torch.device(fixed))]
    return [(d, d) for d in devices]


def _check_reports(paths: tuple[str, ...]) -> None:
    """Every --report path: a known suffix and a writable place, checked before the run, not after it."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            raise pytest.UsageError(f"--report={raw}: is a directory")
        if path.suffix not in REPORT_SUFFIXES:
            raise pytest.UsageError(f"--report={raw}: unknown suffix {path.suffix or '(none)'!r}; use "
                                    + " or ".join(REPORT_SUFFIXES))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # One probe a process: under -n the controller and every worker check the same paths at once, and a
            # shared probe name let one process delete another's, a false "cannot write there" (about 1 run in 12).
            probe = path.parent / f".{path.name}.{os.getpid()}.probe"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise pytest.UsageError(f"--report={raw}: cannot write there: {exc.strerror or exc}") from None


def _check_budget(max_elements: int | None, devices: tuple[torch.device, ...]) -> None:
    if max_elements is None:
        return
    bound = _memory_bound(devices)
    if not 1 <= max_elements <= bound:
        raise pytest.UsageError(f"--max-elements={max_elements}: must be between 1 and {bound} (the devices' "
                                f"memory at {BYTES_PER_ELEMENT} bytes an element)")


def load_bench(path: str | None) -> dict[str, Any] | None:
    """--bench-json's data; a missing or malformed file is a usage error before the run, not a report without
    the speed columns the user asked for."""
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"--bench-json={path}: cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise pytest.UsageError(f"--bench-json={path}: not a benchmark JSON (benchmarks/bench.py writes "
                                "{'records': [...], 'environment': {...}})")
    return data


def _memory_bound(devices: tuple[torch.device, ...]) -> int:
    """The largest element budget every device's memory can hold."""
    sizes = []
    for device in devices:
        if device.type == "cuda" and torch.cuda.is_available():
            sizes.append(torch.cuda.get_device_properties(device.index or 0).total_memory)
        else:
            with contextlib.suppress(ValueError, OSError, AttributeError):
                sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return max(1, min(sizes or [1 << 36]) // BYTES_PER_ELEMENT)


def _parse_choice_list(value: str | None, known: tuple[str, ...], option: str, *,
                       patterns: bool = False) -> tuple[str, ...]:
    if not value:
        return known if not patterns else ()
    chosen = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))  # order kept, once each
    for item in chosen:
        ok = any(fnmatchcase(k, item) for k in known) if patterns else item in known
        if not ok:
            raise pytest.UsageError(f"{option}={item}: unknown; known: {', '.join(known)}")
    return chosen
