"""DLRM data setup: what a first run builds (as the reference's), what a prepared cache needs, the
train and holdout windows, the round-robin rank split and the evaluation plan."""

from __future__ import annotations

import pathlib
import shutil

import gin
import numpy as np
import pytest
import torch

from common.config.checks import ConfigError
from common.data.phases import clear_phases, recorded_phases
from common.distributed.setup import DistInfo
from recommendation_v4.data import layout, schema
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data_setup import EvalPlan, data_path_settings, prepare_data
from recommendation_v4.model.flavors import FLAVORS
from recommendation_v4.run_config import DataConfig, StreamingConfig

TINY = layout.synthetic_dataset_name("tiny", 0)
DAY = 86_400


def _info(rank: int = 0, world_size: int = 1) -> DistInfo:
    return DistInfo(rank=rank, world_size=world_size, local_rank=rank, local_world_size=world_size,
                    device=torch.device("cpu"), backend="gloo")


@pytest.fixture
def private_root(tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the tiny dataset this test may change (raw, mappings, processed_tiny with its cache)."""
    shutil.copytree(tiny_dataset_dir, tmp_path / TINY)
    return tmp_path


def _data(root: pathlib.Path, *, info: DistInfo | None = None, stream: StreamingConfig | None = None, **fields):
    config = DataConfig(data_root=str(root), dataset=TINY, cross_table_rows=1000, **{"min_history": 5, **fields})
    return prepare_data(config=config, stream=stream or StreamingConfig(), model_config=FLAVORS["debug"],
                        info=info or _info())


def test_a_first_run_builds_what_the_references_first_run_builds(tmp_path: pathlib.Path, capsys) -> None:
    clear_phases()
    data = _data(tmp_path)  # an empty data root: the synthetic dataset is generated, preprocessed, cached
    out = capsys.readouterr().out
    cache = pathlib.Path(layout.cache_dir(tmp_path / TINY, "tiny", 60))
    assert "[data] preprocessing" in out and f"[data] building the flat-event cache {cache}" in out
    assert cf.is_ready(cache) and (cache / "positions_L60_m5.npy").is_file() and (cache / "anchor_ts_L60_m5.npy").is_file()
    names = [p.name for p in recorded_phases()]
    assert names[:3] == ["cache_build", "positions_build", "anchor_ts_build"] and "train_sample_count" in names
    # windows of a day from the earliest anchor; training up to the last one, which is the evaluation's
    assert data.train_keys == list(range(data.windows.num_windows() - 1)) and data.holdout_window == data.train_keys[-1] + 1
    anchor_ts = np.load(cache / "anchor_ts_L60_m5.npy")
    lo, hi = data.windows.bounds(data.holdout_window)
    assert np.array_equal(data.eval_indices, np.flatnonzero((anchor_ts >= lo) & (anchor_ts < hi)))
    assert sum(data.sizes.values()) == int((anchor_ts < lo).sum())
    assert "evaluation samples of window" in data.describe()


def test_a_prepared_cache_trains_without_raw_files_or_parquet(private_root: pathlib.Path) -> None:
    dataset_dir = private_root / TINY
    processed = pathlib.Path(layout.processed_dir(dataset_dir, "tiny"))
    # what the reference's "Option A" download holds: the cache, item_popularity.npy, the mappings
    for path in [dataset_dir / "raw", dataset_dir / layout.SYNTHETIC_TRUTH_DIR, *processed.glob("*.parquet")]:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    data = _data(private_root, generate_if_missing=False)
    assert len(data.dataset) > 0 and data.dataset.get_batch(np.arange(8)).batch_size == 8
    assert not (dataset_dir / "raw").exists()


def test_missing_data_is_a_data_error_saying_how_to_get_it(tmp_path: pathlib.Path) -> None:
    with pytest.raises(schema.DatasetError, match=r"no Yambda data at .*download_dataset.sh"):
        _data(tmp_path, generate_if_missing=False)


def test_changed_raw_files_are_preprocessed_and_cached_again(private_root: pathlib.Path, capsys) -> None:
    dataset_dir = private_root / TINY
    cache = pathlib.Path(layout.cache_dir(dataset_dir, "tiny", 60))
    before = (cache / "flat_uid.npy").stat().st_mtime_ns
    raw = pathlib.Path(layout.multi_event_path(dataset_dir, "tiny"))
    raw.write_bytes(raw.read_bytes())  # the same bytes, rewritten: the fingerprint holds, nothing is rebuilt
    _data(private_root)
    assert (cache / "flat_uid.npy").stat().st_mtime_ns == before
    import pyarrow.parquet as pq

    table = pq.read_table(raw)
    pq.write_table(table.slice(0, table.num_rows - 500), raw)  # another raw file
    _data(private_root)
    assert "raw files changed since the last build" in capsys.readouterr().out
    assert (cache / "flat_uid.npy").stat().st_mtime_ns != before


def test_sessions_preprocessed_elsewhere_are_taken_as_they_are(private_root: pathlib.Path, capsys) -> None:
    dataset_dir = private_root / TINY
    processed = pathlib.Path(layout.processed_dir(dataset_dir, "tiny"))
    shutil.rmtree(processed / layout.cache_dir_name(60))
    (processed / "preprocess_sources.json").unlink()  # what the reference's download_dataset.sh leaves
    stamp = (processed / layout.TRAIN_SESSIONS_FILE).stat().st_mtime_ns
    _data(private_root)
    assert "preprocessed elsewhere" in capsys.readouterr().out
    assert (processed / layout.TRAIN_SESSIONS_FILE).stat().st_mtime_ns == stamp  # not preprocessed again
    assert cf.is_ready(processed / layout.cache_dir_name(60))  # the cache built from it


def test_windows_that_clash_with_the_holdout_are_config_errors(private_root: pathlib.Path) -> None:
    data = _data(private_root)
    count = data.windows.num_windows()
    explicit = _data(private_root, stream=StreamingConfig(start_window=1, num_windows=2))
    assert explicit.train_keys == [1, 2] and explicit.holdout_window == 3  # the reference: the one just past training
    with pytest.raises(ConfigError, match="evaluation window 2 is not one after the train windows 1..2"):
        _data(private_root, stream=StreamingConfig(start_window=1, num_windows=2, eval_holdout_window=2))
    with pytest.raises(ConfigError, match=f"among the data's {count} windows"):
        _data(private_root, stream=StreamingConfig(num_windows=count))
    with pytest.raises(ConfigError, match="start_window=99"):
        _data(private_root, stream=StreamingConfig(start_window=99))
    with pytest.raises(ConfigError, match="no train window before the evaluation window 0: the data has 1 window"):
        _data(private_root, stream=StreamingConfig(window_seconds=7 * DAY))  # the tiny data's 6 days: one window


def test_ranks_train_round_robin_shares_of_the_users_order(private_root: pathlib.Path) -> None:
    stream = StreamingConfig()
    ranks = [_data(private_root, info=_info(r, 2), stream=stream) for r in range(2)]
    key = ranks[0].train_keys[-1]
    order = ranks[0].windows.train_window_indices(key)
    assert np.array_equal(order, np.sort(order))  # shuffle_fraction 0: user-major, the cache's order
    batches = [r.train_window_batches(key, global_batch_size=16) for r in ranks]
    assert len(batches[0]) == len(batches[1]) == order.size // 16
    for step in (0, len(batches[0]) - 1):
        assert batches[0][step].tolist() == order[step * 16 : (step + 1) * 16 : 2].tolist()
        assert batches[1][step].tolist() == order[step * 16 + 1 : (step + 1) * 16 : 2].tolist()
    shuffled = _data(private_root, stream=StreamingConfig(shuffle_fraction=1.0, shuffle_seed=4))
    assert sorted(shuffled.windows.train_window_indices(key).tolist()) == order.tolist()
    assert not np.array_equal(shuffled.windows.train_window_indices(key), order)


def test_evaluation_reads_the_holdout_or_the_next_window(private_root: pathlib.Path) -> None:
    data = _data(private_root, info=_info(1, 2), eval_max_samples=100)
    assert data.eval_indices.size == 100 and np.all(np.diff(data.eval_indices) > 0)  # a fixed subset, in order
    holdout = EvalPlan(data, mode="holdout", batch_size=20, max_samples=0)
    batches = holdout.batches(holdout.eval_key(data.train_keys[0]))
    assert [b.tolist() for b in batches] == [data.eval_indices[1::2][i * 10 : (i + 1) * 10].tolist() for i in range(5)]
    following = EvalPlan(data, mode="next_window", batch_size=20, max_samples=0)
    assert following.eval_key(data.train_keys[0]) == data.train_keys[1]
    assert following.eval_key(data.train_keys[-1]) == EvalPlan.HOLDOUT_KEY  # after the last window: the holdout
    nxt = data.windows.window_indices(data.train_keys[1])
    assert following.batches(data.train_keys[1])[0].tolist() == nxt[1:20:2].tolist()
    with pytest.raises(ConfigError, match="eval_batch_size=3 does not split over 2 ranks"):
        EvalPlan(data, mode="holdout", batch_size=3, max_samples=0)
    with pytest.raises(ConfigError, match="eval_batch_size=128 is more than the 100 samples of the evaluation window"):
        EvalPlan(data, mode="holdout", batch_size=128, max_samples=0)


def test_a_cache_that_cannot_be_written_is_one_data_error(private_root: pathlib.Path) -> None:
    cache = pathlib.Path(layout.cache_dir(private_root / TINY, "tiny", 60))
    # the staging path of the positions a new floor needs is taken (as a read-only or full file system
    # would refuse it, for root too)
    (cache / "positions_L60_m9.npy.tmp.npy").mkdir()
    with pytest.raises(schema.DatasetError, match=r"cannot write what this run needs there .*--min-history 9"):
        _data(private_root, min_history=9)


def test_a_truncated_cache_array_exits_3_in_one_line_naming_it(private_root: pathlib.Path, tmp_path, capsys) -> None:
    from recommendation_v4.train import main
    from tests.recommendation_v4.trainer_runs import REPO, tiny_bindings

    column = pathlib.Path(layout.cache_dir(private_root / TINY, "tiny", 60)) / "flat_item_ids.npy"
    column.write_bytes(column.read_bytes()[: column.stat().st_size // 2])  # a copy cut short
    args = ["--gin_config", str(REPO / "recommendation_v4" / "configs" / "debug.gin")]
    for binding in tiny_bindings(data_root=private_root, output_root=tmp_path / "out", run_name="cut", max_steps=1):
        args += ["--gin_bindings", binding]
    try:
        assert main(args) == 3
    finally:
        gin.clear_config()  # the next tests build their configs from a clean slate
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"data error: {column}: unreadable cache array"), err


def test_the_offline_window_index_gives_the_same_windows_without_anchor_ts(private_root: pathlib.Path) -> None:
    """recommendation_v4.DataConfig.use_offline_ts_indices (the reference's, off by default): built once in the
    cache, anchor_ts neither built nor read, and the same train windows, counts, evaluation set and baseline."""
    scanned = _data(private_root)
    cache = pathlib.Path(layout.cache_dir(private_root / TINY, "tiny", 60))
    (cache / "anchor_ts_L60_m5.npy").unlink()
    clear_phases()
    indexed = _data(private_root, use_offline_ts_indices=True)
    names = [p.name for p in recorded_phases()]
    assert "window_index_build" in names and "anchor_ts_build" not in names and "anchor_ts_range" not in names
    assert not (cache / "anchor_ts_L60_m5.npy").exists() and (cache / f"ts_offsets_L60_m5_W{DAY}.npy").is_file()
    assert indexed.windows.offline and (indexed.train_keys, indexed.sizes) == (scanned.train_keys, scanned.sizes)
    assert np.array_equal(indexed.eval_indices, scanned.eval_indices)
    assert indexed.popularity_baseline_auc() == scanned.popularity_baseline_auc()
    [selection] = [setting for setting in data_path_settings(indexed.config, StreamingConfig(), history_length=60)
                   if setting.name == "window_selection"]
    assert not selection.same and selection.binding == "recommendation_v4.DataConfig.use_offline_ts_indices"
