"""What the train window index costs each rank in memory: run under torchrun with 1 and 2 ranks.

    torchrun --nproc_per_node=2 -m recommendation_v4.bench.window_memory --dataset yambda-synthetic-medium-seed0
    torchrun --nproc_per_node=2 -m recommendation_v4.bench.window_memory --dataset ... --in-memory   # the old way

Each rank opens the dataset, builds (or maps) the train windows and reads the index of every
window it would train, as the loop does, then reports the growth of its anonymous memory (heap
pages that are this rank's alone and cannot be dropped: /proc/self/smaps_rollup Anonymous) and
of its proportional share of everything it maps (Pss: a file page mapped by N ranks counts 1/N
to each) over those steps, as one JSON line per rank. `--in-memory` builds the index in every
rank's memory, as the trainer did before the shared index.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from common.distributed.collectives import barrier, world_rank
from common.distributed.process_exit import exit_rank
from common.distributed.setup import destroy, init_distributed
from common.config.paths import DEFAULT_DATA_ROOT
from common.data.time_windows import TimeWindows


def memory_kib() -> dict[str, int]:
    """This process's Rss, Pss and anonymous memory in KiB."""
    fields = {}
    with open("/proc/self/smaps_rollup") as stream:
        for line in stream:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                fields[parts[0][:-1]] = int(parts[1])
    return {"rss": fields["Rss"], "pss": fields["Pss"], "anonymous": fields["Anonymous"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT)
    parser.add_argument("--dataset", default="yambda-synthetic-medium-seed0")
    parser.add_argument("--window-seconds", type=int, default=86_400)
    parser.add_argument("--in-memory", action="store_true", help="every rank builds the index in its memory")
    parser.add_argument("--out", type=Path, help="write the per-rank JSON lines here too")
    args = parser.parse_args(argv)

    from recommendation_v4.data_setup import prepare_data
    from recommendation_v4.model.flavors import FLAVORS
    from recommendation_v4.run_config import DataConfig

    info = init_distributed(device="cpu")
    data = prepare_data(config=DataConfig(data_root=str(args.data_root), dataset=args.dataset, cross_table_rows=1000),
                        model_config=FLAVORS["debug"], info=info, seed=1)
    barrier()
    before = memory_kib()
    started = time.perf_counter()
    if args.in_memory:
        windows = TimeWindows(data.train.anchor_timestamps(), window_seconds=args.window_seconds)
    else:
        windows = data.train_windows(window_seconds=args.window_seconds)
    seconds = time.perf_counter() - started
    for key in windows.keys():  # the index of every window, as the loop asks for it
        data.train_window_batches(windows, key, global_batch_size=128 * info.world_size, seed=1)
    barrier()
    after = memory_kib()
    report = {
        "rank": world_rank(),
        "world_size": info.world_size,
        "index": "in_memory" if args.in_memory else "shared_file",
        "train_samples": len(data.train),
        "windows": len(windows.keys()),
        "build_or_open_s": round(seconds, 2),
        "anonymous_growth_mib": round((after["anonymous"] - before["anonymous"]) / 1024, 1),
        "pss_growth_mib": round((after["pss"] - before["pss"]) / 1024, 1),
        "anonymous_total_mib": round(after["anonymous"] / 1024, 1),
    }
    line = json.dumps(report)
    print(line, flush=True)
    if args.out is not None:
        with open(args.out, "a") as stream:
            stream.write(line + "\n")
    destroy()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    exit_rank(main)
