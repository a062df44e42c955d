"""DLRM-HSTU's dataset in an object store (rclone serve s3 over a temporary directory): the generator
writes the same bytes to `s3://` as to a directory (`--cache 60:5` included), and a YambdaDataset over
the bucket's flat-event cache gives the very batches the directory's gives, reading by ranged GETs
exactly the scan windows of the pool flags and the history rows; a missing object is an error naming
it. No skip: a missing rclone is a failure (it comes with the dev install)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from common.data.reads import recording
from common.object_store.location import Location, ObjectPath
from common.object_store.npy_array import ObjectNpyArray
from common.object_store.publish import publish_tree
from common.object_store.requests import GET, KINDS, PUT, RANGED_GET, process_tally
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data import features, layout, schema, synthetic
from recommendation_v4.data.batch import HSTUBatch
from recommendation_v4.data.dataset import YambdaDataset
from recommendation_v4.data.item_maps import ItemMaps
from recommendation_v4.data.windows import AnchorWindows
from recommendation_v4.data_setup import materialise
from recommendation_v4.run_config import DataConfig
from storage.backends.object_endpoint import ObjectEndpoint
from tests.recommendation_v4.conftest import TINY, TINY_SIZE

BUCKET = "bkt"
HISTORY_LENGTH, MIN_HISTORY = 60, 5
CROSS_ROWS = {c.name: 1009 + 2 * i for i, c in enumerate(features.CROSS_FEATURES)}
GENERATE = ["--size", TINY_SIZE, "--seed", "0", "--cache", f"{HISTORY_LENGTH}:{MIN_HISTORY}", "--no-progress"]


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectEndpoint]:
    """An S3 endpoint for the module, its AWS_* variables set while it runs."""
    root = tmp_path_factory.mktemp("objects") / "root"
    with ObjectEndpoint(root) as serving, pytest.MonkeyPatch.context() as patch:
        for name, value in serving.env().items():
            patch.setenv(name, value)
        yield serving


@dataclasses.dataclass(frozen=True)
class Generated:
    local: pathlib.Path  # --out DIR
    remote: ObjectPath  # --out s3://bkt/datasets/<name>
    staging_root: pathlib.Path  # where the s3 run staged its files (tempfile's directory)


@pytest.fixture(scope="module")
def generated(endpoint: ObjectEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Generated:
    local = tmp_path_factory.mktemp("local") / TINY
    assert synthetic._main([*GENERATE, "--out", str(local)]) == 0
    remote = ObjectPath(f"s3://{BUCKET}/datasets/{TINY}")
    staging_root = tmp_path_factory.mktemp("staging")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(staging_root))
        assert synthetic._main([*GENERATE, "--out", str(remote)]) == 0
    return Generated(local, remote, staging_root)


def _build_record_free(name: str, data: bytes) -> bytes:
    """preprocess_sources.json records how long its build took: the one run-dependent value."""
    if pathlib.PurePosixPath(name).name != "preprocess_sources.json":
        return data
    sources = json.loads(data)
    sources["_build"].pop("seconds")
    return json.dumps(sources, sort_keys=True).encode()


def test_the_store_gets_the_bytes_the_directory_gets(generated: Generated) -> None:
    assert list(generated.staging_root.iterdir()) == []  # the staging directory is gone
    local = {str(p.relative_to(generated.local)): p.read_bytes() for p in sorted(generated.local.rglob("*"))
             if p.is_file() and not any(part.startswith(".") for part in p.relative_to(generated.local).parts)}
    remote = {path.relative_to(generated.remote): path.read_bytes() for path, _ in generated.remote.list()}
    assert remote.keys() == local.keys()
    cache = f"processed_tiny/{layout.cache_dir_name(HISTORY_LENGTH)}"
    assert {"raw/tiny/multi_event.parquet", "shared_metadata/album_item_mapping.parquet",
            "processed_tiny/train_sessions.parquet", "processed_tiny/item_popularity.npy", f"{cache}/_READY",
            f"{cache}/flat_uid.npy", f"{cache}/positions_L60_m5.npy", f"{cache}/anchor_ts_L60_m5.npy"} <= set(remote)
    for name in local:
        assert _build_record_free(name, remote[name]) == _build_record_free(name, local[name]), name


def _dataset(dataset_dir: Location, **overrides) -> YambdaDataset:
    processed = layout.processed_dir(dataset_dir, TINY_SIZE)
    kwargs = dict(item_maps=ItemMaps.load(dataset_dir, processed), history_length=HISTORY_LENGTH,
                  min_history=MIN_HISTORY, cross_table_rows=CROSS_ROWS)
    kwargs.update(overrides)
    return YambdaDataset(layout.cache_dir(dataset_dir, TINY_SIZE, HISTORY_LENGTH), **kwargs)


def _assert_batches_equal(got: HSTUBatch, want: HSTUBatch) -> None:
    for field in dataclasses.fields(HSTUBatch):
        a, b = getattr(got, field.name), getattr(want, field.name)
        if field.name == "features":
            assert a.keys() == b.keys()
            for part in ("values", "lengths", "offsets"):
                x, y = getattr(a, part)(), getattr(b, part)()
                assert x.dtype == y.dtype and torch.equal(x, y), f"features.{part}"
            assert (a.weights_or_none() is None) == (b.weights_or_none() is None)
        else:
            assert a.dtype == b.dtype and torch.equal(a, b), field.name


def _index_batches(size: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [np.arange(min(64, size)),  # user-major: consecutive anchors
            np.arange(size // 2, size // 2 + 48),
            np.unique(np.linspace(0, size - 1, 24).astype(np.int64)), rng.integers(0, size, 24),
            np.array([size - 1, 0, size - 1])]


@pytest.mark.parametrize("overrides", [{}, {"scan_window": 25}, {"history_strategy": "last_n"},
                                       {"max_history_events": 20}, {"min_history": HISTORY_LENGTH}],
                         ids=["reference", "short-scan", "last_n", "cut", "min_history-L"])
def test_batches_from_the_store_equal_local_ones(generated: Generated, overrides: dict) -> None:
    local = _dataset(generated.local, **overrides)
    before = process_tally()
    remote = _dataset(generated.remote, **overrides)
    assert isinstance(remote.cache.columns["flat_item_ids"], ObjectNpyArray)
    assert isinstance(remote.positions, ObjectNpyArray)
    assert len(remote) == len(local) > 0 and remote.id_rows == local.id_rows
    for indices in _index_batches(len(local)):
        _assert_batches_equal(remote.get_batch(indices), local.get_batch(indices))
    spent = process_tally().minus(before)
    assert spent.count[KINDS.index(RANGED_GET)] > 0
    assert spent.count[KINDS.index(PUT)] == 0  # a trainer writes nothing to the store
    one = len(local) // 2
    got, want = remote.sample(one), local.sample(one)
    np.testing.assert_array_equal(got.history_rows, want.history_rows)
    assert (got.label, got.query_time, got.contextual, got.candidate) == (
        want.label, want.query_time, want.contextual, want.candidate)


def _runs(rows: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) runs of consecutive distinct rows."""
    runs: list[tuple[int, int]] = []
    for row in sorted(set(rows.tolist())):
        if runs and runs[-1][1] == row:
            runs[-1] = (runs[-1][0], row + 1)
        else:
            runs.append((row, row + 1))
    return runs


