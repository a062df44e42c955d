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
from recommendation_v4.data import layout, schema, synthetic
from recommendation_v4.data import processed_format as fmt
from recommendation_v4.data.preprocess import ensure_processed
from recommendation_v4.data.raw_reader import load_item_mapping, read_event_chunks

# "small" with 2,500 users: three jobs of up to 1,000 users (as tests/common/data/test_generators_sharded.py)
SMALL_STORAGE = ["--size", "small", "--num-train", "2500", "--content", "storage", "--no-progress"]


def _digests(root: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _events(dataset_dir: pathlib.Path) -> dict[str, np.ndarray]:
    table = pq.read_table(layout.raw_dir(dataset_dir) / layout.MULTI_EVENT_FILE)
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
    ensure_processed(out)
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
    assert {"raw/multi_event.parquet", "generation.json", "synthetic_truth/coefficients.json"} <= set(reference)
    assert _digests(tmp_path / "workers") == reference
    assert _digests(tmp_path / "shards") == reference


def test_the_trainer_preprocesses_it_and_reads_every_file(tiny_storage: pathlib.Path) -> None:
    schema.validate_raw_dataset(tiny_storage)
    raw = layout.raw_dir(tiny_storage)
    rows = sum(len(chunk) for chunk in read_event_chunks(raw / layout.MULTI_EVENT_FILE, batch_rows=4096))
    assert rows == pq.ParquetFile(raw / layout.MULTI_EVENT_FILE).metadata.num_rows > 0
    for name, column in ((layout.ALBUM_MAPPING_FILE, "album_id"), (layout.ARTIST_MAPPING_FILE, "artist_id")):
        assert load_item_mapping(raw / name, group_column=column).max_id >= 0
    meta = fmt.read_meta(layout.processed_dir(tiny_storage))
    assert meta["build"]["sorted_input"]  # streamed: sorted by (uid, timestamp), as Yambda's files are
    assert meta["counts"]["anchors"]["train"] > 0 and meta["counts"]["anchors"]["eval"] > 0
    assert fmt.ProcessedData.open(layout.processed_dir(tiny_storage)).num_events > 0.9 * rows


def test_events_per_user_and_bytes_per_event_match_the_learnable_content(
    tiny_storage: pathlib.Path, tiny_dataset_dir: pathlib.Path,
) -> None:
    num_users = synthetic.get_size("tiny").num_users
    storage_uid, learnable_uid = (
        pq.read_table(layout.raw_dir(d) / layout.MULTI_EVENT_FILE, columns=["uid"]).column(0).to_numpy()
        for d in (tiny_storage, tiny_dataset_dir))
    storage, learnable = np.bincount(storage_uid, minlength=num_users), np.bincount(learnable_uid, minlength=num_users)
    # the same users with the same activity (the world's lognormal listens and caps); only the feedback
    # events on top of the listens are drawn apart
    assert abs(storage.sum() / learnable.sum() - 1) < 0.02
    assert np.all(np.abs(storage / learnable - 1) < 0.1)
    bytes_per_event = [(layout.raw_dir(d) / layout.MULTI_EVENT_FILE).stat().st_size / uid.size
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
    assert ts.max() < synthetic.get_size("tiny").num_days * synthetic.DAY_SECONDS
    same_user = np.diff(uid) == 0
    assert np.all(np.diff(uid) >= 0) and np.all(np.diff(ts)[same_user] >= 0)
    tie = same_user & (np.diff(ts) == 0)
    assert np.all(np.diff(kind)[tie] >= 0)  # a bin's events in Yambda's type order, listens first
    listen = kind == schema.LISTEN
    gaps = np.diff(ts[listen])[np.diff(uid[listen]) == 0]
    no_mans_land = (gaps > synthetic.MAX_PLAY_SECONDS + 20) & (gaps < synthetic.MIN_SESSION_GAP_SECONDS - 10)
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
    storage, learnable = layout.raw_dir(tiny_storage), layout.raw_dir(tiny_dataset_dir)
    assert (storage / layout.MULTI_EVENT_FILE).read_bytes() != (learnable / layout.MULTI_EVENT_FILE).read_bytes()
    for name in (layout.ALBUM_MAPPING_FILE, layout.ARTIST_MAPPING_FILE):  # the same catalog
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
    stamp = (layout.raw_dir(out) / layout.MULTI_EVENT_FILE).stat().st_mtime_ns
    synthetic.ensure_synthetic(out, size="tiny", seed=5, content=STORAGE)
    assert (layout.raw_dir(out) / layout.MULTI_EVENT_FILE).stat().st_mtime_ns == stamp
    synthetic.ensure_synthetic(out, size="tiny", seed=5)  # the learnable content: regenerated
    truth = json.loads((layout.synthetic_truth_dir(out) / synthetic.TRUTH_COEFFICIENTS_FILE).read_text())
    assert "content" not in truth and "content" not in json.loads((out / generation.PLAN_FILE).read_text())
