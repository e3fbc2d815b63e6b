"""Backends that attack the harness rather than the contract: they raise, hang, crash, exit, lie about their
capabilities or leak global state. tests/faults/test_adversarial.py runs each and checks that none of them can end in
PASS, exit status 0 or a missing report.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import torch

from rmsnorm_conformance.backends.native import NativeRMSNormOp


class NeverAvailable(NativeRMSNormOp):
    """Says it cannot run anywhere: named explicitly, it must read NOT RUN, never PASS."""

    name = "never_available"

    def unavailable_reason(self, device: torch.device) -> str:
        return "this backend never runs"


class AvailabilityProbeRaises(NativeRMSNormOp):
    """Its availability probe raises: an error of the backend, not a reason to skip it."""

    name = "probe_raises"

    def unavailable_reason(self, device: torch.device) -> str | None:
        raise RuntimeError("driver query failed")


class StringDtypes(NativeRMSNormOp):
    """Declares its dtypes as strings: the declaration is unreadable, and says so at load time."""

    name = "string_dtypes"
    dtypes = ("bfloat16", "float16")


class BadDevices(NativeRMSNormOp):
    name = "bad_devices"
    devices = 5


class Bf16OnlyWrongBackward(NativeRMSNormOp):
    """bf16 only, with a backward three times too large: an fp32-only backward probe would call it
    backward-less and its gradient rules would never run."""

    name = "bf16_wrong_backward"
    dtypes = (torch.bfloat16,)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            raise TypeError(f"bf16 only, got {x.dtype}")
        y = super().forward(x, weight, eps)
        return y * 3 - (y * 2).detach()  # same value, three times the gradient


class BranchesOnAFrozenWeight(NativeRMSNormOp):
    """Another reduction order where x requires grad and the weight does not (LoRA fine-tuning): its training bits
    differ from its sampling bits there alone, and passed while x and the weight required grad together."""

    name = "branches_on_a_frozen_weight"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if torch.is_grad_enabled() and x.requires_grad and not weight.requires_grad:
            xf = x.float()
            mean_square = (xf * xf).cumsum(-1)[..., -1:] / x.shape[-1]  # one element after another
            return (xf * torch.rsqrt(mean_square + eps) * weight.float()).to(x.dtype)
        return super().forward(x, weight, eps)


class _GradientTimes(torch.autograd.Function):
    """The identity forward (a copy, the same bits), its gradient scaled."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return y.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g * ctx.scale, None


class WrongDxWithAFrozenWeight(NativeRMSNormOp):
    """dx 5 % too large where the weight is frozen (a backward that branches on ``ctx.needs_input_grad``): passed
    while every gradient check made the weight require grad."""

    name = "wrong_dx_with_a_frozen_weight"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        y = super().forward(x, weight, eps)
        if torch.is_grad_enabled() and x.requires_grad and not weight.requires_grad:
            return _GradientTimes.apply(y, 1.05)
        return y


class SplitsAcrossThreads(NativeRMSNormOp):
    """Another reduction order where a batch has fewer rows than torch has intra-op threads (a row's sum split
    over them): under pytest-xdist each worker had one thread on two cores, that path never ran, and it passed."""

    name = "splits_across_threads"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if x.numel() // max(x.shape[-1], 1) < torch.get_num_threads():
            xf = x.float()
            mean_square = (xf * xf).cumsum(-1)[..., -1:] / x.shape[-1]  # one element after another
            return (xf * torch.rsqrt(mean_square + eps) * weight.float()).to(x.dtype)
        return super().forward(x, weight, eps)


class RaisesAboveRows(NativeRMSNormOp):
    """Raises for batches of more than 64 rows, as a kernel with a fixed grid would."""

    name = "raises_above_64"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if x.reshape(-1, x.shape[-1]).shape[0] > 64:
            raise RuntimeError("grid too large | <b>boom</b> `tick`")
        return super().forward(x, weight, eps)


