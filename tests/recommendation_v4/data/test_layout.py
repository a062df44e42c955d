from __future__ import annotations

import pathlib

import pytest

from common.object_store.location import ObjectPath
from recommendation_v4.data import layout
from recommendation_v4.run_config import DataConfig


def test_names_round_trip() -> None:
    assert layout.real_dataset_name("5b") == "yambda-5b"
    assert layout.synthetic_dataset_name("small", 3) == "yambda-synthetic-small-seed3"
    assert layout.parse_dataset_name("yambda-500m") == {"kind": "real", "size": "500m"}
    assert layout.parse_dataset_name("yambda-synthetic-longhist-seed12") == {
        "kind": "synthetic", "size": "longhist", "seed": 12, "content": "learnable",
    }
    assert layout.synthetic_dataset_name("small", 3, "storage") == "yambda-synthetic-small-seed3-storage"
    assert layout.parse_dataset_name("yambda-synthetic-small-seed3-storage") == {
        "kind": "synthetic", "size": "small", "seed": 3, "content": "storage",
    }


def test_the_reference_tree(tmp_path: pathlib.Path) -> None:
    """The paths of the reference's $DLRM_DATA_PATH (PR #889 README.MD, preprocess_public_data.py)."""
    directory = layout.default_dataset_dir(tmp_path, "yambda-50m")
    assert directory == tmp_path / "yambda-50m"
    assert not directory.exists()  # naming only, nothing created
    assert layout.raw_dir(directory, "50m") == directory / "raw" / "50m"
    assert layout.multi_event_path(directory, "5b") == directory / "raw" / "5b" / "multi_event.parquet"
    assert layout.shared_metadata_dir(directory) == directory / "shared_metadata"
    assert layout.MAPPING_FILES == ("artist_item_mapping.parquet", "album_item_mapping.parquet")
    assert layout.processed_dir(directory, "5b") == directory / "processed_5b"
    assert layout.cache_dir(directory, "5b", 4086) == directory / "processed_5b" / "hstu_cache_L4086"
    assert layout.cache_dir_name(60) == "hstu_cache_L60"
    assert (layout.TRAIN_SESSIONS_FILE, layout.TEST_EVENTS_FILE, layout.SESSION_INDEX_FILE,
            layout.ITEM_POPULARITY_FILE, layout.SPLIT_META_FILE) == (
        "train_sessions.parquet", "test_events.parquet", "session_index.parquet", "item_popularity.npy",
        "split_meta.json")
    assert layout.synthetic_truth_dir(directory) == directory / "synthetic_truth"


def test_a_data_root_in_an_object_store_gives_object_paths() -> None:
    directory = layout.default_dataset_dir(DataConfig(data_root="s3://bkt/prefix").location, "yambda-5b")
    assert isinstance(directory, ObjectPath) and str(directory) == "s3://bkt/prefix/yambda-5b"
    assert str(layout.cache_dir(directory, "5b", 4086)) == "s3://bkt/prefix/yambda-5b/processed_5b/hstu_cache_L4086"
    assert str(layout.shared_metadata_dir(directory)) == "s3://bkt/prefix/yambda-5b/shared_metadata"


@pytest.mark.parametrize("bad", ["yambda-1b", "yambda-synthetic-tiny", "yambda-synthetic-Tiny-seed0", "other"])
def test_bad_names_are_rejected(tmp_path: pathlib.Path, bad: str) -> None:
    with pytest.raises(ValueError, match="yambda-"):
        layout.default_dataset_dir(tmp_path, bad)


def test_bad_size_and_seed_are_rejected(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="unknown Yambda size"):
        layout.real_dataset_name("7b")
    with pytest.raises(ValueError):
        layout.synthetic_dataset_name("tiny", -1)
    for bad in ("", "5B", "../x", "a/b"):
        with pytest.raises(ValueError, match="bad dataset size"):
            layout.processed_dir(tmp_path, bad)


def test_find_size_from_what_the_directory_holds(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="no Yambda size found"):
        layout.find_size(tmp_path)
    events = pathlib.Path(layout.multi_event_path(tmp_path, "500m"))
    events.parent.mkdir(parents=True)
    events.touch()
    assert layout.find_size(tmp_path) == "500m"
    (tmp_path / "processed_500m").mkdir()  # the same size twice: still one
    assert layout.find_size(tmp_path) == "500m"
    (tmp_path / "processed_5b").mkdir()  # a prepared download of another size beside it
    with pytest.raises(ValueError, match="more than one.*500m, 5b.*--size"):
        layout.find_size(tmp_path)
    prepared = tmp_path / "prepared"
    (prepared / "processed_5b" / "hstu_cache_L4086").mkdir(parents=True)  # the reference's Option A: no raw/
    assert layout.find_size(prepared) == "5b"
