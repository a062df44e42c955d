"""Streaming data in windows: a time slice (DLRM), or a block of files (images, Flux latents).

Three pieces, each usable alone:

- `TimeWindows`: cuts a timeline into fixed windows (default one day) and gives, per window,
  the samples whose timestamp falls in it, so training can walk the windows in strict time
  order: train window T, evaluate on T+1 or on a fixed hold-out window.
- `window_batches`: a window's samples, shuffled (seeded by run seed and window), cut into
  global batches, and this rank's contiguous share of each.
- `StreamingLoader`: iterates one window after another through ONE DataLoader whose workers
  persist across windows, and prepares the next window (its index and its first batch) on a
  background thread while the current one trains, so the turnover costs a few ms.

`eval_step_interval` is the MLPerf eval grid: every ceil(pct * train_samples / GBS) steps.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import signal
import threading
import time
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np
import torch

DAY_SECONDS = 86_400


class BatchSource(Protocol):
    def get_batch(self, indices: np.ndarray) -> Any: ...


class TimeWindows:
    """Fixed-length windows over sample timestamps: window w is [origin + w*len, origin + (w+1)*len).

    Samples are grouped by window once (a stable sort of window ids), so looking a window up
    costs its own size, not a scan of the whole timeline.
    """

    def __init__(self, timestamps: np.ndarray, *, window_seconds: int = DAY_SECONDS, origin: int = 0) -> None:
        if window_seconds <= 0:
            raise ValueError(f"window_seconds must be positive, got {window_seconds}")
        self.timestamps = np.asarray(timestamps, dtype=np.int64)
        if self.timestamps.size and int(self.timestamps.min()) < origin:
            raise ValueError(f"timestamp {int(self.timestamps.min())} precedes the window origin {origin}")
        self.window_seconds = window_seconds
        self.origin = origin
        window_of = (self.timestamps - origin) // window_seconds
        self._order = np.argsort(window_of, kind="stable")
        grouped = window_of[self._order]
        self._keys, self._starts, self._counts = np.unique(grouped, return_index=True, return_counts=True)

    def keys(self) -> list[int]:
        """Windows that hold at least one sample, in time order."""
        return [int(k) for k in self._keys]

    def sizes(self) -> dict[int, int]:
        return {int(k): int(c) for k, c in zip(self._keys, self._counts)}

    def start_time(self, key: int) -> int:
        return self.origin + key * self.window_seconds

    def indices(self, key: int) -> np.ndarray:
        """Sample indices in window `key`, in time order (ties by index); empty if none."""
        pos = int(np.searchsorted(self._keys, key))
        if pos == len(self._keys) or int(self._keys[pos]) != key:
            return np.zeros(0, dtype=np.int64)
        chosen = self._order[self._starts[pos] : self._starts[pos] + self._counts[pos]]
        return chosen[np.argsort(self.timestamps[chosen], kind="stable")]


def rank_share(global_batch: np.ndarray, *, rank: int, world_size: int) -> np.ndarray:
    """Rank `rank`'s contiguous share of a global batch; every rank gets the same number of samples.

    Contiguous shares keep a 1-rank run and an N-rank run on the same samples per step (the
    union of the shares is the global batch, in order), which the equivalence tests rely on.
    """
    n = len(global_batch)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    if n % world_size:
        raise ValueError(f"a global batch of {n} samples does not split evenly over {world_size} ranks")
    share = n // world_size
    return np.asarray(global_batch[rank * share : (rank + 1) * share])


def window_batches(
    indices: np.ndarray, *, global_batch_size: int, rank: int, world_size: int, seed: int, key: int, shuffle: bool = True
) -> list[np.ndarray]:
    """This rank's share of each global batch of a window (a tail short of a batch is dropped)."""
    if global_batch_size % world_size:
        raise ValueError(f"global batch {global_batch_size} does not split evenly over {world_size} ranks")
    order = np.asarray(indices, dtype=np.int64)
    if shuffle:
        order = order[np.random.default_rng([seed, key]).permutation(order.size)]
    num = order.size // global_batch_size
    return [
        rank_share(order[b * global_batch_size : (b + 1) * global_batch_size], rank=rank, world_size=world_size)
        for b in range(num)
    ]


def eval_step_interval(*, eval_every_data_pct: float, train_samples: int, global_batch_size: int) -> int:
    """Steps between evaluations, as the MLPerf rules compute it."""
    if not 0 < eval_every_data_pct <= 1:
        raise ValueError(f"eval_every_data_pct must be in (0, 1], got {eval_every_data_pct}")
    return max(1, math.ceil(eval_every_data_pct * train_samples / global_batch_size))


class _SwitchableBatches(torch.utils.data.Sampler):
    """Yields the index arrays of whatever window is current (set before each pass)."""

    def __init__(self) -> None:
        self.batches: Sequence[np.ndarray] = ()

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(list(self.batches))

    def __len__(self) -> int:
        return len(self.batches)