class ReturnsNone(NativeRMSNormOp):
    name = "returns_none"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        super().forward(x, weight, eps)
        return None  # type: ignore[return-value]


class ReturnsList(NativeRMSNormOp):
    name = "returns_list"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return [super().forward(x, weight, eps)]  # type: ignore[return-value]


class _MisbehavesFromItsSecondCall(NativeRMSNormOp):
    """A kernel whose first call is native's (so that a run's warm-up and first checks go through) and whose later
    calls first do ``misbehave(call)``, ``call`` counting from 1 over every instance in the process."""

    calls = 0

    def misbehave(self, call: int) -> None:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        type(self).calls += 1
        if type(self).calls > 1:
            self.misbehave(type(self).calls)
        return super().forward(x, weight, eps)


class InterruptsAfterFirstCall(_MisbehavesFromItsSecondCall):
    """From its second call on, sends its process a SIGINT: a Ctrl-C during a kernel."""

    name = "interrupts"

    def misbehave(self, call: int) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the handler runs at the next instruction; the sleep is cut short by it


class RaisesKeyboardInterrupt(_MisbehavesFromItsSecondCall):
    """From its second call on, raises KeyboardInterrupt itself, with no Ctrl-C: a kernel's raise, not the user's."""

    name = "raises_keyboard_interrupt"

    def misbehave(self, call: int) -> None:
        raise KeyboardInterrupt


class Sleeps(_MisbehavesFromItsSecondCall):
    """Hangs in Python (a sleep) on its second call."""

    name = "sleeps"

    def misbehave(self, call: int) -> None:
        time.sleep(float(os.environ.get("HOSTILE_SLEEP", "600")))


class SwallowsInterrupt(_MisbehavesFromItsSecondCall):
    """On its second call, sends this process a SIGINT (a Ctrl-C) and swallows the KeyboardInterrupt it raises, as
    code that catches BaseException does (and as Python does with one raised in a garbage collector's callback)."""

    name = "swallows_interrupt"

    def misbehave(self, call: int) -> None:
        if call != 2:
            return
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs at the next instruction; the sleep is cut short by it
        except BaseException:  # swallowed: the point of this backend
            pass


class DeclaresNoBackwardButHasAWrongOne(Bf16OnlyWrongBackward):
    """Declares no backward, and its output carries a grad_fn whose gradient is three times too large: a training
    loop would use it, so the gradient rules must too."""

    name = "no_backward_declared"
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    supports_backward = False

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        y = NativeRMSNormOp.forward(self, x, weight, eps)
        return y * 3 - (y * 2).detach()


class _EndsItsTestWhereWrong(NativeRMSNormOp):
    """Wrong (1 + weight) for batches of more than one row, and there it ends the test itself, as a kernel that
    knows it runs under pytest can: a skipped or xfailed test never reached the verdict."""

    def end(self) -> None:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if x.reshape(-1, x.shape[-1]).shape[0] > 1:
            self.end()
            return super().forward(x, weight + 1, eps)
        return super().forward(x, weight, eps)


class SkipsWhereWrong(_EndsItsTestWhereWrong):
    name = "skips_where_wrong"

    def end(self) -> None:
        import pytest

        pytest.skip("skips_where_wrong has nothing to say here")


class XfailsWhereWrong(_EndsItsTestWhereWrong):
    name = "xfails_where_wrong"

    def end(self) -> None:
        import pytest

        pytest.xfail("a known limitation")


class RaisesSkipTestWhereWrong(_EndsItsTestWhereWrong):
    name = "skiptest_where_wrong"

    def end(self) -> None:
        import unittest

        raise unittest.SkipTest("not here")


