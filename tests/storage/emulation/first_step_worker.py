"""One of 2 gloo ranks for tests/storage/emulation/test_task.py: an emulated accelerator's steps, the
training loop's per-step agreement after each, and one rank whose first batch comes late.

argv: rank, FileStore path, seconds this rank's first batch is late, output JSON path.
"""

from __future__ import annotations

import json
import sys
import time

import torch.distributed as dist

from common.distributed.collectives import max_over_ranks
from common.distributed.process_exit import exit_rank
from common.run.task import StepContext
from storage.emulation.task import EmulatedTask


def main() -> None:
    rank, store_path, late_s, out = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)
    task = EmulatedTask(seconds_per_step=0.02, stdev_s=0.0, seed=0, rank=rank, count_samples=len)
    for step in range(6):
        if step == 0:
            time.sleep(late_s)  # this rank's first batch: a slower host's cold start
        task.train_step([0], StepContext(step=step, lr=None))
        max_over_ranks([0.0, 0.0])  # the loop's agreement at every step boundary (common.run.preemption)
    with open(out, "w") as file:
        json.dump(task.utilisation(), file)
    dist.destroy_process_group()


if __name__ == "__main__":
    exit_rank(main)  # a gloo group ends here without its threads aborting the exit
