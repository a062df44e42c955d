"""torchrun worker for tests/common/distributed/test_collectives.py (2 gloo ranks on CPU).

Each rank records, as JSON, what rank 0's preparation step gave it (a result, a shared error,
an unexpected error) and the first draws of its random streams.
Usage: torchrun --nproc_per_node=2 collectives_worker.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from common.distributed.collectives import (
    Rank0Error,
    mean_and_sum_over_ranks,
    object_from_rank0,
    objects_on_rank0,
    reduce_in_place,
    run_on_rank0,
    strings_from_rank0,
    sum_over_ranks,
)
from common.distributed.process_exit import exit_rank
from common.config.checks import ConfigError
from common.randomness.streams import RandomStreams


class MissingData(RuntimeError):
    pass


def _outcome(fn, shared) -> dict:
    try:
        return {"result": run_on_rank0(fn, shared_errors=shared)}
    except Exception as error:  # noqa: BLE001 - the test inspects what each rank saw
        return {"error": type(error).__name__, "message": str(error)}


def _missing() -> None:
    raise MissingData("/data/x is missing: generate it with `python -m pkg.generate`")


def _bug() -> None:
    raise KeyError("no such column")


def main() -> None:
    out_dir = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    streams = RandomStreams(seed=7, rank=rank)
    report = {
        "ok": _outcome(lambda: 42, (ConfigError, MissingData)),
        "shared": _outcome(_missing, (ConfigError, MissingData)),
        "config": _outcome(lambda: (_ for _ in ()).throw(ConfigError("pkg.DataConfig.dataset must be a name")),
                           (ConfigError, MissingData)),
        "unexpected": _outcome(_bug, (ConfigError, MissingData)),
        "sum": sum_over_ranks(rank + 1),
        "strings": strings_from_rank0(["a", "b"] if rank == 0 else []),
        "rank_draws": torch.rand(4, generator=streams.rank).tolist(),
        "eval_draws": torch.rand(4, generator=streams.eval).tolist(),
        "rank0_error_class": Rank0Error.__name__,
        # a step's loss 0.25 / 0.75 over 3 / 5 samples: the loop logs the mean loss and the total samples
        "step_totals": mean_and_sum_over_ranks(torch.tensor(0.25 + 0.5 * rank), 3 + 2 * rank),
        "summed": reduce_in_place(torch.tensor([1.0, 2.0]) * (rank + 1)).tolist(),
        "maximised": reduce_in_place(torch.tensor([rank, 5 - rank]), op="max").tolist(),
        "on_rank0": objects_on_rank0({"rank": rank}),
        "from_rank0": object_from_rank0({"rank": rank}),
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    exit_rank(main)
