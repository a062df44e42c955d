"""The offline time-window index (the reference's use_offline_ts_indices): its files as the reference names and
lays them out, the same windows, order and counts as the anchor_ts scan, a build that is interrupted before its
offsets is built again, and the phases a run records."""

from __future__ import annotations

import pathlib
import shutil

import numpy as np
import pytest

from common.data.phases import clear_phases, recorded_phases
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data import window_index
from recommendation_v4.data.windows import AnchorWindows
from tests.recommendation_v4.conftest import TINY_HISTORY_LENGTH as L, TINY_MIN_HISTORY as M

DAY = 86_400


@pytest.fixture
def cache(tiny_cache_dir: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the tiny cache's columns and positions (the index is written beside them), without anchor_ts."""
    copy = tmp_path / "hstu_cache_L60"
    copy.mkdir()
    for name in ("flat_timestamps.npy", cf.positions_file(L, M), cf.positions_file(L, L)):
        shutil.copy(tiny_cache_dir / name, copy / name)
    return copy


def _scan_windows(cache_dir: pathlib.Path, tiny_cache_dir: pathlib.Path, window_seconds: int, **kwargs) -> AnchorWindows:
    anchor_ts = np.load(tiny_cache_dir / cf.anchor_ts_file(L, M))
    return AnchorWindows(lambda: anchor_ts, window_seconds=window_seconds, **kwargs)


def _index_windows(cache_dir: pathlib.Path, window_seconds: int, **kwargs) -> AnchorWindows:
    window_index.ensure_window_index(cache_dir, L, M, window_seconds)
    return AnchorWindows(lambda: pytest.fail("the offline index never reads anchor_ts"), window_seconds=window_seconds,
                         open_window_index=lambda: window_index.load_window_index(cache_dir, L, M, window_seconds),
                         **kwargs)


@pytest.mark.parametrize("window_seconds", [DAY, 3 * 3600])
def test_the_index_holds_each_windows_anchors_in_anchor_order(cache, tiny_cache_dir, window_seconds):
    indices_path, offsets_path = window_index.ensure_window_index(cache, L, M, window_seconds)
    assert (indices_path.name, offsets_path.name) == (f"ts_indices_L{L}_m{M}_W{window_seconds}.npy",
                                                      f"ts_offsets_L{L}_m{M}_W{window_seconds}.npy")
    indices, offsets = np.load(indices_path), np.load(offsets_path)
    assert indices.dtype == offsets.dtype == np.int64 and offsets[0] == 0 and offsets[-1] == indices.size
    anchor_ts = np.load(tiny_cache_dir / cf.anchor_ts_file(L, M))
    t_min = int(anchor_ts.min())
    assert offsets.size - 1 == (int(anchor_ts.max()) - t_min) // window_seconds + 1
    for ts in range(offsets.size - 1):
        lo = t_min + ts * window_seconds
        expected = np.flatnonzero((anchor_ts >= lo) & (anchor_ts < lo + window_seconds))
        np.testing.assert_array_equal(indices[offsets[ts]:offsets[ts + 1]], expected)
    # the same bytes whether the timestamps come from anchor_ts or from flat_timestamps at the positions
    again = pathlib.Path(str(cache) + "-with-anchor-ts")
    shutil.copytree(cache, again, ignore=shutil.ignore_patterns("ts_*"))
    shutil.copy(tiny_cache_dir / cf.anchor_ts_file(L, M), again / cf.anchor_ts_file(L, M))
    for built, rebuilt in zip((indices_path, offsets_path), window_index.ensure_window_index(again, L, M, window_seconds)):
        assert built.read_bytes() == rebuilt.read_bytes()
    # the floor equal to the history length: the reference's legacy name, without _m
    assert window_index.index_files(cache, L, L, DAY)[0].name == f"ts_indices_L{L}_W{DAY}.npy"


def test_windows_from_the_index_train_and_evaluate_what_the_scan_does(cache, tiny_cache_dir):
    settings = dict(shuffle_fraction=0.3, shuffle_seed=7, train_split_percentage=0.8,
                    uids_of=lambda idx: np.asarray(idx) % 13)
    scan, index = _scan_windows(cache, tiny_cache_dir, DAY, **settings), _index_windows(cache, DAY, **settings)
    assert index.offline and index.num_windows() == scan.num_windows()
    windows = list(range(scan.num_windows() - 1))
    for ts in windows:
        np.testing.assert_array_equal(index.train_window_indices(ts), scan.train_window_indices(ts))
    assert index.count_train_samples(windows) == scan.count_train_samples(windows)
    np.testing.assert_array_equal(index.eval_holdout_indices(windows[-1] + 1), scan.eval_holdout_indices(windows[-1] + 1))
    np.testing.assert_array_equal(index.anchors_in_windows(0, 1), scan.anchors_in_windows(0, 1))


def test_an_index_without_its_offsets_is_built_again_and_a_broken_one_is_refused(cache):
    indices_path, offsets_path = window_index.ensure_window_index(cache, L, M, DAY)
    expected = offsets_path.read_bytes()
    offsets_path.unlink()  # what a build killed before its last rename leaves
    clear_phases()
    window_index.ensure_window_index(cache, L, M, DAY)
    phases = recorded_phases()
    assert offsets_path.read_bytes() == expected
    [build] = [p for p in phases if p.name == "window_index_build"]
    assert build.bytes_written == indices_path.stat().st_size + offsets_path.stat().st_size
    assert not [p for p in cache.iterdir() if p.name.startswith(".window-index-")]  # no staging left
    np.save(offsets_path, np.array([0, 5], dtype=np.int64))
    with pytest.raises(ValueError, match=offsets_path.name):
        window_index.load_window_index(cache, L, M, DAY)


def test_a_run_reads_two_offsets_and_its_anchors_per_window(cache):
    windows = _index_windows(cache, DAY)
    clear_phases()
    found = windows.window_indices(1)
    sizes = windows.count_train_samples([0, 1])
    phases = recorded_phases()
    [slice_phase] = [p for p in phases if p.name == "window_index_slice"]
    assert slice_phase.bytes_read == 16 + 8 * found.size and slice_phase.detail["anchors"] == found.size
    [count] = [p for p in phases if p.name == "train_sample_count"]
    assert count.bytes_read == 0 and sizes[1] == found.size  # no user held out: the offsets say it all


def test_the_command_builds_ahead_of_time_and_names_a_missing_cache(cache, tmp_path, capsys):
    assert window_index.main(["--cache-dir", str(cache), "--history-length", str(L), "--min-history", str(M)]) == 0
    assert capsys.readouterr().out.split() == [str(p) for p in window_index.index_files(cache, L, M, DAY)]
    assert window_index.main(["--cache-dir", str(tmp_path / "none"), "--history-length", str(L)]) == 3
    assert "not there" in capsys.readouterr().err
