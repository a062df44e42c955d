"""2 gloo processes train FLUX.1 exactly like 1 process on the same global batches and seed.

The draws are keyed per sample (flux.TrainConfig.noise = "per_sample") and every rank takes its
contiguous share of each global batch, so only the reduction order of the gradients differs.
"""

from __future__ import annotations

import pathlib

import pytest

from common.run.logs import read_metrics
from tests.trainers.trainer_process import REPO, run_command, trainer_command

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

STEPS = 6
DEBUG_GIN = REPO / "flux" / "configs" / "debug.gin"


def _run(*, nproc: int, data_root: pathlib.Path, out: pathlib.Path, name: str, parallelism: str,
         dp_replicate: int = 1) -> pathlib.Path:
    bindings = [
        f'flux.DataConfig.data_root = "{data_root}"',
        'flux.DataConfig.dataset = "synthetic-tiny-seed0"',
        "flux.DataConfig.num_workers = 0",
        'flux.DataConfig.rank_slices = "batch"',  # each rank a share of every global batch: 1 and 2 ranks alike
        'flux.TrainConfig.flavor = "flux-tiny"',
        f'flux.TrainConfig.parallelism = "{parallelism}"',
        f"flux.TrainConfig.dp_replicate = {dp_replicate}",
        "flux.TrainConfig.global_batch_size = 16",
        "flux.TrainConfig.eval_every_samples = 48",  # every 3 steps
        "flux.TrainConfig.eval_unconditional = False",
        "flux.TrainConfig.warmup_steps = 2",
        f'common.RunConfig.output_root = "{out}"',
        f'common.RunConfig.run_name = "{name}"',
        f"common.RunConfig.max_steps = {STEPS}",
        "common.RunConfig.check_compliance = False",
    ]
    run_command(trainer_command(package="flux", gin_file=DEBUG_GIN, nproc=nproc, bindings=bindings), timeout=600)
    return out / "flux" / name


@pytest.mark.parametrize(("parallelism", "dp_replicate"), [("fsdp", 1), ("fsdp", 2), ("ddp", 1)],
                         ids=["fsdp", "hsdp-2x1", "ddp"])
@pytest.mark.over_budget(reason="a 1-rank and a 2-rank FLUX.1 run (gloo) whose losses it compares")
def test_two_processes_match_one(parallelism, dp_replicate, flux_data_root, tmp_path):
    one = read_metrics(_run(nproc=1, data_root=flux_data_root, out=tmp_path, name="one", parallelism=parallelism) / "metrics.jsonl")
    two = read_metrics(_run(nproc=2, data_root=flux_data_root, out=tmp_path, name="two", parallelism=parallelism,
                            dp_replicate=dp_replicate) / "metrics.jsonl")
    losses = [[r["loss"] for r in m if "loss" in r] for m in (one, two)]
    assert len(losses[0]) == len(losses[1]) == STEPS and losses[0][0] != losses[0][-1]
    for step, (a, b) in enumerate(zip(*losses), start=1):
        assert abs(a - b) <= 1e-5 * abs(a), f"step {step}: 1 process {a} vs 2 processes {b}"
    evals = [[r for r in m if "eval_loss" in r] for m in (one, two)]
    assert [r["step"] for r in evals[0]] == [r["step"] for r in evals[1]] == [0, 3, 6]  # the untrained model first
    for a, b in zip(*evals):
        assert a["eval_samples"] == b["eval_samples"] == 64
        for key in [k for k in a if k.startswith("eval_loss")]:
            assert abs(a[key] - b[key]) <= 1e-5 * a[key], (a["step"], key)
