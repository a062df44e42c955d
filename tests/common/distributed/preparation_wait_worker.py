"""torchrun worker for tests/common/distributed/test_collectives.py: rank 0 prepares for longer than the
process-group timeout while the other rank waits.

Usage: torchrun --nproc_per_node=2 preparation_wait_worker.py MODE OUT_DIR
MODE "own_timeout": the waiting happens in the preparation group (60 s); "default_group": in the
default group, whose timeout (1 s) is shorter than rank 0's preparation (3 s).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from common.distributed.collectives import run_on_rank0, world_rank
from common.distributed.process_exit import exit_rank
from common.distributed.setup import init_distributed

PROCESS_GROUP_TIMEOUT_S = 1.0
PREPARATION_S = 3.0


def _prepare() -> str:
    time.sleep(PREPARATION_S)
    return "prepared"


def main() -> None:
    mode, out_dir = sys.argv[1], Path(sys.argv[2])
    init_distributed(device="cpu", timeout_s=PROCESS_GROUP_TIMEOUT_S,
                     preparation_timeout_s=60.0 if mode == "own_timeout" else None)
    started = time.monotonic()
    try:
        report = {"result": run_on_rank0(_prepare)}
    except Exception as error:  # noqa: BLE001 - the test reads what each rank saw
        report = {"error": f"{type(error).__name__}: {error}"[:300]}
    report["waited_s"] = round(time.monotonic() - started, 2)
    (out_dir / f"rank{world_rank()}.json").write_text(json.dumps(report))
    # a timed-out gloo group cannot be torn down cleanly: leave without another collective
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    exit_rank(main)
