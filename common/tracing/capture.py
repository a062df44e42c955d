"""Capture windows of torch.profiler traces at configured global steps, one file per rank.

`TraceConfig.steps` names the global steps (1-based, as metrics.jsonl counts them) at which a
window starts. For a start step S the profiler warms up during the `warmup_steps` steps before S
(Kineto is set up, nothing is kept), records steps S .. S+active_steps-1 and, when the window
ends, writes this rank's trace to `<run_dir>/traces/step<S>_rank<r>.json.gz` (Chrome/Perfetto
JSON, gzipped). Each recorded step is one `ProfilerStep#<step>` span, numbered by the global step
and covering `step_begins(step)` .. `step_ends(step)`, the name torch.profiler and Holistic Trace
Analysis use for iterations.

Tracing never stops training: an exception while starting, advancing, stopping or exporting a
window becomes one `TraceExportWarning` line naming the step, the rank and the file, and the
run goes on without that window. With no steps configured (or a rank not in `ranks`) the tracer
holds no profiler object and each call returns at once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import gin

from common.config.checks import is_int, require, require_int

if TYPE_CHECKING:
    import torch

TRACES_DIR = "traces"


class TraceExportWarning(UserWarning):
    """A trace window could not be captured or written; training went on without it."""


def trace_file(run_dir: str | Path, step: int, rank: int) -> Path:
    """Where rank `rank` writes the window that starts at global step `step`."""
    return Path(run_dir) / TRACES_DIR / f"step{step}_rank{rank}.json.gz"


def et_file(run_dir: str | Path, step: int, rank: int) -> Path:
    """Where rank `rank` writes the execution trace of the window that starts at global step `step`."""
    return Path(run_dir) / TRACES_DIR / f"step{step}_rank{rank}.et.json"


def _complete_execution_trace(path: Path) -> bool:
    """Whether the observer finished the file: it ends with the trace's '"finish_ts": N}'."""
    with open(path, "rb") as handle:
        handle.seek(max(handle.seek(0, os.SEEK_END) - 64, 0))
        tail = handle.read()
    return tail.rstrip().endswith(b"}") and b'"finish_ts"' in tail


def _int_tuple(value: object) -> tuple[int, ...] | None:
    """The value as a tuple of ints (gin hands over lists), or None when it is not one."""
    if not isinstance(value, (list, tuple)) or not all(is_int(v) for v in value):
        return None
    return tuple(value)


@gin.configurable(module="common")
@dataclasses.dataclass(frozen=True)
class TraceConfig:
    """torch.profiler capture windows, bound in gin as `common.TraceConfig.*`; `steps = []` is off."""

    steps: tuple[int, ...] = ()  # global steps (1-based) at which a capture window starts; () = off
    active_steps: int = 1  # steps recorded per window
    warmup_steps: int = 1  # profiler warm-up steps before each window (not recorded)
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    execution_trace: bool = False  # also a PyTorch execution trace per window (Chakra's input), see et_file
    ranks: tuple[int, ...] = ()  # ranks that trace; () = every rank

    def __post_init__(self) -> None:
        require_int(self, "active_steps", minimum=1)
        require_int(self, "warmup_steps", minimum=0)
        for name in ("record_shapes", "profile_memory", "with_stack", "execution_trace"):
            require(self, name, isinstance(getattr(self, name), bool), "True or False")
        steps = _int_tuple(self.steps)
        require(self, "steps", steps is not None and all(s >= 1 for s in steps), "a list of ints >= 1")
        ranks = _int_tuple(self.ranks)
        require(self, "ranks", ranks is not None and all(r >= 0 for r in ranks), "a list of ints >= 0")
        object.__setattr__(self, "steps", tuple(sorted(steps)))
        object.__setattr__(self, "ranks", tuple(sorted(set(ranks))))
        span = self.active_steps + self.warmup_steps
        overlapping = any(later - earlier < span for earlier, later in zip(self.steps, self.steps[1:]))
        require(
            self,
            "steps",
            not overlapping,
            f"start steps at least active_steps + warmup_steps = {span} apart (windows must not overlap)",
        )

    @property
    def enabled(self) -> bool:
        return bool(self.steps)

    def traces_rank(self, rank: int) -> bool:
        return self.enabled and (not self.ranks or rank in self.ranks)


