"""YambdaDataset over the tiny dataset's flat-event cache: the reference's sample rules checked
against the cache's own arrays, the batch path against the one-sample path, the reads it notes
for the load profile, and its errors."""

from __future__ import annotations

import pathlib
import pickle

import numpy as np
import pytest
import torch

from common.data.reads import forget_access_history, recording
from recommendation_v4.data import features, hashing, layout, schema
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data.dataset import YambdaDataset, collate_samples
from recommendation_v4.data.item_maps import ItemMaps

HISTORY_LENGTH, MIN_HISTORY = 60, 5  # the cache the session fixture builds
PER_POOL = HISTORY_LENGTH // 3
CROSS_ROWS = {c.name: 1009 + 2 * i for i, c in enumerate(features.CROSS_FEATURES)}


@pytest.fixture(scope="module")
def maps(tiny_dataset_dir: pathlib.Path) -> ItemMaps:
    return ItemMaps.load(tiny_dataset_dir, layout.processed_dir(tiny_dataset_dir, "tiny"))


def _dataset(cache: pathlib.Path, maps: ItemMaps, **overrides) -> YambdaDataset:
    kwargs = dict(item_maps=maps, history_length=HISTORY_LENGTH, min_history=MIN_HISTORY, cross_table_rows=CROSS_ROWS)
    kwargs.update(overrides)
    return YambdaDataset(cache, **kwargs)


@pytest.fixture(scope="module")
def dataset(tiny_cache_dir: pathlib.Path, maps: ItemMaps) -> YambdaDataset:
    return _dataset(tiny_cache_dir, maps)


@pytest.fixture(scope="module")
def arrays(tiny_cache_dir: pathlib.Path) -> dict[str, np.ndarray]:
    names = [*cf.EVENT_COLUMNS, *cf.USER_COLUMNS, cf.positions_file(HISTORY_LENGTH, MIN_HISTORY)[:-4]]
    return {name: np.load(tiny_cache_dir / f"{name}.npy") for name in names}


def _spread(ds: YambdaDataset, count: int) -> np.ndarray:
    return np.unique(np.linspace(0, len(ds) - 1, count).astype(np.int64))


def test_samples_follow_the_references_rules(dataset: YambdaDataset, arrays: dict, maps: ItemMaps) -> None:
    positions = arrays[cf.positions_file(HISTORY_LENGTH, MIN_HISTORY)[:-4]]
    uid, ts = arrays["flat_uid"], arrays["flat_timestamps"]
    pools = np.select([arrays["flat_is_listen_plus"], arrays["flat_is_like"], arrays["flat_is_skip"]], [0, 1, 2], -1)
    capped = 0
    for index in _spread(dataset, 200):
        sample = dataset.sample(int(index))
        pos = int(positions[index])
        assert sample.sample_id == pos and pos - arrays["user_start"][uid[pos]] >= MIN_HISTORY
        rows = sample.history_rows
        # no leakage: strictly earlier events of the same user, within the 20,000-event scan
        assert np.all(rows < pos) and np.all(uid[rows] == uid[pos]) and np.all(rows >= pos - 20_000)
        earlier = np.arange(arrays["user_start"][uid[pos]], pos)
        expected = np.sort(np.concatenate([earlier[pools[earlier] == p][-PER_POOL:] for p in range(3)]))
        assert np.array_equal(rows, expected)
        capped += int((pools[earlier] == 0).sum() > PER_POOL)  # the listen+ pool's cap took effect
        assert np.array_equal(sample.history["action_weight"], 1 << pools[rows])
        assert np.array_equal(sample.history[features.UIH_ITEM], arrays["flat_item_ids"][rows])
        assert np.array_equal(sample.history[features.UIH_ARTIST], maps.item_to_artist[arrays["flat_item_ids"][rows]])
        # the reference's dummy query time: the last history event's time (the anchor's when there is none)
        assert sample.query_time == (int(ts[rows[-1]]) if rows.size else int(ts[pos]))
        assert sample.label == float(arrays["flat_played_ratio"][pos] >= 50)
        assert sample.candidate[features.CAND_ALBUM] == maps.item_to_album[arrays["flat_item_ids"][pos]]
        assert sample.contextual[features.CONTEXT_UID] == uid[pos]
    assert capped > 20


