"""Per-image annotation records, and a table that packs many of them into flat numpy arrays.

The reference train split has 1,170,301 images. As a list of Python objects their reference
counts change whenever a forked loader worker touches them, so every worker slowly copies
the whole list; a handful of numpy arrays stays shared between all workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np


@dataclasses.dataclass(frozen=True)
class ImageRecord:
    """One image and its boxes, in the original image's pixel coordinates."""

    image_id: int
    file_name: str
    width: int
    height: int
    boxes_xyxy: np.ndarray  # float32 [N, 4], clamped to the image, positive width and height
    category_ids: np.ndarray  # int64 [N]


class ImageRecordTable(Sequence[ImageRecord]):
    """An immutable sequence of ImageRecord stored column-wise; indexing builds records on demand."""

    def __init__(
        self,
        *,
        image_ids: np.ndarray,
        widths: np.ndarray,
        heights: np.ndarray,
        name_bytes: np.ndarray,
        name_offsets: np.ndarray,
        boxes_xyxy: np.ndarray,
        category_ids: np.ndarray,
        box_offsets: np.ndarray,
    ) -> None:
        count = len(image_ids)
        if not (len(widths) == len(heights) == count and len(name_offsets) == len(box_offsets) == count + 1):
            raise ValueError("record columns disagree in length")
        if len(boxes_xyxy) != len(category_ids) or box_offsets[-1] != len(boxes_xyxy):
            raise ValueError("box columns disagree in length")
        self.image_ids = image_ids
        self.widths = widths
        self.heights = heights
        self.name_bytes = name_bytes  # all file names, UTF-8, back to back
        self.name_offsets = name_offsets
        self.boxes_xyxy = boxes_xyxy
        self.category_ids = category_ids
        self.box_offsets = box_offsets

    @classmethod
    def from_records(cls, records: Iterable[ImageRecord]) -> ImageRecordTable:
        records = list(records)
        names = [record.file_name.encode() for record in records]
        box_counts = [len(record.boxes_xyxy) for record in records]
        return cls(
            image_ids=np.asarray([r.image_id for r in records], dtype=np.int64),
            widths=np.asarray([r.width for r in records], dtype=np.int32),
            heights=np.asarray([r.height for r in records], dtype=np.int32),
            name_bytes=np.frombuffer(b"".join(names), dtype=np.uint8).copy(),
            name_offsets=np.concatenate([[0], np.cumsum([len(n) for n in names])]).astype(np.int64),
            boxes_xyxy=np.concatenate([r.boxes_xyxy for r in records]).astype(np.float32).reshape(-1, 4)
            if records
            else np.zeros((0, 4), np.float32),
            category_ids=np.concatenate([r.category_ids for r in records]).astype(np.int64)
            if records
            else np.zeros(0, np.int64),
            box_offsets=np.concatenate([[0], np.cumsum(box_counts)]).astype(np.int64),
        )

    def __len__(self) -> int:
        return len(self.image_ids)

    @property
    def num_boxes(self) -> int:
        return len(self.boxes_xyxy)

    def _record(self, index: int) -> ImageRecord:
        if not -len(self) <= index < len(self):
            raise IndexError(f"record {index} out of range for {len(self)} records")
        index %= len(self)
        first, last = self.box_offsets[index], self.box_offsets[index + 1]
        name = self.name_bytes[self.name_offsets[index] : self.name_offsets[index + 1]].tobytes().decode()
        return ImageRecord(
            image_id=int(self.image_ids[index]),
            file_name=name,
            width=int(self.widths[index]),
            height=int(self.heights[index]),
            boxes_xyxy=self.boxes_xyxy[first:last],
            category_ids=self.category_ids[first:last],
        )

    def take(self, indices: Sequence[int] | np.ndarray) -> ImageRecordTable:
        """A new table of the records at `indices` (a window's block of files, a shard, a shuffle)."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(indices) and (indices.min() < -len(self) or indices.max() >= len(self)):
            raise IndexError(f"indices out of range for {len(self)} records")
        indices %= max(len(self), 1)
        name_starts, name_ends = self.name_offsets[indices], self.name_offsets[indices + 1]
        box_starts, box_ends = self.box_offsets[indices], self.box_offsets[indices + 1]
        name_positions = _ranges(name_starts, name_ends)
        box_positions = _ranges(box_starts, box_ends)
        return ImageRecordTable(
            image_ids=self.image_ids[indices],
            widths=self.widths[indices],
            heights=self.heights[indices],
            name_bytes=self.name_bytes[name_positions],
            name_offsets=np.concatenate([[0], np.cumsum(name_ends - name_starts)]).astype(np.int64),
            boxes_xyxy=self.boxes_xyxy[box_positions],
            category_ids=self.category_ids[box_positions],
            box_offsets=np.concatenate([[0], np.cumsum(box_ends - box_starts)]).astype(np.int64),
        )

    @overload
    def __getitem__(self, index: int) -> ImageRecord: ...

    @overload
    def __getitem__(self, index: slice) -> ImageRecordTable: ...

    def __getitem__(self, index: int | slice) -> ImageRecord | ImageRecordTable:
        if isinstance(index, slice):
            return self.take(np.arange(len(self))[index])
        return self._record(int(index))

    def __iter__(self) -> Iterator[ImageRecord]:
        for index in range(len(self)):
            yield self._record(index)


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of arange(start, end) for each pair, without a Python loop."""
    lengths = ends - starts
    if lengths.sum() == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return np.arange(lengths.sum(), dtype=np.int64) + offsets
