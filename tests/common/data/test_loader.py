import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from common.data.batch_arena import PRIVATE_TORCH_APIS_ENV
from common.data.index import eval_step_interval, window_batches
from common.data.reads import note_array_reads
from common.data.loader import StreamingLoader


def test_window_batches_split_global_batches_across_ranks():
    idx = np.arange(100, 150)
    ranks = [window_batches(idx, global_batch_size=8, rank=r, world_size=2, seed=3, key=1) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 6  # 50 // 8; the tail of 2 is dropped
    together = np.concatenate([np.concatenate([a, b]) for a, b in zip(*ranks)])
    assert len(set(together.tolist())) == 48 and set(together.tolist()) <= set(idx.tolist())
    again = window_batches(idx, global_batch_size=8, rank=0, world_size=2, seed=3, key=1)
    assert all(np.array_equal(a, b) for a, b in zip(again, ranks[0]))  # deterministic
    other = window_batches(idx, global_batch_size=8, rank=0, world_size=2, seed=3, key=2)
    assert not all(np.array_equal(a, b) for a, b in zip(other, ranks[0]))  # reshuffled per window
    with pytest.raises(ValueError, match="does not split evenly"):
        window_batches(idx, global_batch_size=9, rank=0, world_size=2, seed=0, key=0)


def test_eval_interval_is_the_mlperf_grid():
    assert eval_step_interval(eval_every_data_pct=0.001, train_samples=2_290_835_423, global_batch_size=8192) == 280
    assert eval_step_interval(eval_every_data_pct=0.5, train_samples=1000, global_batch_size=64) == 8  # ceil(7.8)
    with pytest.raises(ValueError):
        eval_step_interval(eval_every_data_pct=0.0, train_samples=10, global_batch_size=1)


class _SlowSource:
    """get_batch takes a while, like decoding a real batch; records which thread built what."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls: list[tuple[str, tuple[int, ...]]] = []

    def get_batch(self, indices):
        time.sleep(self.delay)
        self.calls.append((threading.current_thread().name, tuple(int(i) for i in indices)))
        return np.asarray(indices)


def _build(key: int) -> list[np.ndarray]:
    return [np.arange(key * 100 + 10 * b, key * 100 + 10 * b + 3) for b in range(4)]


@pytest.mark.parametrize("workers", [0, 1])
def test_loader_yields_every_batch_in_order_and_resumes_mid_window(workers):
    loader = StreamingLoader(source=_SlowSource(0.0), build_window=_build, num_workers=workers)
    got = [(i, b.tolist()) for i, b in loader.iterate(2, next_key=3)]
    assert got == [(i, _build(2)[i].tolist()) for i in range(4)]
    resumed = [(i, b.tolist()) for i, b in loader.iterate(3, skip=2)]
    assert resumed == [(2, _build(3)[2].tolist()), (3, _build(3)[3].tolist())]
    loader.close()


def test_next_window_is_prepared_while_the_current_one_trains():
    source = _SlowSource(0.2)
    loader = StreamingLoader(source=source, build_window=_build, num_workers=0)
    loader.prefetch(0)
    for _ in loader.iterate(0, next_key=1):
        time.sleep(0.3)  # "training" a batch; the next window's first batch is built meanwhile
    t0 = time.perf_counter()
    first = next(loader.iterate(1))
    waited = time.perf_counter() - t0
    assert first[0] == 0 and first[1].tolist() == _build(1)[0].tolist()
    assert waited < 0.1, waited  # the 0.2 s build happened in the background
    assert loader.boundary_waits[1] < 0.1
    assert any(name.startswith("window-prefetch") and idx == tuple(_build(1)[0]) for name, idx in source.calls)
    loader.close()


def test_persistent_workers_survive_window_turnover():
    loader = StreamingLoader(source=_SlowSource(0.0), build_window=_build, num_workers=1)
    list(loader.iterate(0))
    pids_before = [w.pid for w in loader._loader._iterator._workers]
    list(loader.iterate(1))
    assert [w.pid for w in loader._loader._iterator._workers] == pids_before
    loader.close()


class _PidSource:
    """Batches that name the process that built them."""

    def get_batch(self, indices):
        return np.asarray(indices), os.getpid()


def _children() -> set[int]:
    return {p.pid for p in multiprocessing.active_children()}  # also reaps those that exited


@pytest.mark.parametrize("private", ["1", "0"], ids=["private_apis_on", "private_apis_off"])
def test_close_stops_the_workers_even_mid_window(private, monkeypatch):
    monkeypatch.setenv(PRIVATE_TORCH_APIS_ENV, private)
    loader = StreamingLoader(source=_PidSource(), build_window=_build, num_workers=2)
    assert [(i, b.tolist()) for i, (b, _) in loader.iterate(0, next_key=1)] == [
        (i, _build(0)[i].tolist()) for i in range(4)
    ]
    window = loader.iterate(1)
    started = [next(window) for _ in range(3)]  # left suspended, as a trainer stopping early leaves it
    assert [(i, b.tolist()) for i, (b, _) in started] == [(i, _build(1)[i].tolist()) for i in range(3)]
    workers = {pid for _, (_, pid) in started} - {os.getpid()}
    assert workers and workers <= _children()
    loader.close()
    assert not workers & _children()
    loader.close()  # a second close is harmless on either path


class _NotingSource:
    """Each sample is a 10-byte read of its own file, noted for the load profile."""

    def get_batch(self, indices):
        from common.data.reads import note_reads

        for i in indices:
            note_reads(f"/data/{int(i)}", [0], [10])
        return np.asarray(indices)


def test_a_next_windows_first_batch_read_ahead_and_never_trained_is_reported():
    windows = {0: [np.array([0, 1]), np.array([2, 3])], 1: [np.array([4, 5]), np.array([6, 7])]}
    loader = StreamingLoader(source=_NotingSource(), build_window=lambda key: windows[key], num_workers=0)
    delivered = []
    loader.reads_sink = delivered.append
    try:
        trained = [int(batch[0]) for _, batch in loader.iterate(0, next_key=1)]
        deadline = time.monotonic() + 10
        while not loader.undelivered_reads() and time.monotonic() < deadline:
            time.sleep(0.01)
        ahead = loader.undelivered_reads()
    finally:
        loader.close()
    assert trained == [0, 2] and sum(r.read_count for r in delivered) == 4
    # window 1's first batch was read while window 0 trained; nothing handed it out
    assert [(r.read_count, r.read_bytes, sorted(r.new_files)) for r in ahead] == [(2, 20, ["/data/4", "/data/5"])]


def test_a_window_index_read_from_storage_is_named_by_the_windows_first_batch(tmp_path):
    np.save(tmp_path / "order.npy", np.arange(96, dtype=np.int64))  # 4 windows of 24 samples, in an index file
    order = np.load(tmp_path / "order.npy", mmap_mode="r")  # as a prepared dataset opens it

    def window(key: int) -> list[np.ndarray]:
        note_array_reads(order, 24 * key, 24)  # the loader reads the window's slice of the index
        return np.array_split(np.array(order[24 * key : 24 * (key + 1)]), 3)

    loader = StreamingLoader(source=_NotingSource(), build_window=window, num_workers=0)
    delivered = []
    loader.reads_sink = delivered.append
    try:
        list(loader.iterate(1))
    finally:
        loader.close()
    first, *rest = delivered
    # the window's index is among the files the first batch opened; its bytes are not a sample's
    assert [f for f in first.new_files if f.endswith("order.npy")] == [str(tmp_path / "order.npy")]
    assert first.read_count == 8 and first.read_bytes == 8 * 10 and len(first.new_files) == 8 + 1
    assert len(rest) == 2 and all(r.read_count == 8 and len(r.new_files) == 8 for r in rest)


_KILLED_TRAINER = """
import os, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from common.data.loader import StreamingLoader

class Source:
    def get_batch(self, indices):  # 4 MB a batch: the workers' result pipes fill while the trainer sleeps
        return np.zeros(1 << 19), os.getpid()

loader = StreamingLoader(source=Source(), build_window=lambda key: [np.arange(3)] * 50, num_workers=2)
window = loader.iterate(0)
pids = {pid for _, (_, pid) in (next(window) for _ in range(4))} - {os.getpid()}
print(" ".join(map(str, sorted(pids))), flush=True)
time.sleep(60)
"""


def test_workers_die_with_a_trainer_killed_outright(tmp_path):
    """SIGKILL of the trainer alone (not its group), as the OOM killer or `kill -9 PID` does: its
    loader workers must not live on holding its shared memory and files. Workers with batches still
    to hand over are the ones torch's own check misses: they see the trainer gone, stop, and then
    wait forever to finish writing into a pipe nobody reads."""
    script = tmp_path / "trainer.py"
    script.write_text(_KILLED_TRAINER)
    repo = str(Path(__file__).resolve().parents[3])
    trainer = subprocess.Popen([sys.executable, str(script), repo], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in trainer.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(pid) for pid in workers)
        trainer.kill()
        trainer.wait()
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in workers), workers
    finally:
        trainer.kill()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class _WhoReads:
    """Notes, per batch it builds, the thread and process that read it."""

    def __init__(self) -> None:
        self.reads: list[tuple[int, int, tuple[int, ...]]] = []

    def get_batch(self, indices):
        self.reads.append((threading.get_ident(), os.getpid(), tuple(int(i) for i in indices)))
        return np.asarray(indices)


def test_without_workers_or_window_prefetch_the_caller_reads_each_batch_when_it_asks():
    """FLUX.1's reference loader: no worker, no prefetch, nothing read ahead while a step computes."""
    source = _WhoReads()
    loader = StreamingLoader(source=source, build_window=_build, num_workers=0, prefetch_next_window=False)
    caller = (threading.get_ident(), os.getpid())
    threads_before = {t.ident for t in threading.enumerate()}
    asked = 0
    try:
        for key, next_key in ((0, 1), (1, 2)):
            window = loader.iterate(key, next_key=next_key)
            assert len(source.reads) == asked  # a window handed out reads nothing yet
            for batch_idx, batch in window:
                asked += 1
                # exactly the batches asked for, nothing of the next batch or window
                assert len(source.reads) == asked and source.reads[-1][2] == tuple(_build(key)[batch_idx])
                time.sleep(0.02)  # a step: a background reader would read meanwhile
                assert len(source.reads) == asked
        loader.prefetch(3)  # asked for explicitly: still nothing ahead
        time.sleep(0.05)
        assert len(source.reads) == asked == 8
        assert {(thread, pid) for thread, pid, _ in source.reads} == {caller}
        assert {t.ident for t in threading.enumerate()} <= threads_before  # no reader thread was started
        assert not _children()  # and no process
        assert [(i, b.tolist()) for i, b in loader.iterate(2, skip=3)] == [(3, _build(2)[3].tolist())]
    finally:
        loader.close()


def test_a_negative_worker_count_is_refused():
    with pytest.raises(ValueError, match="num_workers and prefetch_factor must be >= 0, got -1 and 2"):
        StreamingLoader(source=_WhoReads(), build_window=_build, num_workers=-1)
