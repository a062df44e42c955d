"""Shared fixtures: one tiny synthetic Yambda dataset in the reference's tree (layout.py), generated,
preprocessed and with its flat-event cache built once per session, as a dataset directory and in a
data root."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from recommendation_v4.data import cache_build, layout
from recommendation_v4.data.dataset import YambdaDataset
from recommendation_v4.data.item_maps import ItemMaps
from recommendation_v4.data.preprocess import ensure_processed
from recommendation_v4.data.synthetic import ensure_synthetic

TINY_SIZE = "tiny"
TINY = layout.synthetic_dataset_name(TINY_SIZE, 0)
# the cache the fixtures build: the debug flavor's history, anchors from the 5th event (debug.gin)
TINY_HISTORY_LENGTH = 60
TINY_MIN_HISTORY = 5


def open_tiny_dataset(dataset_dir: pathlib.Path, *, history_length: int, min_history: int, **kwargs) -> YambdaDataset:
    """The samples of a (preprocessed) tiny dataset at this history length and floor, its cache and
    positions built first when missing: in `tiny_data_root`'s copy for any other than L60 / 5."""
    processed = pathlib.Path(layout.processed_dir(dataset_dir, TINY_SIZE))
    cache = cache_build.build_cache(processed, history_length)
    cache_build.ensure_positions(cache, history_length, min_history)
    return YambdaDataset(cache, item_maps=ItemMaps.load(dataset_dir, processed), history_length=history_length,
                         min_history=min_history, **kwargs)


@pytest.fixture(scope="session")
def tiny_dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The tiny dataset: raw/tiny/, shared_metadata/, synthetic_truth/, processed_tiny/ with
    hstu_cache_L60/ (positions and anchor timestamps of min_history 5). Tests only read it (a
    dataset may add its positions of another floor); to modify files, take a `fresh_tiny_copy`."""
    out = tmp_path_factory.mktemp("yambda") / TINY
    ensure_synthetic(out, size=TINY_SIZE, seed=0)
    processed = ensure_processed(out, TINY_SIZE)
    cache = cache_build.build_cache(processed, TINY_HISTORY_LENGTH)
    cache_build.ensure_positions(cache, TINY_HISTORY_LENGTH, TINY_MIN_HISTORY)
    cache_build.ensure_anchor_ts(cache, TINY_HISTORY_LENGTH, TINY_MIN_HISTORY)
    return out


@pytest.fixture(scope="session")
def tiny_cache_dir(tiny_dataset_dir: pathlib.Path) -> pathlib.Path:
    """tiny_dataset_dir's processed_tiny/hstu_cache_L60/."""
    return pathlib.Path(layout.cache_dir(tiny_dataset_dir, TINY_SIZE, TINY_HISTORY_LENGTH))


@pytest.fixture(scope="session")
def tiny_data_root(tiny_dataset_dir: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A data root holding a copy of the tiny dataset under its default name, for the trainers
    (which may add caches and positions there); the copy is up to date, so nothing is rebuilt."""
    root = tmp_path_factory.mktemp("data_root")
    shutil.copytree(tiny_dataset_dir, root / TINY)
    return root


@pytest.fixture
def fresh_tiny_copy(tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """A private copy of the tiny dataset's raw/ and shared_metadata/ files only (no processed_tiny/,
    no synthetic_truth/), to modify freely."""
    out = tmp_path / TINY
    shutil.copytree(layout.raw_dir(tiny_dataset_dir, TINY_SIZE), layout.raw_dir(out, TINY_SIZE))
    shutil.copytree(layout.shared_metadata_dir(tiny_dataset_dir), layout.shared_metadata_dir(out))
    return out
