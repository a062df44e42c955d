from __future__ import annotations

import pathlib
import pickle

import numpy as np
import pytest
import torch

from recommendation_v4.data import features, hashing, layout, schema
from recommendation_v4.data import processed_format as fmt
from recommendation_v4.data.dataset import YambdaSequenceDataset, collate_samples, make_batch_loader

HISTORY_LENGTH = 32  # 10 per pool: small enough that most tiny users fill their pools
PER_POOL = HISTORY_LENGTH // 3
CROSS_ROWS = {c.name: 1009 + 2 * i for i, c in enumerate(features.CROSS_FEATURES)}


def _dataset(processed: pathlib.Path, **overrides) -> YambdaSequenceDataset:
    kwargs = dict(split="train", history_length=HISTORY_LENGTH, min_history=3, cross_table_rows=CROSS_ROWS)
    kwargs.update(overrides)
    return YambdaSequenceDataset(processed, **kwargs)


@pytest.fixture(scope="module")
def processed(tiny_dataset_dir: pathlib.Path) -> pathlib.Path:
    return layout.processed_dir(tiny_dataset_dir)


@pytest.fixture(scope="module")
def data(processed: pathlib.Path) -> fmt.ProcessedData:
    return fmt.ProcessedData.open(processed)


@pytest.fixture(scope="module", params=["train", "eval"])
def dataset(request: pytest.FixtureRequest, processed: pathlib.Path) -> YambdaSequenceDataset:
    return _dataset(processed, split=request.param)


def _spread_indices(ds: YambdaSequenceDataset, count: int) -> np.ndarray:
    return np.unique(np.linspace(0, len(ds) - 1, count).astype(np.int64))


def test_history_is_the_most_recent_earlier_events_of_each_pool(dataset: YambdaSequenceDataset,
                                                                data: fmt.ProcessedData) -> None:
    pool = np.asarray(data.events["pool"])
    uid = np.asarray(data.events["uid"])
    ts = np.asarray(data.events["timestamp"], dtype=np.int64)
    full_pools = 0
    for index in _spread_indices(dataset, 250):
        sample = dataset.sample(int(index))
        anchor = sample.sample_id
        rows = sample.history_rows
        # No leakage: strictly earlier rows of the same user, never a later timestamp.
        assert np.all(rows < anchor) and np.all(uid[rows] == uid[anchor])
        assert np.all(ts[rows] <= ts[anchor]) and np.all(sample.history["action_timestamp"] <= sample.query_time)
        # Brute force: the last PER_POOL rows of each pool among the user's earlier rows.
        user_rows = np.arange(np.searchsorted(uid, uid[anchor]), anchor)
        expected = np.sort(np.concatenate([user_rows[pool[user_rows] == p][-PER_POOL:] for p in range(3)]))
        assert np.array_equal(rows, expected)
        counts = np.bincount(pool[rows], minlength=3)
        assert counts.max() <= PER_POOL
        full_pools += int(counts[0] == PER_POOL)
        # Chronological interleaving, and payloads that match the rows.
        assert np.all(np.diff(rows) > 0) and np.all(np.diff(sample.history["action_timestamp"]) >= 0)
        assert np.array_equal(sample.history["action_weight"], 1 << pool[rows])
        assert np.array_equal(sample.history[features.UIH_ITEM], data.events["item_id"][rows])
    assert full_pools > 50  # truncation to the most recent events was exercised


def test_eval_history_reaches_back_into_train_days(processed: pathlib.Path, data: fmt.ProcessedData) -> None:
    ds = _dataset(processed, split="eval")
    batch = ds.get_batch(np.arange(len(ds)))
    test_start = data.meta["split"]["test_start"]
    assert batch.query_time.min() >= test_start
    assert (batch.action_timestamp < test_start).any()


def test_get_batch_equals_collated_samples(dataset: YambdaSequenceDataset) -> None:
    rng = np.random.default_rng(1)
    unsorted_with_repeats = np.array([len(dataset) - 1, 0, 0])
    for indices in (rng.integers(0, len(dataset), 17), unsorted_with_repeats, _spread_indices(dataset, 64)):
        fast = dataset.get_batch(indices)
        slow = collate_samples([dataset.sample(int(i)) for i in indices])
        assert fast.features.keys() == slow.features.keys()
        assert torch.equal(fast.features.values(), slow.features.values())
        assert torch.equal(fast.features.lengths(), slow.features.lengths())
        for name in ("uih_lengths", "action_weight", "action_timestamp", "query_time", "num_candidates",
                     "labels", "sample_ids"):
            assert torch.equal(getattr(fast, name), getattr(slow, name)), name


