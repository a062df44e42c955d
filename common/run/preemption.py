"""Graceful stop on SIGTERM / SIGUSR1 (Slurm preemption, time limits, scancel); README.md beside this file.

- The handler only sets a flag; the loop polls it at a step boundary, saves and exits 0.
- `agree_at_step_boundary`: one collective for both per-step decisions, stop (any rank) and
  rank 0's clock, so every rank stops and checkpoints at the same step.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any, Optional, Sequence

from common.distributed.collectives import any_rank_true, max_over_ranks, world_rank
from common.run import early_signals

DEFAULT_PREEMPTION_SIGNALS: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR1)


class PreemptionHandler:
    """Turns preemption signals into a flag polled at step boundaries.

    ``chain_previous=True`` also calls a previously installed Python handler after the
    flag is set (off by default: handlers such as torchelastic's raise, which would
    interrupt the step instead of letting it finish and save).
    """

    def __init__(
        self,
        signals: Sequence[int] = DEFAULT_PREEMPTION_SIGNALS,
        *,
        chain_previous: bool = False,
    ) -> None:
        if not signals:
            raise ValueError("PreemptionHandler needs at least one signal")
        self._signals = tuple(signals)
        self._chain_previous = chain_previous
        self._previous: dict[int, Any] = {}
        self._received: Optional[int] = None

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    @property
    def received_signal(self) -> Optional[int]:
        """The first signal that arrived on this rank, or None."""
        return self._received

    def install(self) -> "PreemptionHandler":
        if self.installed:
            raise RuntimeError("PreemptionHandler.install() called twice without uninstall()")
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("signal handlers can only be installed from the main thread")
        for signum in self._signals:
            previous = signal.signal(signum, self._on_signal)
            # a signal the entry point noted before this handler existed counts as received here
            self._previous[signum] = signal.SIG_DFL if early_signals.is_early_handler(previous) else previous
        if self._received is None and early_signals.received() in self._signals:
            self._received = early_signals.received()
        return self

    def uninstall(self) -> None:
        """Put back the handlers that were there before ``install()``."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}

    def __enter__(self) -> "PreemptionHandler":
        return self.install()

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()

    def _on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        # Runs between two bytecodes of the main thread: record and return, nothing more.
        if self._received is None:
            self._received = signum
        previous = self._previous.get(signum)
        if self._chain_previous and callable(previous):
            previous(signum, frame)

    def stop_requested(self, *, distributed: bool = True) -> bool:
        """Whether any rank (``distributed=True``, a collective) or this rank saw a signal."""
        local = self._received is not None
        return any_rank_true(local) if distributed else local


@dataclass(frozen=True)
class BoundaryAgreement:
    """What all ranks agreed at a step boundary."""

    stop: bool
    seconds_since_last_save: float


def agree_at_step_boundary(
    *, stop_requested_locally: bool, seconds_since_last_save: float
) -> BoundaryAgreement:
    """One all_reduce for both per-step decisions: stop (any rank) and rank 0's clock.

    Non-zero ranks contribute -inf for the clock so the MAX is rank 0's value.
    """
    clock = seconds_since_last_save if world_rank() == 0 else float("-inf")
    stop_flag, rank0_clock = max_over_ranks([1.0 if stop_requested_locally else 0.0, clock])
    return BoundaryAgreement(stop=stop_flag > 0.5, seconds_since_last_save=rank0_clock)