def _union(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The non-empty windows merged where they overlap or touch."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(w for w in windows if w[1] > w[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


@pytest.mark.parametrize("scan_window", [20_000, 25])
def test_a_batch_reads_its_scan_windows_and_history_rows_by_ranged_gets(
        generated: Generated, monkeypatch: pytest.MonkeyPatch, scan_window: int) -> None:
    """The requests of one user-major batch, worked out from the local files: each pool flag's scan
    windows (their union) in one ranged GET per range, the item ids and timestamps of the history rows
    and the anchors one ranged GET per run of rows; nothing read whole."""
    remote = _dataset(generated.remote, scan_window=scan_window)
    remote.cache, remote.positions  # opened outside the count, as a loader worker does before its first batch
    local = _dataset(generated.local, scan_window=scan_window)
    indices = np.arange(100, 164)
    requests: list[tuple[str, int, int]] = []
    read_range = ObjectPath.read_range

    def recorded(path: ObjectPath, offset: int, size: int) -> bytes:
        requests.append((path.name, offset, size))
        return read_range(path, offset, size)

    monkeypatch.setattr(ObjectPath, "read_range", recorded)
    before = process_tally()
    remote.get_batch(indices)
    spent = process_tally().minus(before)
    assert spent.count[KINDS.index(RANGED_GET)] == len(requests) > 0
    assert spent.count[KINDS.index(GET)] == 0 and spent.count[KINDS.index(PUT)] == 0

    cache = local.cache
    pos = np.asarray(local.positions[indices])
    starts = np.maximum(cache.user_start[cache.columns["flat_uid"][pos]], pos - scan_window)
    windows = _union(list(zip(starts.tolist(), pos.tolist())))
    history_rows = np.concatenate([local.sample(int(i)).history_rows for i in indices])

    def rows_read(name: str) -> list[tuple[int, int]]:
        header = np.load(generated.local / "processed_tiny" / layout.cache_dir_name(HISTORY_LENGTH) / name,
                         mmap_mode="r")
        item = header.itemsize
        return sorted(((offset - header.offset) // item, (offset - header.offset + size) // item)
                      for n, offset, size in requests if n == name)

    for flag in cf.POOL_COLUMNS:
        assert rows_read(f"{flag}.npy") == windows, flag
    for column in ("flat_item_ids", "flat_timestamps"):  # the history rows, then the anchors' own
        assert rows_read(f"{column}.npy") == sorted(_runs(history_rows) + _runs(pos)), column
    for column in ("flat_uid", "flat_played_ratio", "flat_event_types", "flat_is_organic"):
        assert rows_read(f"{column}.npy") == _runs(pos), column
    assert rows_read(cf.positions_file(HISTORY_LENGTH, MIN_HISTORY)) == _runs(indices)
    assert {name for name, _, _ in requests} == {*(f"{c}.npy" for c in cf.EVENT_COLUMNS),
                                                 cf.positions_file(HISTORY_LENGTH, MIN_HISTORY)}


def test_reads_are_noted_as_ranged_gets_of_the_objects(generated: Generated) -> None:
    remote = _dataset(generated.remote)
    remote.cache  # opened outside the recording, as a loader worker does before its first batch
    with recording() as out:
        remote.get_batch(np.arange(32))
    (reads,) = out
    assert reads.read_count > 0
    assert any(name.startswith(f"s3://{BUCKET}/") for name in reads.new_files)
    assert reads.requests is not None and reads.requests.count[KINDS.index(RANGED_GET)] > 0


def test_storage_description_lists_the_objects(generated: Generated) -> None:
    local = _dataset(generated.local).storage_description()
    remote = _dataset(generated.remote).storage_description()
    assert remote["access"] == "ranged_get" and local["access"] == "mmap"
    assert remote["root"] == str(layout.cache_dir(generated.remote, TINY_SIZE, HISTORY_LENGTH))
    assert (remote["files"], remote["bytes"], remote["samples"]) == (local["files"], local["bytes"], local["samples"])
    assert remote["columns"] == local["columns"]


def test_windows_over_the_store_are_the_local_ones(generated: Generated) -> None:
    name = cf.anchor_ts_file(HISTORY_LENGTH, MIN_HISTORY)
    remote_cache = layout.cache_dir(generated.remote, TINY_SIZE, HISTORY_LENGTH)
    local_cache = pathlib.Path(layout.cache_dir(generated.local, TINY_SIZE, HISTORY_LENGTH))
    remote = AnchorWindows(lambda: cf.FlatEventCache.open(remote_cache).load_per_anchor(name, whole=True),
                           window_seconds=86_400)
    local = AnchorWindows(lambda: np.load(local_cache / name, mmap_mode="r"), window_seconds=86_400)
    assert remote.num_windows() == local.num_windows() > 1
    for ts in range(local.num_windows()):
        np.testing.assert_array_equal(remote.window_indices(ts), local.window_indices(ts))


def test_materialise_takes_a_published_dataset_as_it_is(generated: Generated) -> None:
    config = DataConfig(data_root=str(generated.remote.parent), dataset=TINY)
    before = process_tally()
    assert materialise(config, history_length=HISTORY_LENGTH, min_history=MIN_HISTORY) == generated.remote
    assert process_tally().minus(before).count[KINDS.index(PUT)] == 0


# ------------------------------------------------------------------ what is missing, named
def test_positions_of_another_floor_are_a_missing_object_named(generated: Generated) -> None:
    config = DataConfig(data_root=str(generated.remote.parent), dataset=TINY)
    missing = layout.cache_dir(generated.remote, TINY_SIZE, HISTORY_LENGTH) / cf.positions_file(HISTORY_LENGTH, 7)
    with pytest.raises(schema.DatasetError, match=f"{missing}: no such object") as raised:
        materialise(config, history_length=HISTORY_LENGTH, min_history=7)
    assert f"--cache {HISTORY_LENGTH}:7" in str(raised.value)  # how to publish it
    with pytest.raises(schema.DatasetError, match=f"{missing}: no such object"):
        _dataset(generated.remote, min_history=7)


def test_a_missing_cache_column_is_an_error_naming_the_object(generated: Generated, tmp_path: pathlib.Path) -> None:
    cache = tmp_path / layout.cache_dir_name(HISTORY_LENGTH)
    shutil.copytree(layout.cache_dir(generated.local, TINY_SIZE, HISTORY_LENGTH), cache)
    (cache / "flat_is_like.npy").unlink()
    partial = ObjectPath(f"s3://{BUCKET}/partial/{cache.name}")
    publish_tree(cache, partial, say=lambda line: None)
    with pytest.raises(schema.DatasetError, match=f"{partial}/flat_is_like.npy: no such object"):
        cf.FlatEventCache.open(partial)


def test_a_prefix_without_data_names_what_is_missing(endpoint: ObjectEndpoint) -> None:
    config = DataConfig(data_root=f"s3://{BUCKET}/nothing-here", dataset=TINY)
    cache = f"s3://{BUCKET}/nothing-here/{TINY}/processed_tiny/{layout.cache_dir_name(HISTORY_LENGTH)}"
    with pytest.raises(schema.DatasetError, match=f"{cache}: no complete flat-event cache"):
        materialise(config, history_length=HISTORY_LENGTH, min_history=MIN_HISTORY)
    with pytest.raises(schema.DatasetError, match=f"{cache}: no complete flat-event cache"):
        cf.FlatEventCache.open(ObjectPath(cache))
    mapping = f"s3://{BUCKET}/nothing-here/{TINY}/shared_metadata/{layout.ARTIST_MAPPING_FILE}"
    with pytest.raises(schema.DatasetError, match=f"{mapping} missing"):
        ItemMaps.load(ObjectPath(f"s3://{BUCKET}/nothing-here/{TINY}"),
                      ObjectPath(f"s3://{BUCKET}/nothing-here/{TINY}/processed_tiny"))


@pytest.mark.parametrize("how", ["env", "flag"])
def test_an_s3_data_root_without_out_is_written_to_the_bucket(endpoint: ObjectEndpoint, tmp_path: pathlib.Path,
                                                              monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    monkeypatch.chdir(tmp_path)
    extra = ["--data-root", f"s3://{BUCKET}/{how}"] if how == "flag" else []
    if how == "env":
        monkeypatch.setenv("MLPERF_DATA_ROOT", f"s3://{BUCKET}/{how}")
    assert synthetic._main([*GENERATE, *extra]) == 0
    assert not (tmp_path / "s3:").exists()  # not a local folder named after the URL
    published = ObjectPath(f"s3://{BUCKET}/{how}/{TINY}")
    assert cf.is_ready(layout.cache_dir(published, TINY_SIZE, HISTORY_LENGTH))

