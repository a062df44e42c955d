"""DLRM-HSTU's dataset read from an object store (rclone serve s3 over a temporary directory) gives
the very batches it gives from local disk, reading the event columns and pool rows by ranged GETs;
a prefix without processed data is the data error that says how to publish it. No skip: a missing
rclone is a failure (it comes with the dev install)."""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import tempfile
from typing import Iterator

import numpy as np
import pytest
import torch

from common.data.reads import recording
from common.object_store.location import ObjectPath
from common.object_store.npy_array import ObjectNpyArray
from common.object_store.publish import publish_tree
from common.object_store.requests import KINDS, RANGED_GET, process_tally
from recommendation_v4.data import features, layout, schema
from recommendation_v4.data import processed_format as fmt
from recommendation_v4.data.batch import HSTUBatch
from recommendation_v4.data.dataset import YambdaSequenceDataset
from recommendation_v4.data_setup import materialise
from recommendation_v4.run_config import DataConfig
from storage.host.object_endpoint import ObjectEndpoint

BUCKET = "bkt"
HISTORY_LENGTH = 32
CROSS_ROWS = {c.name: 1009 + 2 * i for i, c in enumerate(features.CROSS_FEATURES)}


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectEndpoint]:
    """An S3 endpoint for the module, its AWS_* variables set while it runs."""
    root = tmp_path_factory.mktemp("objects") / "root"
    with ObjectEndpoint(root) as serving, pytest.MonkeyPatch.context() as patch:
        for name, value in serving.env().items():
            patch.setenv(name, value)
        yield serving


@pytest.fixture(scope="module")
def published(endpoint: ObjectEndpoint, tiny_dataset_dir: pathlib.Path,
              tmp_path_factory: pytest.TempPathFactory) -> ObjectPath:
    """The tiny dataset's processed directory published under s3://bkt/datasets/<name>/processed
    (the trainer's own caches, which other tests may have added locally, left out)."""
    staging = tmp_path_factory.mktemp("publish") / "processed"
    shutil.copytree(layout.processed_dir(tiny_dataset_dir), staging,
                    ignore=shutil.ignore_patterns("anchor_cache", "window_index", ".*"))
    target = ObjectPath(f"s3://{BUCKET}/datasets/{tiny_dataset_dir.name}")
    publish_tree(staging, target / layout.PROCESSED_DIR, say=lambda line: None)
    return target


def _dataset(processed: pathlib.Path | ObjectPath, split: str, **overrides) -> YambdaSequenceDataset:
    kwargs = dict(split=split, history_length=HISTORY_LENGTH, min_history=3, cross_table_rows=CROSS_ROWS)
    kwargs.update(overrides)
    return YambdaSequenceDataset(processed, **kwargs)


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
    return [np.arange(min(16, size)), np.unique(np.linspace(0, size - 1, 40).astype(np.int64)),
            rng.integers(0, size, 64), np.array([size - 1, 0, size - 1])]


@pytest.mark.parametrize("split,overrides", [("train", {}), ("eval", {}), ("train", {"min_history": 1}),
                                             ("train", {"holdout_user_fraction": 0.25})])
def test_batches_from_the_store_equal_local_ones(published: ObjectPath, tiny_dataset_dir: pathlib.Path,
                                                 split: str, overrides: dict) -> None:
    local = _dataset(layout.processed_dir(tiny_dataset_dir), split, **overrides)
    before = process_tally()
    remote = _dataset(layout.processed_dir(published), split, **overrides)
    assert isinstance(remote.data.events["item_id"], ObjectNpyArray)
    assert isinstance(remote.data.pool_rows[0], ObjectNpyArray)
    assert len(remote) == len(local) > 0
    np.testing.assert_array_equal(remote.anchors, local.anchors)
    for indices in _index_batches(len(local)):
        _assert_batches_equal(remote.get_batch(indices), local.get_batch(indices))
    spent = process_tally().minus(before)
    assert spent.count[KINDS.index(RANGED_GET)] > 0
    assert spent.count[KINDS.index("PUT")] == 0  # a trainer writes nothing to the store
    one = len(local) // 2
    got, want = remote.sample(one), local.sample(one)
    np.testing.assert_array_equal(got.history_rows, want.history_rows)
    assert (got.label, got.query_time, got.contextual, got.candidate) == (
        want.label, want.query_time, want.contextual, want.candidate)
    assert remote.anchor_source_name() is None  # anchors held in memory: no window index written beside them


def test_reads_are_noted_as_ranged_gets_of_the_objects(published: ObjectPath, tiny_dataset_dir: pathlib.Path) -> None:
    remote = _dataset(layout.processed_dir(published), "train")
    remote.data  # opened outside the recording, as a loader worker does before its first batch
    with recording() as out:
        remote.get_batch(np.arange(32))
    (reads,) = out
    assert reads.read_count > 0
    assert any(name.startswith(f"s3://{BUCKET}/") for name in reads.new_files)
    assert reads.requests is not None and reads.requests.count[KINDS.index(RANGED_GET)] > 0


def test_storage_description_lists_the_objects(published: ObjectPath, tiny_dataset_dir: pathlib.Path) -> None:
    local = _dataset(layout.processed_dir(tiny_dataset_dir), "train").storage_description()
    remote = _dataset(layout.processed_dir(published), "train").storage_description()
    assert remote["access"] == "ranged_get" and local["access"] == "mmap"
    assert remote["root"] == str(layout.processed_dir(published))
    assert (remote["files"], remote["bytes"]) == (local["files"], local["bytes"])
    assert remote["columns"] == local["columns"]


def test_missing_processed_data_says_how_to_publish(endpoint: ObjectEndpoint) -> None:
    name = layout.synthetic_dataset_name("tiny", 0)
    config = DataConfig(data_root=f"s3://{BUCKET}/nothing-here", dataset=name)
    processed = f"s3://{BUCKET}/nothing-here/{name}/processed"
    with pytest.raises(schema.DatasetError, match=f"no processed Yambda data at {processed}") as raised:
        materialise(config)
    assert "publish_tree" in str(raised.value) and "preprocess" in str(raised.value)
    with pytest.raises(schema.DatasetError, match=processed):
        YambdaSequenceDataset(ObjectPath(processed), history_length=HISTORY_LENGTH)


def test_materialise_takes_a_published_dataset_as_it_is(published: ObjectPath) -> None:
    root = str(published.parent)
    dataset_dir = materialise(DataConfig(data_root=root, dataset=published.name))
    assert dataset_dir == published
    before = process_tally()
    materialise(DataConfig(data_root=root, dataset=published.name))
    assert process_tally().minus(before).count[KINDS.index("PUT")] == 0


def test_synthetic_generates_into_the_store(endpoint: ObjectEndpoint, tmp_path: pathlib.Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from recommendation_v4.data import synthetic

    staging_root = tmp_path / "tmp"
    staging_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging_root))
    target = f"s3://{BUCKET}/generated/{layout.synthetic_dataset_name('tiny', 3)}"
    assert synthetic._main(["--size", "tiny", "--seed", "3", "--out", target, "--no-progress"]) == 0
    assert list(staging_root.iterdir()) == []  # the staging directory is gone
    data = fmt.ProcessedData.open(layout.processed_dir(ObjectPath(target)))
    assert data.num_events > 0 and isinstance(data.events["uid"], ObjectNpyArray)
    assert (ObjectPath(target) / layout.RAW_DIR / layout.MULTI_EVENT_FILE).is_file()