def test_the_scan_window_caps_how_far_back_a_history_reaches(tiny_cache_dir: pathlib.Path, maps: ItemMaps,
                                                               arrays: dict) -> None:
    short = _dataset(tiny_cache_dir, maps, scan_window=25)
    flags = [arrays["flat_is_listen_plus"], arrays["flat_is_like"], arrays["flat_is_skip"]]
    for index in _spread(short, 50):
        sample = short.sample(int(index))
        pos = sample.sample_id
        window = np.arange(max(pos - 25, arrays["user_start"][arrays["flat_uid"][pos]]), pos)
        expected = np.sort(np.concatenate([window[flag[window]][-PER_POOL:] for flag in flags]))
        assert sample.history_rows.tolist() == expected.tolist()  # within the last 25 events, none older


def test_get_batch_equals_collated_samples(tiny_cache_dir: pathlib.Path, maps: ItemMaps) -> None:
    rng = np.random.default_rng(0)
    for strategy in ("interleaved", "last_n"):
        ds = _dataset(tiny_cache_dir, maps, history_strategy=strategy, max_history_events=50)
        for indices in (np.arange(100, 164), rng.choice(len(ds), 64, replace=False), np.array([0])):
            batch, reference = ds.get_batch(indices), collate_samples([ds.sample(int(i)) for i in indices])
            assert torch.equal(batch.features.values(), reference.features.values())
            assert torch.equal(batch.features.lengths(), reference.features.lengths())
            for name in ("uih_lengths", "action_weight", "action_timestamp", "query_time", "labels", "sample_ids"):
                assert torch.equal(getattr(batch, name), getattr(reference, name)), (strategy, name)
            assert int(batch.uih_lengths.max()) <= 50