class _ByIndexArray(torch.utils.data.Dataset):
    def __init__(self, source: BatchSource) -> None:
        self.source = source

    def __getitem__(self, indices: np.ndarray) -> Any:
        return self.source.get_batch(indices)

    def __len__(self) -> int:  # the sampler decides; DataLoader only needs the method
        return 0


def _identity(batch: Any) -> Any:
    return batch


# What `timeout`, `scancel` and Slurm's time limit send to every process of the job.
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def _ignore_preemption_signals(worker_id: int) -> None:
    """Loader workers leave a preemption notice to the trainer, which saves and stops them.

    Left to torch's own handler, a worker dies of a SIGTERM sent to the whole process group and
    the trainer's next batch raises "DataLoader worker is killed by signal" before it can save.
    The signals are blocked while workers start (see `_preemption_signals_blocked`), so one that
    arrives before this runs stays pending and is dropped here.
    """
    for signum in PREEMPTION_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, PREEMPTION_SIGNALS)


@contextlib.contextmanager
def _preemption_signals_blocked() -> Iterator[None]:
    """Forked workers inherit the blocked mask; the trainer gets a pending notice on unblocking."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, PREEMPTION_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@dataclasses.dataclass
class _Prepared:
    key: int
    skip: int
    batches: list[np.ndarray]
    first: Any  # the first batch to train (after `skip`), or None for an empty window
    built_s: float


class StreamingLoader:
    """Window after window of batches, with the next window prepared in the background.

    `build_window(key)` returns this rank's index batches of window `key` (e.g. via
    `window_batches`); `iterate(key, skip=, next_key=)` yields `(batch_idx, batch)` for the
    window's batches from `skip` on and starts preparing `next_key` as soon as it begins.
    The first batch of a prepared window comes straight from the background thread; the rest
    come from the persistent workers. `boundary_waits` records, per window, how long the loop
    waited for that window's first batch.
    """

    def __init__(
        self,
        *,
        source: BatchSource,
        build_window: Callable[[int], list[np.ndarray]],
        num_workers: int,
        prefetch_factor: int = 2,
        seed: int = 0,
    ) -> None:
        self.source = source
        self.build_window = build_window
        self._sampler = _SwitchableBatches()
        # a private generator: creating an iterator must not consume the global torch RNG, or a
        # resumed run would draw different dropout masks than an uninterrupted one
        self._loader = torch.utils.data.DataLoader(
            _ByIndexArray(source),
            sampler=self._sampler,
            batch_size=None,
            collate_fn=_identity,
            num_workers=num_workers,
            persistent_workers=num_workers > 0,
            prefetch_factor=prefetch_factor if num_workers > 0 else None,
            generator=torch.Generator().manual_seed(seed),
            worker_init_fn=_ignore_preemption_signals if num_workers > 0 else None,
        )
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="window-prefetch")
        self._pending: dict[tuple[int, int], concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self.boundary_waits: dict[int, float] = {}
        self.window_sizes: dict[int, int] = {}

    def _prepare(self, key: int, skip: int) -> _Prepared:
        t0 = time.perf_counter()
        batches = self.build_window(key)
        first = self.source.get_batch(batches[skip]) if skip < len(batches) else None
        return _Prepared(key=key, skip=skip, batches=batches, first=first, built_s=time.perf_counter() - t0)

    def prefetch(self, key: int, *, skip: int = 0) -> None:
        with self._lock:
            if (key, skip) not in self._pending:
                self._pending[(key, skip)] = self._pool.submit(self._prepare, key, skip)

    def _take(self, key: int, skip: int) -> _Prepared:
        self.prefetch(key, skip=skip)
        with self._lock:
            future = self._pending.pop((key, skip))
            stale = [k for k in self._pending if k[0] <= key]
            for k in stale:  # a resume or a skipped window leaves nothing behind
                self._pending.pop(k).cancel()
        return future.result()

    def iterate(self, key: int, *, skip: int = 0, next_key: int | None = None) -> Iterator[tuple[int, Any]]:
        t0 = time.perf_counter()
        prepared = self._take(key, skip)
        self.window_sizes[key] = len(prepared.batches)
        if prepared.first is None:
            self.boundary_waits[key] = time.perf_counter() - t0
            if next_key is not None:
                self.prefetch(next_key)
            return
        rest = prepared.batches[skip + 1 :]
        self._sampler.batches = rest
        with _preemption_signals_blocked():  # the first pass starts the persistent workers
            workers = iter(self._loader) if rest else iter(())
        self.boundary_waits[key] = time.perf_counter() - t0
        if next_key is not None:
            self.prefetch(next_key)
        yield skip, prepared.first
        for offset, batch in enumerate(workers, start=skip + 1):
            yield offset, batch

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
