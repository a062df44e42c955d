"""common.data.byte_ranges: per-file unions of byte ranges, checked against sets of bytes."""

from __future__ import annotations

import numpy as np
import pytest

from common.data.byte_ranges import ByteRanges

FILES = ("/d/a", "/d/b", "/d/c")


def _random_ranges(rng: np.random.Generator, count: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """`count` calls' worth of ranges: short ones in a small space so that many overlap, touch or are empty."""
    calls = []
    for _ in range(count):
        n = int(rng.integers(0, 6))
        starts = rng.integers(0, 400, n)
        calls.append((FILES[int(rng.integers(len(FILES)))], starts, starts + rng.integers(0, 30, n)))
    return calls


def _bytes(calls) -> set[tuple[str, int]]:
    """The brute force: every (file, byte) the ranges cover."""
    return {(path, b) for path, starts, ends in calls for s, e in zip(starts, ends) for b in range(s, e)}


def _covered(ranges: ByteRanges) -> set[tuple[str, int]]:
    return {(path, b) for path, pairs in ranges.per_file().items() for s, e in pairs for b in range(s, e)}


def _filled(calls, compact_every: int) -> ByteRanges:
    ranges = ByteRanges(compact_every=compact_every)
    for path, starts, ends in calls:
        ranges.add(path, starts, ends)
    return ranges


def _assert_disjoint_and_apart(ranges: ByteRanges) -> None:
    for pairs in ranges.per_file().values():
        assert (pairs[:, 1] > pairs[:, 0]).all()  # no empty interval
        assert (pairs[1:, 0] > pairs[:-1, 1]).all()  # sorted, and touching intervals were merged


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("compact_every", [1, 7, 1 << 20])  # compacting often, now and then, once at the end
def test_union_matches_a_set_of_bytes(seed, compact_every):
    calls = _random_ranges(np.random.default_rng(seed), 300)
    ranges = _filled(calls, compact_every)
    truth = _bytes(calls)
    assert ranges.unique_bytes() == len(truth)
    assert _covered(ranges) == truth
    _assert_disjoint_and_apart(ranges)


@pytest.mark.parametrize("seed", range(3))
def test_union_of_two_and_the_json_round_trip(seed):
    rng = np.random.default_rng(100 + seed)
    first, second = _random_ranges(rng, 150), _random_ranges(rng, 150)
    a, b = _filled(first, 5), _filled(second, 5)
    both = a.union(b)
    assert _covered(both) == _bytes(first) | _bytes(second)
    assert _covered(a) == _bytes(first) and _covered(b) == _bytes(second)  # union leaves both alone
    shipped = ByteRanges.from_json(both.to_json())
    assert shipped.unique_bytes() == both.unique_bytes() and _covered(shipped) == _covered(both)


def test_touching_ranges_merge_and_empty_ones_leave_no_file():
    ranges = ByteRanges()
    ranges.add("/x", [0, 10, 30], [10, 20, 40])  # [0,10) and [10,20) touch
    ranges.add("/y", [5, 7], [5, 7])  # empty: nothing read
    ranges.add("/x", 25, 30)  # a scalar range that closes the gap to [30, 40)
    per_file = ranges.per_file()
    assert list(per_file) == ["/x"]
    assert per_file["/x"].tolist() == [[0, 20], [25, 40]]
    assert ranges.unique_bytes() == 35 and ranges.intervals() == 2


def test_files_far_apart_in_size_do_not_merge_into_each_other():
    ranges = ByteRanges()
    ranges.add("/big", [0], [1 << 40])
    ranges.add("/small", [0, 1 << 40], [1, (1 << 40) + 1])  # starts where /big ends, in another file
    assert ranges.per_file()["/small"].tolist() == [[0, 1], [1 << 40, (1 << 40) + 1]]
    assert ranges.unique_bytes() == (1 << 40) + 2


def test_a_pool_read_over_and_over_stays_a_few_intervals():
    rng = np.random.default_rng(7)
    ranges = ByteRanges(compact_every=1000)
    ranges.add("/pool", [0, 99_600], [400, 100_000])  # both ends of the pool, so that it is covered whole
    largest_buffer = 0
    for _ in range(200):  # 200 batches of 500 overlapping windows over a 100 kB pool
        starts = rng.integers(0, 100_000 - 400, 500)
        ranges.add("/pool", starts, starts + 400)
        largest_buffer = max(largest_buffer, ranges._pending_count)  # private: the memory bound under test
    assert largest_buffer <= 1000
    assert ranges.intervals() == 1 and ranges.unique_bytes() == 100_000
