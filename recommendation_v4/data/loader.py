"""A torch DataLoader that turns given arrays of sample indices into `HSTUBatch`es."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from recommendation_v4.data.batch import HSTUBatch


class BatchSource(Protocol):
    def get_batch(self, indices: np.ndarray) -> HSTUBatch: ...


class _IndexBatches(torch.utils.data.Dataset):
    """Item j is the batch of index array j; the whole batch is built in one worker call."""

    def __init__(self, source: BatchSource, index_batches: Sequence[np.ndarray]) -> None:
        self.source = source
        self.index_batches = [np.asarray(b, dtype=np.int64) for b in index_batches]

    def __len__(self) -> int:
        return len(self.index_batches)

    def __getitem__(self, j: int) -> HSTUBatch:
        return self.source.get_batch(self.index_batches[j])


def _already_batched(batch: HSTUBatch) -> HSTUBatch:
    return batch


def make_batch_loader(
    dataset: BatchSource,
    index_batches: Sequence[np.ndarray],
    num_workers: int,
    *,
    pin_memory: bool = False,
    prefetch_factor: int = 2,
    multiprocessing_context: Any = None,
) -> torch.utils.data.DataLoader:
    """Yields `dataset.get_batch(b)` for each b of `index_batches`, in order.

    Workers are persistent (when num_workers > 0) so that a new pass over the loader, e.g. the
    next time window, does not pay the worker start-up and memory-map opening again.
    """
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    return torch.utils.data.DataLoader(
        _IndexBatches(dataset, index_batches),
        batch_size=None,
        shuffle=False,
        num_workers=num_workers,
        collate_fn=_already_batched,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
        multiprocessing_context=multiprocessing_context if num_workers > 0 else None,
    )
