"""Streaming data in windows: a time slice (DLRM), or a block of files (images, Flux latents).

`StreamingLoader` iterates one window after another through ONE DataLoader whose workers persist
across windows, and prepares the next window (its index and its first batch) on a background
thread while the current one trains, so the turnover costs a few ms. With
`prefetch_next_window=False` and `num_workers=0` nothing is read ahead and nothing reads but the
caller: each batch is read in the calling thread when the loop asks for it (FLUX.1's reference,
whose torchtitan loader reads in the training thread). Which samples a window's
batches hold is index maths (`common.data.index`); epochs of files are `common.data.epochs` (DLRM-HSTU's
time windows are its own, recommendation_v4/data/windows.py).

`StreamingLoader.close` stops the persistent workers with the DataLoader iterator's private
`_shutdown_workers`: at once, whatever else still refers to the iterator. With
`MLPERF_LOADER_PRIVATE_TORCH_APIS=0` in the environment (read by
`common.data.batch_arena.private_torch_apis`, which switches the batch arena's private API off
too) it keeps to public behaviour: it closes the windows it handed out that are still open and
drops the DataLoader, and the iterator, freed, shuts its workers down itself. Only a window's
frame kept alive elsewhere (in an exception's traceback) holds them up longer, until it goes;
torch's exit hook stops them at the latest.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import dataclasses
import io
import os
import pickle
import signal
import threading
import time
import weakref
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np
import torch

from common.data.batch_arena import SlabRegistry, batch_slab, forget_this_thread, private_torch_apis
from common.data.reads import BatchReads, recording, with_files_of



class BatchSource(Protocol):
    def get_batch(self, indices: np.ndarray) -> Any: ...


class _SwitchableBatches(torch.utils.data.Sampler):
    """Yields the index arrays of whatever window is current (set before each pass)."""

    def __init__(self) -> None:
        self.batches: Sequence[np.ndarray] = ()

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(list(self.batches))

    def __len__(self) -> int:
        return len(self.batches)


@dataclasses.dataclass
class _Delivery:
    """A batch and the slab its tensors live in (common.data.batch_arena), as a worker sends them.

    Pickled for the trainer (`__reduce__`), every tensor that is a view of the slab travels as
    its place in the slab, and the slab itself once: one shared segment and one passed file
    descriptor per batch, where torch's own reductions pass one per tensor (RetinaNet's boxes,
    labels and ids made that ~27 per batch of 8 images).
    """

    batch: Any
    slab: torch.Tensor | None
    serial: int = 0  # which batch of its slab this is (common.data.batch_arena.SlabRegistry)
    reads: BatchReads | None = None  # what building it read (storage.load_profile)

    def __reduce__(self):
        if self.slab is None or not self.slab.is_shared():
            return (_Delivery, (self.batch, self.slab, self.serial, self.reads))
        buffer = io.BytesIO()
        pickler = _SlabPickler(buffer, self.slab)
        pickler.dump(self.batch)
        pickler.forget()
        return (_rebuild_delivery, (buffer.getvalue(), self.slab, self.serial, self.reads))


class _SlabPickler(ForkingPickler):
    """Pickles tensors on the slab as (byte offset, shape, stride, dtype); anything else as torch does."""

    def __init__(self, buffer: io.BytesIO, slab: torch.Tensor) -> None:
        super().__init__(buffer, pickle.HIGHEST_PROTOCOL)
        self._slab_storage = slab.untyped_storage()
        self._start = self._slab_storage.data_ptr()

    def forget(self) -> None:
        # a pickler with persistent_id can outlive its use in a reference cycle; it must not keep
        # the slab referenced, or the slab never counts as released
        self._slab_storage = None

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is not torch.Tensor or obj.requires_grad:
            return None
        storage = obj.untyped_storage()
        if storage.data_ptr() != self._start:
            return None
        return ("slab", obj.storage_offset() * obj.element_size(), tuple(obj.shape), obj.stride(), str(obj.dtype))


class _SlabUnpickler(pickle.Unpickler):
    def __init__(self, payload: bytes, slab: torch.Tensor) -> None:
        super().__init__(io.BytesIO(payload))
        self._storage = slab.untyped_storage()

    def forget(self) -> None:
        self._storage = None  # see _SlabPickler.forget

    def persistent_load(self, pid: Any) -> torch.Tensor:
        _, offset, shape, stride, dtype_name = pid
        dtype = getattr(torch, dtype_name.removeprefix("torch."))
        view = torch.empty(0, dtype=dtype)
        return view.set_(self._storage, offset // view.element_size(), shape, stride)


def _rebuild_delivery(payload: bytes, slab: torch.Tensor, serial: int, reads: BatchReads | None = None) -> _Delivery:
    unpickler = _SlabUnpickler(payload, slab)
    batch = unpickler.load()
    unpickler.forget()
    return _Delivery(batch=batch, slab=slab, serial=serial, reads=reads)


def _build(source: BatchSource, indices: np.ndarray, *, record: bool = False) -> _Delivery:
    if not record:
        with batch_slab() as built:
            batch = source.get_batch(indices)
        return _Delivery(batch=batch, slab=built.slab, serial=built.serial)
    with recording() as reads, batch_slab() as built:
        batch = source.get_batch(indices)
    return _Delivery(batch=batch, slab=built.slab, serial=built.serial, reads=reads[0])


class _ByIndexArray(torch.utils.data.Dataset):
    def __init__(self, source: BatchSource) -> None:
        self.source = source
        self.record = False  # what a worker builds carries its reads (storage.load_profile)

    def __getitem__(self, indices: np.ndarray) -> _Delivery:
        return _build(self.source, indices, record=self.record)

    def __len__(self) -> int:  # the sampler decides; DataLoader only needs the method
        return 0


def _identity(batch: Any) -> Any:
    return batch


# What `timeout`, `scancel` and Slurm's time limit send to every process of the job.
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


# The trainer that is starting loader workers from its main thread (read in the forked worker): a
# worker's death signal fires when the *thread* that forked it ends, so only then is it the process.
_FORKING_TRAINER: int | None = None
_PR_SET_PDEATHSIG = 1


def _die_with_the_trainer() -> None:
    """A worker whose trainer is killed outright (SIGKILL, the OOM killer) gets SIGKILL too, rather
    than living on with its shared memory and open files (and its cgroup: see storage.host)."""
    trainer = _FORKING_TRAINER
    if trainer is None:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return  # not Linux: workers notice a dead trainer on their next queue operation
    except (OSError, AttributeError):
        return
    if os.getppid() != trainer:  # the trainer was gone before the line above took effect
        os._exit(0)


def _start_worker(worker_id: int) -> None:
    _ignore_preemption_signals(worker_id)
    _die_with_the_trainer()
    forget_this_thread()


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
def _forking_trainer() -> Iterator[None]:
    """Marks workers forked inside as ones that die with this process (main thread only)."""
    global _FORKING_TRAINER
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _FORKING_TRAINER = os.getpid()
    try:
        yield
    finally:
        _FORKING_TRAINER = None


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
    first_reads: BatchReads | None = None


class StreamingLoader:
    """Window after window of batches, with the next window prepared in the background.

    `build_window(key)` returns this rank's index batches of window `key` (e.g. via
    `window_batches`); `iterate(key, skip=, next_key=)` yields `(batch_idx, batch)` for the
    window's batches from `skip` on and starts preparing `next_key` as soon as it begins.
    The first batch of a prepared window comes straight from the background thread; the rest
    come from the persistent workers. `prefetch_next_window=False` prepares nothing ahead: a
    window's index and first batch are built in the calling thread when its first batch is
    asked for (`next_key` and `prefetch` are then no-ops). `boundary_waits` records, per window, how long the loop
    waited for that window's first batch. `reads_sink`, when set before the first `iterate`
    (workers take their copy of the dataset then), receives the `BatchReads` of every batch it
    yields (the training loader's load profile); without one, nothing is recorded.
    """

    def __init__(
        self,
        *,
        source: BatchSource,
        build_window: Callable[[int], list[np.ndarray]],
        num_workers: int,
        prefetch_factor: int = 2,
        seed: int = 0,
        prefetch_next_window: bool = True,
    ) -> None:
        if num_workers < 0 or prefetch_factor < 0:
            raise ValueError(f"num_workers and prefetch_factor must be >= 0, got {num_workers} and {prefetch_factor}")
        self.source = source
        self.build_window = build_window
        self.num_workers, self.prefetch_factor = num_workers, prefetch_factor if num_workers > 0 else 0
        self.prefetch_next_window = prefetch_next_window
        self._reads_sink: Callable[[BatchReads], None] | None = None
        self._sampler = _SwitchableBatches()
        # a private generator: creating an iterator must not consume the global torch RNG, or a
        # resumed run would draw different dropout masks than an uninterrupted one
        self._by_index = _ByIndexArray(source)
        self._loader = torch.utils.data.DataLoader(
            self._by_index,
            sampler=self._sampler,
            batch_size=None,
            collate_fn=_identity,
            num_workers=num_workers,
            persistent_workers=num_workers > 0,
            prefetch_factor=prefetch_factor if num_workers > 0 else None,
            generator=torch.Generator().manual_seed(seed),
            worker_init_fn=_start_worker if num_workers > 0 else None,
        )
        # the windows handed out and not finished: each may hold the workers' iterator (see close)
        self._windows: weakref.WeakSet = weakref.WeakSet()
        self._slabs = SlabRegistry()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="window-prefetch")
        self._pending: dict[tuple[int, int], concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self.boundary_waits: dict[int, float] = {}
        self.window_sizes: dict[int, int] = {}

    @property
    def reads_sink(self) -> Callable[[BatchReads], None] | None:
        return self._reads_sink

    @reads_sink.setter
    def reads_sink(self, sink: Callable[[BatchReads], None] | None) -> None:
        self._reads_sink = sink
        self._by_index.record = sink is not None

    def _prepare(self, key: int, skip: int) -> _Prepared:
        t0 = time.perf_counter()
        record = self._by_index.record
        with recording() if record else contextlib.nullcontext([None]) as index_reads:
            batches = self.build_window(key)  # may read the window's index from storage (time windows)
        first = _build(self.source, batches[skip], record=record) if skip < len(batches) else None
        first_reads = None if first is None else first.reads
        if first_reads is not None and index_reads[0] is not None:
            first_reads = with_files_of(index_reads[0], first_reads)  # the window's first batch names its index
        return _Prepared(key=key, skip=skip, batches=batches, first=None if first is None else first.batch,
                         built_s=time.perf_counter() - t0, first_reads=first_reads)

    def prefetch(self, key: int, *, skip: int = 0) -> None:
        if not self.prefetch_next_window:
            return  # the caller builds it when it asks for it (_take)
        with self._lock:
            if (key, skip) not in self._pending:
                self._pending[(key, skip)] = self._pool.submit(self._prepare, key, skip)

    def _take(self, key: int, skip: int) -> _Prepared:
        if not self.prefetch_next_window:
            return self._prepare(key, skip)
        self.prefetch(key, skip=skip)
        with self._lock:
            future = self._pending.pop((key, skip))
            stale = [k for k in self._pending if k[0] <= key]
            for k in stale:  # a resume or a skipped window leaves nothing behind
                self._pending.pop(k).cancel()
        return future.result()

    def iterate(self, key: int, *, skip: int = 0, next_key: int | None = None) -> Iterator[tuple[int, Any]]:
        window = self._iterate(key, skip=skip, next_key=next_key)
        self._windows.add(window)
        return window

    def _iterate(self, key: int, *, skip: int, next_key: int | None) -> Iterator[tuple[int, Any]]:
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
        with _preemption_signals_blocked(), _forking_trainer():  # the first pass starts the persistent workers
            workers = iter(self._loader) if rest else iter(())
        self.boundary_waits[key] = time.perf_counter() - t0
        if next_key is not None:
            self.prefetch(next_key)
        if self.reads_sink is not None and prepared.first_reads is not None:
            self.reads_sink(prepared.first_reads)
        yield skip, prepared.first
        for offset, delivery in enumerate(workers, start=skip + 1):
            shared = delivery.slab is not None and delivery.slab.is_shared()
            self._slabs.receive(delivery.slab if shared else None, delivery.serial)
            if self.reads_sink is not None and delivery.reads is not None:
                self.reads_sink(delivery.reads)
            batch = delivery.batch
            del delivery  # the batch's views alone keep its slab in use from here on
            yield offset, batch

    def undelivered_reads(self) -> list[BatchReads]:
        """The reads behind windows' first batches prepared ahead and never handed out (the load
        profile counts them: the storage served them). Batches a worker built and did not deliver
        are not known here."""
        with self._lock:
            done = [f for f in self._pending.values() if f.done() and not f.cancelled() and f.exception() is None]
        return [f.result().first_reads for f in done if f.result().first_reads is not None]

    def close(self) -> None:
        """Stops the background preparation and the persistent workers (they exit on the loader's
        own stop message; they ignore SIGTERM, so nothing else would stop them before the trainer)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if not private_torch_apis():
            self._close_publicly()
            return
        iterator = getattr(self._loader, "_iterator", None)
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        self._loader._iterator = None

    def _close_publicly(self) -> None:
        # The workers' iterator shuts them down when it is freed. The DataLoader holds it, and so
        # does every window suspended mid-way: both references go. Nothing iterates after close
        # (the background pool is shut down), so the DataLoader is not replaced.
        for window in list(self._windows):
            window.close()
        self._loader = None


def stream_batches(source: BatchSource, index_batches: Sequence[np.ndarray], *, num_workers: int,
                   prefetch_factor: int = 2) -> Iterator[Any]:
    """The batches of `index_batches` through the trainers' loader (one window): for benchmarks and
    tests that want exactly what a training loop receives."""
    batches = list(index_batches)
    loader = StreamingLoader(source=source, build_window=lambda key: batches, num_workers=num_workers,
                             prefetch_factor=prefetch_factor)
    try:
        for _, batch in loader.iterate(0):
            yield batch
    finally:
        loader.close()
