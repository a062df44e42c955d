"""Track -> artist and album as the reference's dataset maps them (yambda.py _load_metadata)."""

from __future__ import annotations

import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recommendation_v4.data import layout, schema
from recommendation_v4.data.item_maps import ItemMaps


def _write(root: pathlib.Path, artists: dict[int, list[int]], albums: dict[int, list[int]], popularity: int | None) -> None:
    metadata = root / layout.SHARED_METADATA_DIR
    metadata.mkdir(parents=True)
    for name, group, rows in (("artist_item_mapping.parquet", "artist_id", artists),
                              ("album_item_mapping.parquet", "album_id", albums)):
        items = [i for i, gs in rows.items() for _ in gs]
        groups = [g for gs in rows.values() for g in gs]
        pq.write_table(pa.table({group: pa.array(groups, pa.uint32()), "item_id": pa.array(items, pa.uint32())}),
                       metadata / name)
    (root / "processed_x").mkdir()
    if popularity is not None:
        np.save(root / "processed_x" / layout.ITEM_POPULARITY_FILE, np.zeros(popularity, np.int64))


def test_missing_items_map_to_zero_and_a_repeated_item_takes_its_last_row(tmp_path: pathlib.Path) -> None:
    _write(tmp_path, artists={0: [7], 2: [3, 9], 5: [4]}, albums={1: [11], 5: [12]}, popularity=6)
    maps = ItemMaps.load(tmp_path, tmp_path / "processed_x")
    assert maps.num_items == 6
    assert maps.item_to_artist.tolist() == [7, 0, 9, 0, 0, 4] and maps.item_to_album.tolist() == [0, 11, 0, 0, 0, 12]
    items = np.array([1, 2, 5, 9])  # 9 is past the vocabulary
    assert maps.artists_of(items).tolist() == [0, 9, 4, 4]  # history: clipped to the last item, as the reference
    assert maps.candidate_artist(items).tolist() == [0, 9, 4, 0]  # candidate: 0, as the reference
    assert maps.candidate_album(items).tolist() == [11, 0, 12, 0]


def test_a_popularity_of_another_length_is_refused(tmp_path: pathlib.Path) -> None:
    _write(tmp_path, artists={0: [1], 3: [2]}, albums={3: [1]}, popularity=7)
    with pytest.raises(schema.DatasetError, match="7 entries but the artist/album mappings .* describe 4 items"):
        ItemMaps.load(tmp_path, tmp_path / "processed_x")


def test_no_popularity_file_is_fine_and_a_missing_mapping_is_named(tmp_path: pathlib.Path) -> None:
    _write(tmp_path, artists={0: [1]}, albums={0: [1]}, popularity=None)
    assert ItemMaps.load(tmp_path, tmp_path / "processed_x").num_items == 1
    (tmp_path / layout.SHARED_METADATA_DIR / "album_item_mapping.parquet").unlink()
    with pytest.raises(schema.DatasetError, match="album_item_mapping.parquet missing"):
        ItemMaps.load(tmp_path, tmp_path / "processed_x")
