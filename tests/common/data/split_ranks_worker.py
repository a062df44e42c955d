"""torchrun worker for tests/common/data/test_split_ranks.py (2 gloo ranks on CPU).

Each rank trains FLUX.1's reference layout (`rank_slices="split"`) through the trainers' loader
with no worker and no read-ahead, in lockstep (an all-reduce per step, as a gradient reduction),
over 2 epochs of 23 samples; then resumes mid-window as a relaunch from a checkpoint would.
It records, as JSON, the samples of each step, which thread read them, and the steps summed.
Usage: torchrun --nproc_per_node=2 split_ranks_worker.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from common.data.epochs import EpochSchedule
from common.data.loader import StreamingLoader
from common.distributed.process_exit import exit_rank


class _Samples:
    def __init__(self) -> None:
        self.readers: set[int] = set()

    def get_batch(self, indices):
        self.readers.add(threading.get_ident())
        return np.asarray(indices)


def _steps(schedule: EpochSchedule, loader: StreamingLoader, *, start_key: int = 0, skip: int = 0) -> list[list[int]]:
    trained = []
    keys = schedule.keys()
    for position in range(keys.index(start_key), len(keys)):
        key = keys[position]
        following = keys[position + 1] if position + 1 < len(keys) else None
        for _, batch in loader.iterate(key, skip=skip if key == start_key else 0, next_key=following):
            steps = torch.tensor([1])
            dist.all_reduce(steps)  # every rank takes part in every step, or this hangs
            assert int(steps) == dist.get_world_size()
            trained.append([int(i) for i in batch])
    return trained


def main() -> None:
    out_dir = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    schedule = EpochSchedule(num_samples=23, global_batch_size=4, world_size=world, epochs=2, batches_per_window=2,
                             shuffle=False, rank_slices="split")
    source = _Samples()

    def loader() -> StreamingLoader:
        return StreamingLoader(source=source,  # indices as the schedule gives them: epoch * 23 + sample
                               build_window=lambda key: schedule.window_batches(key, rank=rank),
                               num_workers=0, prefetch_next_window=False)

    whole = loader()
    trained = _steps(schedule, whole)
    whole.close()
    resumed_loader = loader()  # a relaunch at window 3 (epoch 1's first), batch 1: what a checkpoint records
    resumed = _steps(schedule, resumed_loader, start_key=3, skip=1)
    resumed_loader.close()
    report = {"trained": trained, "resumed": resumed,
              "readers_are_the_caller": source.readers == {threading.get_ident()}}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    exit_rank(main)
