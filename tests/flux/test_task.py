"""FLUX.1's train step and validation on the tiny flavor, in one process."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from common.run.task import EvalPoint, StepContext
from common.randomness.streams import RandomStreams
from flux.data import layout
from flux.data.splits import open_splits
from flux.model import FluxModel, get_flavor
from flux.parallel import ParallelModel
from flux.run_config import TrainConfig
from flux.task import FluxTask

AT = EvalPoint(step=0, samples_seen=0, window_key=None, next_window_key=None)


@pytest.fixture
def splits(flux_data_root):
    return open_splits(layout.dataset_dir(flux_data_root, "synthetic-tiny-seed0"))


def _task(splits, **config) -> FluxTask:
    torch.manual_seed(0)
    module = FluxModel(get_flavor("flux-tiny"))
    cfg = dataclasses.replace(TrainConfig(), **config)
    batches = [np.arange(0, 32), np.arange(32, 64)]
    return FluxTask(
        model=ParallelModel(module=module, forward=module, kind="ddp", bf16=False),
        optimizer=torch.optim.AdamW(module.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1),
        config=cfg, empty=splits.empty, streams=RandomStreams(seed=1, rank=0), device=torch.device("cpu"),
        eval_batches=lambda at: enumerate(splits.validation.get_batch(b) for b in batches),
    )


def test_a_fresh_model_predicts_zero_so_the_loss_is_the_targets_power(splits):
    task = _task(splits)
    result = task.evaluate(AT)
    assert result.samples == 64 and result.quality == result.metrics["eval_loss"]
    per_t = [result.metrics[f"eval_loss_t{k}"] for k in range(8)]
    assert np.mean(per_t) == pytest.approx(result.quality)  # 8 samples at every t: the plain mean
    assert 1.0 < result.quality < 3.0  # E|noise - x0|^2 per value: 1 + |x0|^2


def test_per_sample_validation_draws_repeat_and_stream_draws_do_not(splits):
    keyed = _task(splits)
    assert keyed.evaluate(AT).quality == keyed.evaluate(AT).quality  # evaluations differ only by the model
    streamed = _task(splits, noise="per_rank")
    assert streamed.evaluate(AT).quality != streamed.evaluate(AT).quality


def test_training_lowers_the_loss_and_the_empty_prompt_scores_apart(splits):
    task = _task(splits, eval_unconditional=True, cfg_dropout=0.1)
    train = splits.train
    before = task.evaluate(AT)
    assert before.metrics["unconditional_eval_loss"] == pytest.approx(before.quality)  # a fresh model ignores text
    for step in range(40):
        out = task.train_step(train.get_batch(np.arange(16 * (step % 8), 16 * (step % 8) + 16)), StepContext(step=step, lr=1e-3))
        assert torch.isfinite(out.loss) and out.samples == 16
    after = task.evaluate(AT)
    assert after.quality < 0.95 * before.quality
    assert after.metrics["unconditional_eval_loss"] != after.quality  # the text now changes the prediction
    assert task.scheduled_optimizers() == [task.optimizer]