class _Agreeable(torch.Tensor):
    """A tensor that says it equals whatever it is compared with."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.equal:
            return True
        if func in (torch.sub, torch.Tensor.sub, torch.Tensor.__sub__, torch.ne, torch.Tensor.ne):
            return torch.zeros_like(torch.Tensor.as_subclass(args[0], torch.Tensor), dtype=torch.float32)
        return super().__torch_function__(func, types, args, kwargs or {})


class ReturnsAnAgreeableSubclass(NativeRMSNormOp):
    """Wrong (1 + weight), in a torch.Tensor subclass whose comparisons all come out equal."""

    name = "agreeable_subclass"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return super().forward(x, weight + 1, eps).as_subclass(_Agreeable)


class ExitsZero(NativeRMSNormOp):
    """Calls os._exit(0) mid-run: in a serial run that would end the process with status 0 and no report."""

    name = "exits_zero"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        os._exit(0)


class ZeroesItsInput(NativeRMSNormOp):
    """Returns native's output, then zeroes the x it was given: a caller that passes the same x on gets zeros."""

    name = "zeroes_its_input"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        y = super().forward(x, weight, eps)
        x.zero_()
        return y


class SegfaultsOnWrongShapedWeight(NativeRMSNormOp):
    """Right on good input; kills its process with SIGSEGV for a weight of the wrong shape, as a kernel whose fast
    entry skips the shape check and reads past the weight would. Its other checks pass, so only the crash can
    fail it."""

    name = "segfaults_on_bad_weight"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if isinstance(weight, torch.Tensor) and tuple(weight.shape) != tuple(x.shape[-1:]):
            os.kill(os.getpid(), signal.SIGSEGV)
            time.sleep(5)
        return super().forward(x, weight, eps)


class Segfaults(NativeRMSNormOp):
    """Kills its own process with SIGSEGV, as a kernel reading out of bounds would."""

    name = "segfaults"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)
        return super().forward(x, weight, eps)


class SetsDefaultDtype(NativeRMSNormOp):
    """Leaves torch's default dtype at float64: later cases' inputs would change bits."""

    name = "sets_default_dtype"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        torch.set_default_dtype(torch.float64)
        return super().forward(x, weight, eps)


class DisablesGrad(NativeRMSNormOp):
    """Turns grad mode off and leaves it off: later backends' gradient tests would quietly skip."""

    name = "disables_grad"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        torch.set_grad_enabled(False)
        return super().forward(x, weight, eps)


class FlushesDenormals(NativeRMSNormOp):
    """Turns on flushing subnormals to zero and leaves it on, as a kernel library tuning the CPU's float modes for
    speed might: the reference's bits, and every later backend's, change on subnormal inputs."""

    name = "flushes_denormals"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        torch.set_flush_denormal(True)
        return super().forward(x, weight, eps)


class EnablesAutocast(NativeRMSNormOp):
    """Enters autocast and never leaves it (``torch.set_autocast_enabled``): later calls run in reduced precision
    wherever autocast reaches."""

    name = "enables_autocast"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        torch.set_autocast_enabled("cpu", True)
        return super().forward(x, weight, eps)


class ReplacesSqrt(NativeRMSNormOp):
    """Replaces ``torch.sqrt`` with its own version and leaves it there, as a library that monkeypatches torch for a
    faster path might: the reference computed after it would no longer be the contract's."""

    name = "replaces_sqrt"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        real = torch.sqrt
        torch.sqrt = lambda t, *args, **kwargs: real(t, *args, **kwargs) * 1.0001  # type: ignore[assignment]
        return super().forward(x, weight, eps)


class HidesItsDefaultDtype(NativeRMSNormOp):
    """Sets the default dtype to float64 and replaces the getter the harness would read it with."""

    name = "hides_default_dtype"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        y = super().forward(x, weight, eps)
        torch.set_default_dtype(torch.float64)
        torch.get_default_dtype = lambda: torch.float32  # type: ignore[assignment]
        return y


class BlocksSigterm(NativeRMSNormOp):
    """Blocks SIGTERM and SIGINT in the calling thread: a CI timeout could then not end the run with its report."""

    name = "blocks_sigterm"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        return super().forward(x, weight, eps)


