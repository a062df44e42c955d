import pytest

from common.checkpoint.policy import CheckpointPolicy, CheckpointReason, checkpoint_reason
from common.config.checks import ConfigError

ALL_ON = CheckpointPolicy(
    path="/ckpt", every_n_batches_in_window=10, every_n_steps=25, every_seconds=600.0, at_window_end=True
)


def reason(policy, *, step=1, batch=1, seconds=0.0, window_ended=False, preempt=False):
    return checkpoint_reason(
        policy,
        global_step=step,
        batch_idx_in_window=batch,
        seconds_since_last_save=seconds,
        window_ended=window_ended,
        preempt_requested=preempt,
    )


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, None),
        ({"step": 25, "batch": 3}, CheckpointReason.EVERY_N_STEPS),
        ({"step": 26, "batch": 10}, CheckpointReason.EVERY_N_BATCHES_IN_WINDOW),
        ({"step": 26, "batch": 11, "seconds": 600.0}, CheckpointReason.EVERY_SECONDS),
        ({"step": 26, "batch": 11, "seconds": 599.9}, None),
        ({"step": 7, "batch": 7, "window_ended": True}, CheckpointReason.WINDOW_END),
        ({"step": 7, "batch": 7, "preempt": True}, CheckpointReason.PREEMPTION),
        # precedence: preemption > window end > steps > batches > seconds
        ({"step": 50, "batch": 20, "seconds": 9e9, "window_ended": True, "preempt": True}, CheckpointReason.PREEMPTION),
        ({"step": 50, "batch": 20, "seconds": 9e9, "window_ended": True}, CheckpointReason.WINDOW_END),
        ({"step": 50, "batch": 20, "seconds": 9e9}, CheckpointReason.EVERY_N_STEPS),
        ({"step": 51, "batch": 20, "seconds": 9e9}, CheckpointReason.EVERY_N_BATCHES_IN_WINDOW),
        # nothing has been trained yet: counters at 0 never fire
        ({"step": 0, "batch": 0}, None),
    ],
)
def test_cadence_table(kwargs, expected):
    assert reason(ALL_ON, **kwargs) == expected


def test_reason_is_a_plain_string():
    assert reason(ALL_ON, step=25) == "every_n_steps"


def test_disabled_cadences_never_fire():
    only_steps = CheckpointPolicy(path="/ckpt", every_n_steps=5)
    assert reason(only_steps, step=10, batch=10, seconds=1e9, window_ended=True) == CheckpointReason.EVERY_N_STEPS
    assert reason(only_steps, step=11, batch=10, seconds=1e9, window_ended=True) is None


def test_no_path_means_off_even_on_preemption():
    off = CheckpointPolicy(path="", every_n_steps=1, at_window_end=True)
    assert not off.enabled
    assert reason(off, step=1, window_ended=True, preempt=True) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("every_n_steps", -1), ("every_seconds", -0.5), ("every_n_batches_in_window", 2.5), ("keep_last_n", 0),
     ("at_window_end", 1), ("path", None)],
)
def test_bad_policy_is_a_config_error_naming_the_binding(field, value):
    with pytest.raises(ConfigError, match=f"^common.CheckpointPolicy.{field} must be .*, got {value!r}$"):
        CheckpointPolicy(**{field: value})


def test_negative_counters_are_rejected():
    with pytest.raises(ValueError, match="global_step=-1"):
        reason(ALL_ON, step=-1)
