"""Track -> artist and track -> album, in memory, as the reference's dataset loads them
(yambda.py `_load_metadata`): the vocabulary is the largest item id of either mapping file + 1,
an item missing from a file maps to 0, an item listed twice takes its last row, and an
`item_popularity.npy` of another length is refused (the two came from different preprocessing runs,
which would silently resize the embedding tables)."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pyarrow.parquet as pq

from common.object_store.location import Location, ObjectPath
from recommendation_v4.data import layout, schema


def _read_mapping(path: Location, group: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        source = io.BytesIO(path.read_bytes()) if isinstance(path, ObjectPath) else path
        table = pq.read_table(source, columns=[group, "item_id"])
    except FileNotFoundError:
        raise schema.DatasetError(f"{path} missing: the trainer maps tracks to artists and albums with it "
                                  "(it comes with the download and with the synthetic generator)") from None
    except (OSError, ValueError) as error:
        raise schema.DatasetError(f"{path}: unreadable mapping ({error})") from error
    items = table.column("item_id").to_numpy().astype(np.int64)
    groups = table.column(group).to_numpy().astype(np.int64)
    if items.size and items.min() < 0:
        raise schema.DatasetError(f"{path}: negative item_id")
    return items, groups


@dataclasses.dataclass(frozen=True)
class ItemMaps:
    item_to_artist: np.ndarray  # int64 per item id
    item_to_album: np.ndarray

    @property
    def num_items(self) -> int:
        return int(self.item_to_artist.size)

    @classmethod
    def load(cls, dataset_dir: Location, processed_dir: Location) -> "ItemMaps":
        metadata = layout.shared_metadata_dir(dataset_dir)
        artist_items, artists = _read_mapping(metadata / layout.ARTIST_MAPPING_FILE, "artist_id")
        album_items, albums = _read_mapping(metadata / layout.ALBUM_MAPPING_FILE, "album_id")
        num_items = max(int(artist_items.max(initial=-1)), int(album_items.max(initial=-1))) + 1
        popularity = processed_dir / layout.ITEM_POPULARITY_FILE
        counted = _popularity_length(popularity)
        if counted is not None and counted != num_items:
            raise schema.DatasetError(
                f"{popularity} has {counted} entries but the artist/album mappings in {metadata} describe {num_items} "
                "items: they come from different preprocessing runs; preprocess again so that both come from one")
        to_artist = np.zeros(num_items, dtype=np.int64)
        to_artist[artist_items] = artists
        to_album = np.zeros(num_items, dtype=np.int64)
        to_album[album_items] = albums
        return cls(item_to_artist=to_artist, item_to_album=to_album)

    def artists_of(self, items: np.ndarray) -> np.ndarray:
        """History items: an id past the vocabulary takes the last entry's (the reference clips)."""
        return self.item_to_artist[np.clip(items, 0, self.num_items - 1)]

    def albums_of(self, items: np.ndarray) -> np.ndarray:
        return self.item_to_album[np.clip(items, 0, self.num_items - 1)]

    def candidate_artist(self, items: np.ndarray) -> np.ndarray:
        """Candidates: an id past the vocabulary maps to 0 (the reference's target lookup)."""
        inside = items < self.num_items
        return np.where(inside, self.item_to_artist[np.where(inside, items, 0)], 0)

    def candidate_album(self, items: np.ndarray) -> np.ndarray:
        inside = items < self.num_items
        return np.where(inside, self.item_to_album[np.where(inside, items, 0)], 0)


def _popularity_length(path: Location) -> int | None:
    """Entries of item_popularity.npy from its header alone, None where there is none."""
    try:
        if isinstance(path, ObjectPath):
            from common.object_store.npy_array import ObjectNpyArray

            return len(ObjectNpyArray(path))
        if not path.is_file():
            return None
        return int(np.load(path, mmap_mode="r").shape[0])
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise schema.DatasetError(f"{path}: unreadable ({error})") from error