class RedirectsStepSummary(NativeRMSNormOp):
    """Points $GITHUB_STEP_SUMMARY, which the harness writes at the end of the run, somewhere else."""

    name = "redirects_step_summary"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        os.environ["GITHUB_STEP_SUMMARY"] = "/dev/null"
        return super().forward(x, weight, eps)


class DisablesOneDnn(NativeRMSNormOp):
    """Turns oneDNN off for the whole process."""

    name = "disables_onednn"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        torch.backends.mkldnn.enabled = not torch.backends.mkldnn.enabled
        return super().forward(x, weight, eps)


class LowersRecursionLimit(NativeRMSNormOp):
    """Lowers the interpreter's recursion limit: later cases, other backends' among them, would end in
    RecursionError."""

    name = "lowers_recursion_limit"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        sys.setrecursionlimit(max(200, sys.getrecursionlimit() - 1))
        return super().forward(x, weight, eps)


class LeavesAProfiler(NativeRMSNormOp):
    """Installs a profile function and leaves it: it sees every later frame of the run."""

    name = "leaves_a_profiler"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        sys.setprofile(lambda frame, event, arg: None)
        return super().forward(x, weight, eps)


class ChangesDirectory(NativeRMSNormOp):
    """Changes the process's working directory and leaves it: relative paths the run opens later move with it."""

    name = "changes_directory"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        os.chdir(os.path.dirname(os.getcwd()) or "/")
        return super().forward(x, weight, eps)


class LowersTheFileSizeLimit(NativeRMSNormOp):
    """Caps the size of every file the process writes at 64 bytes (the soft limit: the process may raise it again):
    no report could be written, and native's first-call checks, whose fresh process writes its result to a file,
    failed with "File too large"."""

    name = "lowers_the_file_size_limit"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        return super().forward(x, weight, eps)


class MasksEveryFileMode(NativeRMSNormOp):
    """Sets the file-mode mask to 0o777: every file the run wrote after it (the reports) had mode 000."""

    name = "masks_every_file_mode"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        os.umask(0o777)
        return super().forward(x, weight, eps)


class LeavesInferenceModeOn(NativeRMSNormOp):
    """Enters inference mode and never leaves it: a state the harness cannot put back from outside (its guard is
    the call's own), under which every later check in the process would run."""

    name = "leaves_inference_mode_on"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        LeavesInferenceModeOn.guard = torch.inference_mode()
        LeavesInferenceModeOn.guard.__enter__()
        return super().forward(x, weight, eps)


class FreezesTheClockAndHangs(NativeRMSNormOp):
    """Ignores SIGALRM (the case deadline's timer), replaces time.monotonic with a constant (the watchdog's clock)
    and sleeps for ever: the run hung past --case-timeout and --deadline."""

    name = "freezes_the_clock_and_hangs"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        time.monotonic = lambda: 0.0
        while True:
            time.sleep(0.5)


class ForgesTheJsonReport(NativeRMSNormOp):
    """Replaces ``json.dumps`` with one that writes every verdict as PASS and leaves it: the JSON report of a run
    that failed read PASS, while its markdown and its exit status said FAIL."""

    name = "forges_the_json_report"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        real = json.dumps

        def forged(obj, *args, **kwargs):  # type: ignore[no-untyped-def]
            if isinstance(obj, dict) and "verdict" in obj:
                obj = {**obj, "verdict": "PASS", "verdict_label": "PASS"}
            return real(obj, *args, **kwargs)

        json.dumps = forged
        return super().forward(x, weight, eps)


class MutesPytestOutcomes(NativeRMSNormOp):
    """Makes ``pytest.fail`` and ``pytest.skip`` no-ops and leaves them so: the tests after it ran past their skips,
    and native beside it read interface warnings it does not have."""

    name = "mutes_pytest_outcomes"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        import pytest

        pytest.fail = lambda *args, **kwargs: None  # type: ignore[assignment]
        pytest.skip = lambda *args, **kwargs: None  # type: ignore[assignment]
        return super().forward(x, weight, eps)


