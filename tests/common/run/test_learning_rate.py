"""Learning-rate schedules as pure functions of the step, applied to the optimizers' current groups."""

from __future__ import annotations

import pytest
import torch

from common.run.learning_rate import FactorWarmup, LinearWarmup, apply_learning_rate


def test_linear_warmup_moves_on_the_first_step_and_reaches_the_rate_at_warmup_steps() -> None:
    schedule = LinearWarmup(base_lr=1.0, warmup_steps=4)
    assert [schedule.lr_at(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert LinearWarmup(base_lr=2.0, warmup_steps=0).lr_at(0) == 2.0
    assert LinearWarmup(base_lr=2.0, warmup_steps=4).lr_at(100) == 2.0
    with pytest.raises(ValueError, match="step must be >= 0"):
        schedule.lr_at(-1)


def test_factor_warmup_is_linear_from_the_factor_then_flat() -> None:
    schedule = FactorWarmup.from_epochs(base_lr=1e-4, warmup_epochs=1, warmup_factor=1e-3, steps_per_epoch=4)
    assert schedule.warmup_steps == 4
    lrs = [schedule.lr_at(step) for step in range(6)]
    expected = [1e-4 * (1e-3 * (1 - i / 4) + i / 4) for i in range(4)] + [1e-4, 1e-4]
    assert lrs == pytest.approx(expected, rel=1e-12)
    assert lrs[0] == pytest.approx(1e-7)
    assert FactorWarmup(base_lr=0.5, warmup_steps=0, warmup_factor=0.1).lr_at(0) == 0.5
    with pytest.raises(ValueError, match="warmup_factor"):
        FactorWarmup(base_lr=1.0, warmup_steps=1, warmup_factor=0.0)


def test_the_rate_reaches_an_optimizer_whose_groups_were_replaced_by_a_load() -> None:
    """load_state_dict replaces param_groups: a schedule that kept the old list would steer nothing."""
    param = torch.nn.Parameter(torch.ones(2))
    adam = torch.optim.Adam([param], lr=0.1)
    stale_groups = adam.param_groups
    adam.load_state_dict(adam.state_dict())
    assert adam.param_groups is not stale_groups
    apply_learning_rate([adam], 0.5)
    assert adam.param_groups[0]["lr"] == 0.5 and stale_groups[0]["lr"] == 0.1
