"""The window index: built in memory or streamed into files, the same windows in the same order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.data.time_windows import TimeWindows, index_is_complete, write_index


@settings(max_examples=40, deadline=None)
@given(
    timestamps=st.lists(st.integers(0, 10 * 86_400), min_size=0, max_size=300),
    window=st.sampled_from([3_600, 86_400, 7 * 86_400]),
    chunk=st.integers(1, 64),
)
def test_the_streamed_index_equals_the_in_memory_one(tmp_path_factory, timestamps, window, chunk):
    ts = np.array(timestamps, dtype=np.int64)
    directory = tmp_path_factory.mktemp("index") / "w"
    write_index(directory, timestamps=ts, window_seconds=window, chunk=chunk)
    streamed, in_memory = TimeWindows.open(directory), TimeWindows(ts, window_seconds=window)
    assert streamed.sizes() == in_memory.sizes() == {int(k): int(c) for k, c in zip(*np.unique(ts // window, return_counts=True))}
    for key in in_memory.keys():
        got = streamed.indices(key)
        assert np.array_equal(got, in_memory.indices(key))
        assert np.all(np.diff(ts[got]) >= 0)  # in time order
        same_time = np.diff(ts[got]) == 0
        assert np.all(np.diff(got)[same_time] > 0)  # ties by index
    assert streamed.indices(10_000).size == 0


def test_an_index_is_complete_only_for_its_own_input(tmp_path):
    ts = np.arange(100, dtype=np.int64) * 1000
    assert not index_is_complete(tmp_path / "w", count=100, window_seconds=86_400)
    write_index(tmp_path / "w", timestamps=ts, window_seconds=86_400, source="train-a")
    assert index_is_complete(tmp_path / "w", count=100, window_seconds=86_400, source="train-a")
    assert not index_is_complete(tmp_path / "w", count=101, window_seconds=86_400, source="train-a")
    assert not index_is_complete(tmp_path / "w", count=100, window_seconds=3_600, source="train-a")
    assert not index_is_complete(tmp_path / "w", count=100, window_seconds=86_400, source="train-b")
    (tmp_path / "w" / "index.json").write_text("{broken")
    assert not index_is_complete(tmp_path / "w", count=100, window_seconds=86_400, source="train-a")


def test_the_opened_index_is_memory_mapped_and_a_timestamp_before_the_origin_is_refused(tmp_path):
    write_index(tmp_path / "w", timestamps=np.arange(50, dtype=np.int64), window_seconds=10)
    windows = TimeWindows.open(tmp_path / "w")
    assert isinstance(windows._order, np.memmap)
    with pytest.raises(ValueError, match="precedes the window origin"):
        write_index(tmp_path / "v", timestamps=np.array([5, 10]), window_seconds=10, origin=7)