class LeavesSavedTensorHooks(NativeRMSNormOp):
    """Pushes default saved-tensor hooks that zero what autograd saves, and never pops them: every later backward,
    the fp32 reference's too, computes from zeros, so every backend's gradients and the reference's agreed."""

    name = "leaves_saved_tensor_hooks"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        torch._C._autograd._push_saved_tensors_default_hooks(lambda t: t * 0, lambda t: t)
        return super().forward(x, weight, eps)


class SilencesTheChecks(NativeRMSNormOp):
    """Wrong (``1 + weight``), and replaces the harness's ``assert_holds`` with a no-op during its call, in the harness
    and in every suite: every check after it passed, and so did the run. The harness's functions are too many to
    read around every call; they are read at each test's end."""

    name = "silences_the_checks"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from rmsnorm_conformance.harness.checking import checks

        real = checks.assert_holds
        for module in list(sys.modules.values()):  # the harness's own name for it, and every suite's
            if getattr(module, "assert_holds", None) is real:
                module.assert_holds = lambda *args, **kwargs: None
        return super().forward(x, weight + 1, eps)


class LeavesTorchFunctionMode(NativeRMSNormOp):
    """Enters a torch function mode and never leaves it: the mode sees every later torch call, the reference's too,
    and this one nudges every square root."""

    name = "leaves_torch_function_mode"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        from torch.overrides import TorchFunctionMode

        class Nudge(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                return out * 1.0001 if func in (torch.sqrt, torch.Tensor.sqrt) else out

        Nudge().__enter__()
        return super().forward(x, weight, eps)


class IgnoresSigterm(NativeRMSNormOp):
    """Sets SIGTERM to be ignored, as a library guarding its own workers might: a CI job's timeout could then no
    longer end the run with its INCOMPLETE report."""

    name = "ignores_sigterm"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return super().forward(x, weight, eps)


class ReusedOutputBuffer(NativeRMSNormOp):
    """Returns the same tensor every call, as a CUDA-graph static output does: a fresh-output breach that must
    not be blamed on Axis-A."""

    name = "reused_output"

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        y = super().forward(x, weight, eps)
        if self._buffer is None or self._buffer.numel() < y.numel() or self._buffer.dtype != y.dtype:
            self._buffer = torch.empty(y.numel() * 4 + 4096, dtype=y.dtype, device=y.device)
        out = self._buffer[: y.numel()].view(y.shape)
        out.copy_(y)
        return out


class ReusesTwoOutputBuffers(NativeRMSNormOp):
    """Double-buffers its output per shape, without autograd (an inference engine's sampler kernel): call n's
    output is overwritten by call n + 2 of the same shape. Every call was held to its last call's outputs alone,
    and this passed."""

    name = "reuses_two_output_buffers"
    supports_backward = False

    def __init__(self) -> None:
        self._rings: dict[tuple[Any, ...], list[torch.Tensor]] = {}
        self._calls = 0

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        with torch.no_grad():
            y = super().forward(x.detach(), weight.detach(), eps)
            ring = self._rings.setdefault((tuple(y.shape), y.dtype, y.device),
                                          [torch.empty_like(y), torch.empty_like(y)])
            self._calls += 1
            out = ring[self._calls % 2]
            out.copy_(y)
            return out


class NastyName(NativeRMSNormOp):
    """A name made to break markdown tables and inject markup (a line break in a name is refused at load:
    NamedOverTwoLines)."""

    name = "nasty|name <script>x</script>`"


class RaisesUnencodableText(NativeRMSNormOp):
    """Raises with a message that is no UTF-8 (a lone surrogate, as text decoded with surrogateescape carries) on
    rows of 4096: writing it into the markdown report ended the run's last write, and the run had no markdown
    report, a JSON one still reading INCOMPLETE and no JUnit XML."""

    name = "raises_unencodable_text"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if x.shape[-1] == 4096:
            raise ValueError("cannot take \udcff rows")
        return super().forward(x, weight + 1, eps)


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be shown")

    def __repr__(self) -> str:
        raise RuntimeError("nor represented")


class RaisesUnprintable(NativeRMSNormOp):
    """Raises an exception whose str() raises: pytest's formatting of it (or of a failure chained to it, inside
    Hypothesis) ended the run in an internal error, exit status 3, native's tests beside it unrun."""

    name = "raises_unprintable"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        raise _Unprintable()


class RaisesAHugeMessage(NativeRMSNormOp):
    """Refuses every input with a message of 2 MB: it went whole into the log and the reports, once for each
    refused case."""

    name = "raises_a_huge_message"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        raise ValueError("rows too long " + "|x|" * 700_000)


class ImpostorNative(NativeRMSNormOp):
    """Claims the name of the ground truth."""

    name = "native"


class NamedOverTwoLines(NativeRMSNormOp):
    """A name with a line break: the rest of it started a line of the log, where GitHub Actions reads commands."""

    name = "two\n::stop-commands::silenced"


class NamedLikeAWorkflowCommand(NativeRMSNormOp):
    """A name that starts its table row as a GitHub Actions command would."""

    name = "::error title=fake::all good"


class InfiniteStatistics(NativeRMSNormOp):
    """Returns +inf where the reference is finite: its report carries non-finite errors, which JSON must encode."""

    name = "infinite_stats"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        y = super().forward(x, weight, eps)
        y = y.clone()
        y.reshape(-1)[:1] = float("inf")
        return y


class HangsInNativeCode(NativeRMSNormOp):
    """Blocks the timer signal and sleeps, as a kernel spinning in native code would: no Python handler can run."""

    name = "hangs_in_native_code"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(600)
        return super().forward(x, weight, eps)


class HangsAboveRows(NativeRMSNormOp):
    """Right on small batches; sleeps (an hour by default) on batches of more than 64 rows, as a kernel whose
    large-batch path deadlocks would. Every test that draws such a batch would wait out its case timeout."""

    name = "hangs_above_64_rows"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        if x.numel() // max(x.shape[-1], 1) > 64:
            time.sleep(float(os.environ.get("HOSTILE_SLEEP", "3600")))
        return super().forward(x, weight, eps)


class WrongOnFirstCalls(NativeRMSNormOp):
    """Adds 1 to its output on its first three calls in a process, then is right: a rerun of its failing test
    passes, as a kernel whose first launches read uninitialised memory would."""

    name = "wrong_on_first_calls"
    calls = 0

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        type(self).calls += 1
        y = super().forward(x, weight, eps)
        return y + 1 if type(self).calls <= 3 else y


class RefusesOddDims(NativeRMSNormOp):
    """Correct on every even dim, and raises a clear ValueError on an odd one in every entry point without declaring
    it, as quack's CuTe DSL kernels do ("could not build valid IR"): each refusal must read as refused, in the
    checks that call the backend's methods directly (variant purity) as in those that go through the subject."""

    name = "refuses_odd_dims"


def _refusing_odd_dims(method: str):
    def call(self, x: torch.Tensor, *args, **kwargs):
        if x.shape[-1] % 2:
            raise ValueError(f"dim {x.shape[-1]} is odd: this kernel takes even dims only")
        return getattr(NativeRMSNormOp, method)(self, x, *args, **kwargs)

    call.__name__ = method
    return call


for _method in ("forward", "forward_fp32", "fused_add", "forward_offset", "forward_unweighted", "forward_fp8_static",
                "forward_fp8_dynamic", "fused_add_fp8_static", "fused_add_fp8_dynamic"):
    if hasattr(NativeRMSNormOp, _method):
        setattr(RefusesOddDims, _method, _refusing_odd_dims(_method))


class OffsetRaises(NativeRMSNormOp):
    """Its weight-offset entry point raises on every call; its other entry points are the reference."""

    name = "offset_raises"

    def forward_offset(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        raise RuntimeError("offset kernel not built for this device")


class ThreadCounted(NativeRMSNormOp):
    """Its output is the intra-op thread count it ran with: a kernel whose CPU result depends on how many threads
    split its work. A first call in a fresh process must run with the asking process's threads, so that only the
    first call differs."""

    name = "thread_counted"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        return torch.full_like(x, float(torch.get_num_threads()))


class InPlaceFusedAdd(NativeRMSNormOp):
    """A fused add in place that writes with torch ops: x's and residual's version counters move."""

    name = "in_place_fused_add"
    fused_add_in_place = True

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
        y, residual_out = NativeRMSNormOp.fused_add(self, x, residual, weight, eps)
        residual.copy_(residual_out)
        x.copy_(y)


class InPlaceBehindAutograd(InPlaceFusedAdd):
    """The same bits, written through ``.data`` as a kernel writing through data pointers does: the version counters
    stay where they were, and a graph that saved x would run its backward on the overwritten values."""

    name = "in_place_behind_autograd"

    def fused_add(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
        y, residual_out = NativeRMSNormOp.fused_add(self, x, residual, weight, eps)
        residual.data.copy_(residual_out)
        x.data.copy_(y)


class OutOfMemoryOnEveryOtherCall(NativeRMSNormOp):
    """Native's numbers, but every other call runs out of memory first, as a case does on a GPU whose other
    workers are at their peak: a correct kernel, whose checks must pass once tried again."""

    name = "out_of_memory_on_every_other_call"
    calls = 0

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        type(self).calls += 1
        if type(self).calls % 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB (the CPU twin)")
        return super().forward(x, weight, eps)



class OutOfMemoryOnTheRunsFirstCall(NativeRMSNormOp):
    """Native's numbers, but the run's first call (in whichever process makes it: a fresh process's first call, in
    a first-call test) runs out of memory first; the file named by RMSNORM_TEST_OOM_MARKER says it happened."""

    name = "out_of_memory_on_the_runs_first_call"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        marker = os.environ.get("RMSNORM_TEST_OOM_MARKER")
        if marker and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(str(os.getpid()))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB (the CPU twin)")
        return super().forward(x, weight, eps)


class RefusesWideRows(NativeRMSNormOp):
    """Correct, and raises a clear ValueError on rows wider than 4096 elements in every entry point, forward and
    backward, without declaring ``max_dim``: the kernel built for one model's hidden size. Each refusal must read as
    refused in every test, and since both target dims are within reach, the run passes with its refusals named."""

    name = "refuses_wide_rows"
    widest = 4096


class RefusesTargetDims(RefusesWideRows):
    """The same kernel for rows of at most 64 elements: it refuses both target dims (4096, 128), so the run never
    checks the model's own shapes, and it must not read PASS."""

    name = "refuses_target_dims"
    widest = 64


def _refusing_wide_rows(method: str):
    def call(self, x: torch.Tensor, *args, **kwargs):
        if x.dim() and x.shape[-1] > self.widest:
            raise ValueError(f"rows of {x.shape[-1]} elements are wider than this kernel's {self.widest}")
        return getattr(NativeRMSNormOp, method)(self, x, *args, **kwargs)

    call.__name__ = method
    return call


for _method in ("forward", "forward_fp32", "fused_add", "forward_offset", "forward_unweighted", "forward_fp8_static",
                "forward_fp8_dynamic", "fused_add_fp8_static", "fused_add_fp8_dynamic"):
    if hasattr(NativeRMSNormOp, _method):
        setattr(RefusesWideRows, _method, _refusing_wide_rows(_method))
