"""common.data.reads: what a batch source reads, recorded per batch."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from common.data.reads import (
    SIZE_BUCKETS,
    is_recording,
    note_array_reads,
    note_reads,
    note_records,
    recording,
    size_histogram,
    thread_busy_ns,
)

from tests.environment import unavailable


def test_nothing_is_recorded_outside_a_recording_block():
    note_reads("/x", [0], [10])  # must not raise nor leak into the next block
    assert not is_recording()
    with recording() as out:
        assert is_recording()
    assert out[0].read_count == 0 and out[0].records.size == 0


def test_sequential_random_and_first_touch_are_judged_per_file(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with recording() as out:
        note_reads(a, [0, 100, 200], 100)  # first touch, then 2 sequential
        note_reads(b, [50], [10])  # first touch of another file
        note_reads(a, [300, 0], [5, 5])  # continues a (sequential), then jumps back (random)
        note_records([150, 165])
    r = out[0]
    assert (r.first_touch, r.sequential, r.random) == (2, 3, 1)
    assert r.read_count == 6 and r.read_bytes == 300 + 10 + 10
    assert r.new_files == [a, b]
    assert r.records.tolist() == [150, 165]
    assert r.read_sizes.sum() == 6 and r.read_sizes[6] == 3  # 100 B reads fall in [64, 128)


def test_memory_mapped_rows_are_read_at_their_file_offsets(tmp_path):
    path = tmp_path / "col.npy"
    np.save(path, np.arange(1000, dtype=np.uint32).reshape(250, 4))
    mapped = np.load(path, mmap_mode="r")
    with recording() as out:
        note_array_reads(mapped, [10, 11, 3], [1, 2, 0])  # a zero-length window reads nothing
        note_array_reads(np.zeros(4), [0], [1])  # in memory: not storage
    r = out[0]
    assert r.read_count == 2 and r.read_bytes == 16 + 32
    assert r.sequential == 1  # row 11 starts where row 10 ended
    header = mapped.offset
    assert header == 128 and r.new_files == [str(path)]


def test_threads_record_separately():
    seen = {}

    def other():
        with recording() as out:
            note_records([7])
        seen["other"] = out[0].records.tolist()

    with recording() as mine:
        note_records([1, 2])
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert mine[0].records.tolist() == [1, 2] and seen["other"] == [7]


def test_size_histogram_buckets_powers_of_two():
    h = size_histogram(np.array([0, 1, 2, 3, 4, 1023, 1024, 2**60]))
    assert h.shape == (SIZE_BUCKETS,)
    assert h[0] == 2 and h[1] == 2 and h[2] == 1 and h[9] == 1 and h[10] == 1 and h[SIZE_BUCKETS - 1] == 1


def test_a_batch_ships_its_ranges_merged_per_file(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with recording() as out:
        note_reads(a, [0, 100, 50], [100, 100, 10])  # the third lies inside the first
        note_reads(b, [50], [10])
        note_reads(a, [300, 200], [5, 0])  # a zero-length read touches nothing
    ranges = out[0].ranges.per_file()
    assert {path: pairs.tolist() for path, pairs in ranges.items()} == {a: [[0, 200], [300, 305]], b: [[50, 60]]}
    assert out[0].ranges.unique_bytes() == 215 and out[0].read_bytes == 225  # 10 B were read twice


def test_a_batch_build_tells_the_time_it_slept_from_the_time_it_worked():
    if thread_busy_ns() is None:
        unavailable("no /proc/thread-self/schedstat here")
    with recording() as out:
        time.sleep(0.3)  # as a loader blocked on storage
        spin_until = time.perf_counter() + 0.15
        while time.perf_counter() < spin_until:  # as a loader decoding
            pass
    batch = out[0]
    assert batch.build_s == pytest.approx(0.45, abs=0.1)
    # the spin counts (run or waiting for a CPU), the sleep does not
    assert 0.15 <= batch.busy_s + 0.01 and batch.busy_s <= 0.3, (batch.build_s, batch.busy_s)
