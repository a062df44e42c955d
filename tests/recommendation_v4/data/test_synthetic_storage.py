"""The storage content of the synthetic Yambda generator (`--content storage`): the learnable content's
files, schema and size distributions, drawn fast and with nothing to learn. The same bytes whatever the
workers and shards; the trainer's preprocessing and readers take it as they take the learnable content."""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pyarrow.parquet as pq
import pytest

from common.data import generation
from common.data.generation import LEARNABLE, STORAGE
from recommendation_v4.data import cache_build, layout, schema, synthetic, synthetic_world
from recommendation_v4.data.dataset import YambdaDataset
from recommendation_v4.data.item_maps import ItemMaps
from recommendation_v4.data.preprocess import SOURCES_FILE, ensure_processed, read_split_meta
from tests.recommendation_v4.conftest import TINY_SIZE

# "small" with 2,500 users: three jobs of up to 1,000 users (as tests/common/data/test_generators_sharded.py)
SMALL_STORAGE = ["--size", "small", "--num-train", "2500", "--content", "storage", "--no-progress"]


def _digests(root: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _events_path(dataset_dir: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(layout.multi_event_path(dataset_dir, TINY_SIZE))


def _events(dataset_dir: pathlib.Path) -> dict[str, np.ndarray]:
    table = pq.read_table(_events_path(dataset_dir))
    columns = {name: table.column(name).to_numpy().astype(np.int64)
               for name in ("uid", "timestamp", "item_id", "is_organic")}
    columns["event_type"] = table.column("event_type").combine_chunks().indices.to_numpy().astype(np.int64)
    played = table.column("played_ratio_pct")
    columns["played_ratio_pct"] = np.where(played.is_valid().to_numpy(zero_copy_only=False),
                                           played.fill_null(0).to_numpy().astype(np.int64), -1)
    return columns


@pytest.fixture(scope="module")
def tiny_storage(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("storage") / layout.synthetic_dataset_name("tiny", 0)
    synthetic.generate(out, size="tiny", seed=0, content=STORAGE)
    ensure_processed(out, TINY_SIZE)
    return out


def test_workers_and_shards_write_the_same_bytes(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    assert synthetic._main([*SMALL_STORAGE, "--out", str(tmp_path / "one")]) == 0
    assert synthetic._main([*SMALL_STORAGE, "--out", str(tmp_path / "workers"), "--workers", "2"]) == 0
    written = capsys.readouterr().out
    assert "wrote 3 file(s)" in written and "2 worker(s)" in written  # three jobs, two worker processes
    assert synthetic._main([*SMALL_STORAGE, "--out", str(tmp_path / "shards"), "--shard", "1/2"]) == 0
    assert "of other shards still missing" in capsys.readouterr().out
    assert synthetic._main([*SMALL_STORAGE, "--out", str(tmp_path / "shards"), "--shard", "0/2"]) == 0
    assert "finalized:" in capsys.readouterr().out
    reference = _digests(tmp_path / "one")
    assert {"raw/small/multi_event.parquet", "shared_metadata/album_item_mapping.parquet", "generation.json",
            "synthetic_truth/coefficients.json"} <= set(reference)
    assert _digests(tmp_path / "workers") == reference
    assert _digests(tmp_path / "shards") == reference


def test_the_trainer_preprocesses_it_and_reads_every_file(tiny_storage: pathlib.Path,
                                                          tiny_dataset_dir: pathlib.Path) -> None:
    schema.validate_raw_dataset(tiny_storage, TINY_SIZE)
    rows = pq.ParquetFile(_events_path(tiny_storage)).metadata.num_rows
    processed = pathlib.Path(layout.processed_dir(tiny_storage, TINY_SIZE))
    build = json.loads((processed / SOURCES_FILE).read_text())["_build"]
    assert build["sorted_input"]  # streamed: sorted by (uid, timestamp), as Yambda's files are
    meta = read_split_meta(processed)
    learnable = read_split_meta(pathlib.Path(layout.processed_dir(tiny_dataset_dir, TINY_SIZE)))
    assert meta["num_users"] == learnable["num_users"] and meta["num_test_events"] > 0
    # the same split of the same users' activity: the train share of the events as the learnable content's
    learnable_rows = pq.ParquetFile(_events_path(tiny_dataset_dir)).metadata.num_rows
    assert abs(meta["num_train_events"] / rows - learnable["num_train_events"] / learnable_rows) < 0.05

    cache = cache_build.build_cache(processed, 60)
    cache_build.ensure_positions(cache, 60, 5)
    dataset = YambdaDataset(cache, item_maps=ItemMaps.load(tiny_storage, processed), history_length=60, min_history=5)
    assert dataset.item_maps.num_items == np.load(processed / layout.ITEM_POPULARITY_FILE).size
    assert dataset.cache.total_events == meta["num_train_events"] and len(dataset) > 1000
    batch = dataset.get_batch(np.arange(0, len(dataset), len(dataset) // 64))
    assert int(batch.uih_lengths.sum()) > 0 and 0 < float(batch.labels.mean()) < 1


def test_events_per_user_and_bytes_per_event_match_the_learnable_content(
    tiny_storage: pathlib.Path, tiny_dataset_dir: pathlib.Path,
) -> None:
    num_users = synthetic.get_size("tiny").num_users
    storage_uid, learnable_uid = (
        pq.read_table(_events_path(d), columns=["uid"]).column(0).to_numpy() for d in (tiny_storage, tiny_dataset_dir))
    storage, learnable = np.bincount(storage_uid, minlength=num_users), np.bincount(learnable_uid, minlength=num_users)
    # the same users with the same activity (the world's lognormal listens and caps); only the feedback
    # events on top of the listens are drawn apart
    assert abs(storage.sum() / learnable.sum() - 1) < 0.02
    assert np.all(np.abs(storage / learnable - 1) < 0.1)
    bytes_per_event = [_events_path(d).stat().st_size / uid.size
                       for d, uid in ((tiny_storage, storage_uid), (tiny_dataset_dir, learnable_uid))]
    assert abs(bytes_per_event[0] / bytes_per_event[1] - 1) < 0.1, bytes_per_event


def test_marginal_statistics_follow_the_learnable_content(
    tiny_storage: pathlib.Path, tiny_dataset_dir: pathlib.Path,
) -> None:
    storage, learnable = _events(tiny_storage), _events(tiny_dataset_dir)
    for events in (storage, learnable):
        share = np.bincount(events["event_type"], minlength=len(schema.EVENT_TYPE_NAMES)) / events["uid"].size
        events["share"] = share
        played = events["played_ratio_pct"][events["event_type"] == schema.LISTEN]
        events["played"] = np.array([(played >= 50).mean(), (played <= 20).mean(), (played > 100).mean()])
    assert np.all(np.abs(storage["share"] - learnable["share"]) < 0.005), (storage["share"], learnable["share"])
    assert np.all(np.abs(storage["played"] - learnable["played"]) < 0.05), (storage["played"], learnable["played"])
    assert abs(storage["is_organic"].mean() - learnable["is_organic"].mean()) < 0.05
    assert np.array_equal(storage["played_ratio_pct"] < 0, storage["event_type"] != schema.LISTEN)  # null off listens

    uid, ts, kind = storage["uid"], storage["timestamp"], storage["event_type"]
    assert np.all(ts % schema.TIMESTAMP_BIN_SECONDS == 0)
    assert ts.max() < synthetic.get_size("tiny").num_days * synthetic_world.DAY_SECONDS
    same_user = np.diff(uid) == 0
    assert np.all(np.diff(uid) >= 0) and np.all(np.diff(ts)[same_user] >= 0)
    tie = same_user & (np.diff(ts) == 0)
    assert np.all(np.diff(kind)[tie] >= 0)  # a bin's events in Yambda's type order, listens first
    listen = kind == schema.LISTEN
    gaps = np.diff(ts[listen])[np.diff(uid[listen]) == 0]
    no_mans_land = (gaps > synthetic_world.MAX_PLAY_SECONDS + 20) & (gaps < synthetic_world.MIN_SESSION_GAP_SECONDS - 10)
    assert no_mans_land.sum() == 0
    learnable_listen = learnable["event_type"] == schema.LISTEN
    learnable_gaps = np.diff(learnable["timestamp"][learnable_listen])[np.diff(learnable["uid"][learnable_listen]) == 0]
    assert abs((gaps > 1800).mean() - (learnable_gaps > 1800).mean()) < 0.03  # sessions of the same length

    listened = set(zip(uid[listen].tolist(), storage["item_id"][listen].tolist()))
    assert all(pair in listened for pair in zip(uid[~listen].tolist(), storage["item_id"][~listen].tolist()))
    slopes = []
    for events in (storage, learnable):
        counts = np.sort(np.bincount(events["item_id"]))[::-1]
        counts = counts[counts > 0]
        head = slice(0, counts.size // 2)
        slopes.append(np.polyfit(np.log(np.arange(1, counts.size + 1)[head]), np.log(counts[head]), 1)[0])
    assert abs(slopes[0] - slopes[1]) < 0.2, slopes  # Zipf popularity, as steep


def test_storage_content_differs_from_the_learnable_one_but_for_the_world(
    tiny_storage: pathlib.Path, tiny_dataset_dir: pathlib.Path,
) -> None:
    assert _events_path(tiny_storage).read_bytes() != _events_path(tiny_dataset_dir).read_bytes()
    storage, learnable = (pathlib.Path(layout.shared_metadata_dir(d)) for d in (tiny_storage, tiny_dataset_dir))
    for name in layout.MAPPING_FILES:  # the same catalog
        assert (storage / name).read_bytes() == (learnable / name).read_bytes()
    assert json.loads((tiny_storage / generation.PLAN_FILE).read_text())["content"] == STORAGE
    assert "content" not in json.loads((tiny_dataset_dir / generation.PLAN_FILE).read_text())
    truth = json.loads((layout.synthetic_truth_dir(tiny_storage) / synthetic.TRUTH_COEFFICIENTS_FILE).read_text())
    assert truth["content"] == STORAGE


def test_learnable_settings_are_those_datasets_were_written_with() -> None:
    config = synthetic.get_size("tiny")
    learnable = synthetic.SyntheticPlan("tiny", config, seed=0).settings()
    assert "content" not in learnable  # generation.json of the datasets written before --content still match
    storage = synthetic.SyntheticPlan("tiny", config, seed=0, content=STORAGE)
    assert storage.settings() == {**learnable, "content": STORAGE} and "storage" in storage.name
    with pytest.raises(ValueError, match="content must be"):
        synthetic.SyntheticPlan("tiny", config, seed=0, content="random")


def test_other_content_in_the_same_directory_is_refused_and_ensure_tells_them_apart(tmp_path: pathlib.Path) -> None:
    out = synthetic.generate(tmp_path / "d", size="tiny", seed=5, content=STORAGE)
    learnable_plan = synthetic.SyntheticPlan("tiny", synthetic.get_size("tiny"), seed=5, content=LEARNABLE)
    with pytest.raises(FileExistsError, match="content"):
        generation.generate(learnable_plan, out, progress=False, log=lambda line: None)
    stamp = _events_path(out).stat().st_mtime_ns
    synthetic.ensure_synthetic(out, size="tiny", seed=5, content=STORAGE)
    assert _events_path(out).stat().st_mtime_ns == stamp
    synthetic.ensure_synthetic(out, size="tiny", seed=5)  # the learnable content: regenerated
    truth = json.loads((layout.synthetic_truth_dir(out) / synthetic.TRUTH_COEFFICIENTS_FILE).read_text())
    assert "content" not in truth and "content" not in json.loads((out / generation.PLAN_FILE).read_text())