def test_batch_layout_and_cross_features(dataset: YambdaDataset, arrays: dict, maps: ItemMaps) -> None:
    indices = _spread(dataset, 100)
    batch = dataset.get_batch(indices)
    kjt = batch.features
    assert kjt.keys() == list(features.MERGED_KJT_KEYS) and kjt.values().dtype == torch.int64
    for key in features.MERGED_KJT_KEYS:
        expected = batch.uih_lengths if key in features.UIH_ID_FEATURES else torch.ones(indices.size, dtype=torch.int64)
        assert torch.equal(kjt[key].lengths(), expected), key
    pos = arrays[cf.positions_file(HISTORY_LENGTH, MIN_HISTORY)[:-4]][indices]
    items = arrays["flat_item_ids"][pos]
    keys = {"uid": arrays["flat_uid"][pos], "item_id": items, "artist_id": maps.item_to_artist[items],
            "album_id": maps.item_to_album[items], "is_organic": arrays["flat_is_organic"][pos].astype(np.int64),
            "hour_of_day": (arrays["flat_timestamps"][pos] // 3600) % 24}
    expected = hashing.cross_feature_ids(keys, CROSS_ROWS)
    for cross in features.CROSS_FEATURES:
        assert np.array_equal(kjt[cross.name].values().numpy(), expected[cross.name]), cross.name
    assert np.all(arrays["flat_event_types"][pos] == schema.CACHE_LISTEN)


def test_reads_are_noted_as_the_reference_reads(dataset: YambdaDataset) -> None:
    indices = np.arange(200, 232)
    forget_access_history()
    with recording() as reads:
        batch = dataset.get_batch(indices)
    noted = reads[0]
    files = {pathlib.Path(f).name for f in noted.new_files}
    assert {"flat_is_listen_plus.npy", "flat_is_like.npy", "flat_is_skip.npy", "flat_item_ids.npy",
            "flat_timestamps.npy", "user_start.npy", cf.positions_file(HISTORY_LENGTH, MIN_HISTORY)} <= files
    pos = batch.sample_ids.numpy()
    starts = np.maximum(dataset.cache.user_start[dataset.cache.columns["flat_uid"][pos]], pos - 20_000)
    expected = dataset.bytes_per_sample(pos - starts, batch.uih_lengths.numpy())
    # per sample: 3 x 8 B of index, uid and user start, 29 B of anchor fields, its whole scan of 3 flags, 16 B a history event
    assert expected.tolist() == (24 + 29 + 3 * (pos - starts) + 16 * batch.uih_lengths.numpy()).tolist()
    assert noted.read_bytes == int(expected.sum())
    description = dataset.storage_description()
    assert description["format"] == "npy-columns" and description["scan_window"] == 20_000
    assert {c["per"] for c in description["columns"]} == {"sample", "scan_event", "history_event"}
    assert description["files"] == len(cf.EVENT_COLUMNS) + len(cf.USER_COLUMNS) + 1


def test_ids_beyond_a_table_are_a_clear_error(tiny_cache_dir: pathlib.Path, maps: ItemMaps, dataset: YambdaDataset) -> None:
    rows = {**dataset.id_rows, "item_id": dataset.id_rows["item_id"] - 1}
    with pytest.raises(schema.DatasetError, match=r"'item_candidate_id'.*table 'item_id' has only \d+ rows"):
        _dataset(tiny_cache_dir, maps, entity_table_rows=rows)
    bigger = _dataset(tiny_cache_dir, maps, entity_table_rows={**dataset.id_rows, "uid": 10**6})
    assert bigger.table_rows["uid"] == 10**6 and bigger.table_rows["user_x_hour"] == CROSS_ROWS["user_x_hour"]


def test_bad_arguments(tiny_cache_dir: pathlib.Path, maps: ItemMaps, tmp_path: pathlib.Path, dataset: YambdaDataset) -> None:
    with pytest.raises(ValueError, match="history_length"):
        _dataset(tiny_cache_dir, maps, history_length=2)
    with pytest.raises(ValueError, match="history_strategy"):
        _dataset(tiny_cache_dir, maps, history_strategy="recent")
    with pytest.raises(ValueError, match="user_x_album"):
        _dataset(tiny_cache_dir, maps, cross_table_rows={**CROSS_ROWS, "user_x_album": 0})
    with pytest.raises(schema.DatasetError, match="no complete flat-event cache"):
        _dataset(tmp_path, maps)
    with pytest.raises(schema.DatasetError, match="positions_L60_m7.npy missing"):
        _dataset(tiny_cache_dir, maps, min_history=7)
    with pytest.raises(IndexError, match="anchor indices"):
        dataset.get_batch(np.array([len(dataset)]))


def test_loader_with_workers_yields_the_requested_batches(dataset: YambdaDataset) -> None:
    from common.data.loader import StreamingLoader

    assert len(pickle.dumps(dataset)) < 50_000  # memory maps are reopened in workers, never pickled
    index_batches = [np.arange(i * 16, i * 16 + 16) for i in range(5)]
    loader = StreamingLoader(source=dataset, build_window=lambda key: index_batches, num_workers=2)
    try:  # two windows on the same two workers, as a trainer streams them
        windows = [[batch for _, batch in loader.iterate(0, next_key=1)], [batch for _, batch in loader.iterate(1)]]
    finally:
        loader.close()
    for batches in windows:
        assert len(batches) == len(index_batches)
        for got, indices in zip(batches, index_batches):
            assert torch.equal(got.sample_ids, dataset.get_batch(indices).sample_ids)
            assert torch.equal(got.features.values(), dataset.get_batch(indices).features.values())
