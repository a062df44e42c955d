"""common.data.reads: what a batch source reads, recorded per batch."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from common.data.reads import (
    SIZE_BUCKETS,
    forget_access_history,
    is_recording,
    note_array_reads,
    note_arrays_reads,
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


def _read_by_read(reads: list[tuple[str, int, int]], last_end: dict[str, int]) -> dict[str, int]:
    """The model: every read judged on its own, in order, against where the last read of its file ended."""
    out = {"first_touch": 0, "sequential": 0, "random": 0, "read_count": len(reads),
           "read_bytes": sum(size for _, _, size in reads)}
    for path, offset, size in reads:
        previous = last_end.get(path)
        out["first_touch" if previous is None else "sequential" if offset == previous else "random"] += 1
        last_end[path] = offset + size
    return out


@pytest.mark.parametrize("seed", range(6))
def test_a_batch_of_mixed_calls_counts_as_if_every_read_were_judged_on_its_own(tmp_path, seed):
    """Single reads, arrays with one size or one each, and array rows through note_arrays_reads, over
    three files and two batches (the second continues where the first left each file)."""
    rng = np.random.default_rng(seed)
    files = [str(tmp_path / name) for name in "abc"]
    columns = []
    for name in ("u", "v"):
        np.save(tmp_path / f"{name}.npy", np.zeros((64, 3), dtype=np.int16))
        columns.append(np.load(tmp_path / f"{name}.npy", mmap_mode="r"))
    forget_access_history()
    last_end: dict[str, int] = {}
    for _ in range(2):
        expected: list[tuple[str, int, int]] = []
        with recording() as out:
            for _ in range(12):
                kind, path = int(rng.integers(4)), files[int(rng.integers(3))]
                if kind == 0:
                    offset, size = int(rng.integers(0, 50)), int(rng.integers(0, 20))
                    note_reads(path, offset, size)
                    expected.append((path, offset, size))
                elif kind == 1:
                    offsets, size = rng.integers(0, 50, int(rng.integers(1, 6))), int(rng.integers(1, 20))
                    offsets[1:][rng.random(offsets.size - 1) < 0.5] = -1  # some continue the read before
                    for i in range(1, offsets.size):
                        offsets[i] = offsets[i - 1] + size if offsets[i] < 0 else offsets[i]
                    note_reads(path, offsets, size)
                    expected += [(path, int(o), size) for o in offsets]
                elif kind == 2:
                    offsets, sizes = rng.integers(0, 50, 4), rng.integers(0, 9, 4)
                    note_reads(path, offsets, sizes)
                    expected += [(path, int(o), int(z)) for o, z in zip(offsets, sizes)]
                else:
                    rows, counts = rng.integers(0, 60, 3), rng.integers(0, 4, 3)
                    note_arrays_reads(columns, rows, counts)
                    for column in columns:
                        row_bytes = column.itemsize * 3
                        expected += [(str(column.filename), int(column.offset) + int(r) * row_bytes, int(c) * row_bytes)
                                     for r, c in zip(rows, counts) if c > 0]
        r = out[0]
        model = _read_by_read(expected, last_end)
        assert {k: getattr(r, k) for k in model} == model
        sizes = np.array([z for *_, z in expected], dtype=np.int64)
        assert r.read_sizes.tolist() == size_histogram(sizes).tolist()
        truth = {(p, b) for p, o, z in expected for b in range(o, o + z)}
        assert r.ranges.unique_bytes() == len(truth)


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