def test_batch_layout(dataset: YambdaSequenceDataset, data: fmt.ProcessedData) -> None:
    indices = _spread_indices(dataset, 40)
    batch = dataset.get_batch(indices)
    kjt = batch.features
    assert kjt.keys() == list(features.MERGED_KJT_KEYS)
    assert kjt.values().dtype == torch.int64
    for key in features.MERGED_KJT_KEYS:
        expected = batch.uih_lengths if key in features.UIH_ID_FEATURES else torch.ones(indices.size, dtype=torch.int64)
        assert torch.equal(kjt[key].lengths(), expected), key
    assert int(batch.uih_lengths.max()) <= 3 * PER_POOL
    assert batch.action_weight.numel() == int(batch.uih_lengths.sum())
    assert set(batch.action_weight.unique().tolist()) <= set(features.ACTION_WEIGHTS)
    rows = dataset.anchors[indices]
    assert torch.equal(batch.sample_ids, torch.from_numpy(np.asarray(rows, dtype=np.int64)))
    played = np.asarray(data.events["played_ratio_pct"])[rows]
    assert torch.equal(batch.labels, torch.from_numpy((played >= 50).astype(np.float32)))
    assert np.array_equal(batch.query_time.numpy(), dataset.anchor_timestamps()[indices])
    assert np.array_equal(kjt[features.CAND_ITEM].values().numpy(), data.events["item_id"][rows])
    assert np.array_equal(kjt[features.CAND_ARTIST].values().numpy(), data.events["artist_id"][rows])
    assert np.array_equal(kjt[features.CONTEXT_UID].values().numpy(), data.events["uid"][rows])
    assert np.all(np.asarray(data.events["event_type"])[rows] == schema.LISTEN)


def test_cross_features_are_hashed_from_the_anchor(processed: pathlib.Path, data: fmt.ProcessedData) -> None:
    ds = _dataset(processed)
    other = _dataset(processed)
    indices = _spread_indices(ds, 100)
    batch, again = ds.get_batch(indices), other.get_batch(indices)
    assert torch.equal(batch.features.values(), again.features.values())
    rows = ds.anchors[indices]
    ts = np.asarray(data.events["timestamp"], dtype=np.int64)[rows]
    keys = {name: np.asarray(data.events[name], dtype=np.int64)[rows]
            for name in ("uid", "item_id", "artist_id", "album_id", "is_organic")}
    keys["hour_of_day"] = (ts // 3600) % 24
    expected = hashing.cross_feature_ids(keys, CROSS_ROWS)
    for cross in features.CROSS_FEATURES:
        got = batch.features[cross.name].values().numpy()
        assert np.array_equal(got, expected[cross.name]), cross.name
        assert got.min() >= 0 and got.max() < CROSS_ROWS[cross.name]


def test_min_history_filters_anchors(processed: pathlib.Path, data: fmt.ProcessedData) -> None:
    every = _dataset(processed, min_history=0)
    assert np.array_equal(np.asarray(every.anchors), np.asarray(data.anchor_rows["train"]))
    strict = _dataset(processed, min_history=50)
    assert len(strict) < len(every)
    rows = np.asarray(strict.anchors)
    position = rows - np.asarray(data.user_offsets)[data.user_index_of_rows(rows)]
    assert position.min() >= 50
    all_rows = np.asarray(every.anchors)
    assert (all_rows - np.asarray(data.user_offsets)[data.user_index_of_rows(all_rows)]).min() < 50


def test_holdout_users_are_disjoint_and_stable(processed: pathlib.Path, data: fmt.ProcessedData) -> None:
    def users(ds: YambdaSequenceDataset) -> set[int]:
        return set(np.asarray(data.events["uid"])[np.asarray(ds.anchors)].tolist())

    train = _dataset(processed, holdout_user_fraction=0.3)
    evaluation = _dataset(processed, split="eval", holdout_user_fraction=0.3)
    assert users(train).isdisjoint(users(evaluation))
    assert 5 <= len(users(evaluation)) <= 35
    assert users(_dataset(processed, split="eval", holdout_user_fraction=0.3)) == users(evaluation)
    assert users(_dataset(processed, split="eval", holdout_user_fraction=0.3, holdout_salt="x")) != users(evaluation)
    everyone = users(_dataset(processed, split="eval"))
    assert users(evaluation) < everyone


def test_ids_beyond_a_table_are_a_clear_error(processed: pathlib.Path, data: fmt.ProcessedData) -> None:
    rows = {**data.id_rows, "item_id": data.id_rows["item_id"] - 1}
    with pytest.raises(schema.DatasetError, match=r"'item_candidate_id'.*table 'item_id' has only \d+ rows"):
        _dataset(processed, entity_table_rows=rows)
    ds = _dataset(processed, entity_table_rows={**data.id_rows, "uid": 10**6})
    assert ds.table_rows["uid"] == 10**6 and ds.table_rows["user_x_hour"] == CROSS_ROWS["user_x_hour"]


def test_bad_arguments(processed: pathlib.Path, tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="split"):
        _dataset(processed, split="test")
    with pytest.raises(ValueError, match="history_length"):
        _dataset(processed, history_length=2)
    with pytest.raises(ValueError, match="user_x_album"):
        _dataset(processed, cross_table_rows={**CROSS_ROWS, "user_x_album": 0})
    with pytest.raises(schema.DatasetError, match="preprocess --dataset-dir"):
        _dataset(tmp_path / "processed")
    ds = _dataset(processed)
    with pytest.raises(IndexError, match="sample indices"):
        ds.get_batch(np.array([len(ds)]))


def test_loader_with_workers_yields_the_requested_batches(processed: pathlib.Path) -> None:
    ds = _dataset(processed)
    assert len(pickle.dumps(ds)) < 20_000  # memory maps are reopened in workers, never pickled
    index_batches = [np.arange(i * 16, i * 16 + 16) for i in range(5)]
    loader = make_batch_loader(ds, index_batches, num_workers=2)
    assert loader.persistent_workers
    for epoch in range(2):
        batches = list(loader)
        assert len(batches) == len(index_batches)
        for got, indices in zip(batches, index_batches):
            assert torch.equal(got.sample_ids, ds.get_batch(indices).sample_ids)
            assert torch.equal(got.features.values(), ds.get_batch(indices).features.values())
