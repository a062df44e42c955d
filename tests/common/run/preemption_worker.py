"""torchrun worker for tests/common/run/test_preemption.py (gloo, CPU).

Both ranks run a step loop with a PreemptionHandler installed; rank 1 publishes its pid
and the test sends SIGTERM to that process only. Each rank records the step at which it
stopped and what it saw, then exits 0 the way a trainer does after its final save.
Usage: torchrun --nproc_per_node=2 preemption_worker.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch.distributed as dist

from common.distributed.process_exit import exit_rank
from common.run.preemption import PreemptionHandler, agree_at_step_boundary

MAX_STEPS = 6000  # ~60 s at 10 ms a step: the signal arrives long before


def main() -> None:
    out_dir = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    handler = PreemptionHandler().install()
    dist.barrier()
    if rank == 1:
        (out_dir / "rank1.pid.tmp").write_text(str(os.getpid()))
        os.rename(out_dir / "rank1.pid.tmp", out_dir / "rank1.pid")
    # Each rank's "last save" clock is deliberately different; rank 0's must win.
    last_save = time.monotonic() - (0.0 if rank == 0 else 1000.0)
    stop_step, clocks = None, []
    for step in range(1, MAX_STEPS + 1):
        time.sleep(0.01)
        agreed = agree_at_step_boundary(
            stop_requested_locally=handler.stop_requested(distributed=False),
            seconds_since_last_save=time.monotonic() - last_save,
        )
        clocks.append(agreed.seconds_since_last_save)
        if agreed.stop:
            stop_step = step
            break
    report = {
        "rank": rank,
        "stop_step": stop_step,
        "local_flag": handler.stop_requested(distributed=False),
        "agreed_flag": handler.stop_requested(distributed=True),
        "received_signal": handler.received_signal,
        "last_clock": clocks[-1],
    }
    handler.uninstall()
    (out_dir / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    exit_rank(main)