def _warn(message: str) -> None:
    """One warning line; printed instead when warnings are errors, since tracing must not raise."""
    line = " ".join(message.split())
    try:
        warnings.warn(line, TraceExportWarning, stacklevel=3)
    except Warning:
        print(f"TraceExportWarning: {line}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class _Window:
    start: int  # the first recorded step (the file's name)
    first: int  # the first step the profiler runs (warm-up starts here)
    last: int  # the last recorded step
    profiler: Any  # torch.profiler.profile
    et_partial: Path | None = None  # where the execution trace observer writes, renamed when the window ends
    recorded: list[int] = dataclasses.field(default_factory=list)
    span: Any = None  # the open ProfilerStep#<step> record_function


class StepTracer:
    """Runs the capture windows of a TraceConfig around the training loop's steps.

        tracer = StepTracer(config, run_dir=run_dir, rank=rank, device=device)
        for each step (1-based):  tracer.step_begins(step); train; tracer.step_ends(step)
        tracer.close()            # also on preemption or an error: exports an open window

    Steps must come in increasing order; a window whose start step is already behind the first
    step seen (a resumed run) is skipped, and one whose warm-up began before it is shortened.
    """

    def __init__(self, config: TraceConfig, *, run_dir: Path, rank: int, device: torch.device) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.rank = rank
        import torch  # here, not at the top: `python -m common.tracing merge` never needs torch

        self.device = torch.device(device)
        self._pending: list[int] = list(config.steps) if config.traces_rank(rank) else []
        self._window: _Window | None = None
        self.written: list[Path] = []  # the files this tracer exported
        if config.execution_trace and self._pending:
            self._remove_stale_execution_traces()

    @property
    def active(self) -> bool:
        """True while a window's profiler runs (warming up or recording)."""
        return self._window is not None

    # ------------------------------------------------------------------ the loop's calls
    def step_begins(self, step: int) -> None:
        if self._window is None and not self._pending:
            return
        window = self._window
        if window is not None and step > window.last:  # step_ends of the last step never came
            self._finish(window)
            window = None
        if window is None:
            window = self._maybe_open(step)
            if window is None:
                return
        elif not self._guard(window, lambda: self._advance(window, step)):
            return
        if window.start <= step <= window.last:
            self._guard(window, lambda: self._enter_span(window, step))

    def step_ends(self, step: int) -> None:
        window = self._window
        if window is None:
            return
        if window.span is not None:
            self._guard(window, lambda: self._exit_span(window, step))
        if self._window is window and step >= window.last:
            self._finish(window)

    def close(self) -> None:
        """Stops an open window (exporting the steps it recorded) and cancels the rest."""
        self._pending = []
        if self._window is not None:
            self._finish(self._window)

    def __enter__(self) -> "StepTracer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ windows
    def _maybe_open(self, step: int) -> _Window | None:
        while self._pending and self._pending[0] < step:  # started in the past (a resumed run)
            self._pending.pop(0)
        if not self._pending or step < self._pending[0] - self.config.warmup_steps:
            return None
        start = self._pending.pop(0)
        last = start + self.config.active_steps - 1
        window = _Window(start=start, first=step, last=last, profiler=None)
        try:
            window.profiler = self._profiler(window, warmup=start - step, active=self.config.active_steps)
            self._window = window
            window.profiler.start()
        except Exception as error:  # noqa: BLE001 - tracing must never stop training
            self._fail(window, "not captured", error)
            return None
        return window

    def _profiler(self, window: _Window, *, warmup: int, active: int) -> Any:
        from torch.profiler import ExecutionTraceObserver, ProfilerAction, ProfilerActivity, profile

        def schedule(k: int) -> ProfilerAction:  # k: steps since the profiler started
            if k < warmup:
                return ProfilerAction.WARMUP
            if k < warmup + active - 1:
                return ProfilerAction.RECORD
            if k == warmup + active - 1:
                return ProfilerAction.RECORD_AND_SAVE
            return ProfilerAction.NONE

        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":  # ROCm builds report their GPUs as CUDA too
            activities.append(ProfilerActivity.CUDA)
        observer = None
        if self.config.execution_trace:
            final = et_file(self.run_dir, window.start, self.rank)
            final.parent.mkdir(parents=True, exist_ok=True)
            window.et_partial = final.with_name(f".{final.name}.partial")
            observer = ExecutionTraceObserver().register_callback(str(window.et_partial))
        prof = profile(
            activities=activities,
            schedule=schedule,
            record_shapes=self.config.record_shapes,
            profile_memory=self.config.profile_memory,
            with_stack=self.config.with_stack,
            execution_trace_observer=observer,
        )
        # our own ProfilerStep#<global step> spans replace torch's #0, #1, ... (which would also
        # run from one step's end to the next step's end)
        prof.record_steps = False
        return prof

    def _advance(self, window: _Window, step: int) -> None:
        prof = window.profiler
        while prof.step_num < step - window.first:
            prof.step()

    def _enter_span(self, window: _Window, step: int) -> None:
        from torch.autograd.profiler import record_function

        span = record_function(f"ProfilerStep#{step}")
        span.__enter__()
        window.span = span
        window.recorded.append(step)

    def _exit_span(self, window: _Window, step: int) -> None:
        span, window.span = window.span, None
        span.__exit__(None, None, None)

    def _finish(self, window: _Window) -> None:
        """Stops the window's profiler and writes its file when it recorded anything."""
        self._window = None
        path = trace_file(self.run_dir, window.start, self.rank)
        prof = window.profiler
        try:
            if window.span is not None:
                self._exit_span(window, window.recorded[-1])
            if window.recorded:
                prof.add_metadata_json("mlperf_trace", json.dumps(self._metadata(window)))
            prof.__exit__(None, None, None)  # stop(), and the cleanup the `with` form does
        except Exception as error:  # noqa: BLE001
            self._fail(window, "not written", error, stopped=True)
            return
        if not window.recorded:  # closed during the warm-up: nothing to write
            if window.et_partial is not None:
                window.et_partial.unlink(missing_ok=True)
            return
        self._keep_execution_trace(window)
        partial = path.with_name(f".{path.name[: -len('.json.gz')]}.partial.json.gz")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(partial))
            os.replace(partial, path)
        except Exception as error:  # noqa: BLE001
            self._fail(window, "not written", error, stopped=True)
            try:
                partial.unlink(missing_ok=True)
            except OSError:
                pass
            return
        self.written.append(path)

    def _remove_stale_execution_traces(self) -> None:
        """The observer writes its trace as it goes: a rank killed (SIGKILL) inside a window leaves a
        partial file behind, which its relaunch removes rather than keep a trace no tool can read."""
        for stale in (self.run_dir / TRACES_DIR).glob(f".step*_rank{self.rank}.et.json.partial"):
            try:
                stale.unlink()
            except OSError:
                pass

    def _keep_execution_trace(self, window: _Window) -> None:
        if window.et_partial is None:
            return
        final = et_file(self.run_dir, window.start, self.rank)
        try:
            if not _complete_execution_trace(window.et_partial):
                # the observer reports no write error: a full disk shows as a file cut short
                raise OSError(f"{window.et_partial.name} ends before its closing 'finish_ts' (disk full?)")
            os.replace(window.et_partial, final)
            self.written.append(final)
        except OSError as error:
            self._fail(window, "not written", error, stopped=True, path=final)

    def _metadata(self, window: _Window) -> dict[str, object]:
        return {
            "rank": self.rank,
            "start_step": window.start,
            "recorded_steps": list(window.recorded),
            "active_steps": self.config.active_steps,
            "warmup_steps": window.start - window.first,
        }

    def _guard(self, window: _Window, action: Callable[[], None]) -> bool:
        """Runs one profiler action of an open window; a failure drops the window (one warning)."""
        try:
            action()
            return True
        except Exception as error:  # noqa: BLE001
            self._fail(window, "not captured", error)
            return False

    def _fail(self, window: _Window, outcome: str, error: BaseException, *, stopped: bool = False,
              path: Path | None = None) -> None:
        path = path or trace_file(self.run_dir, window.start, self.rank)
        _warn(f"trace of step {window.start} on rank {self.rank} {outcome} ({path}): {type(error).__name__}: {error}")
        if self._window is window:
            self._window = None
        if not stopped and window.profiler is not None:
            try:  # leave no profiler running behind a failed window
                if window.span is not None:
                    window.span.__exit__(None, None, None)
                window.profiler.__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                pass
        if window.et_partial is not None:  # the observer writes it when the profiler stops
            window.et_partial.unlink(missing_ok=True)

