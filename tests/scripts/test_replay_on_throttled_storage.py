"""scripts/replay_on_throttled_storage.py: the measured side's figures (the runs themselves need root,
a loop device and DLIO; scripts/replay_on_throttled_storage.py is run by hand, see the README)."""

from __future__ import annotations

import pytest

from tests.scripts.conftest import load_script

throttled = load_script("replay_on_throttled_storage")


def _rank(steady_mean: float, steady_count: int, warmup: list[float]) -> dict:
    return {"data_wait_s": {"mean": steady_mean, "count": steady_count}, "warmup": {"data_wait_s": warmup}}


def test_the_all_steps_wait_counts_every_rank_and_its_warm_up():
    # rank 0: 3 warm-up waits of 2 s + 45 steady of 1 s; rank 1: 3 of 0 s + 45 of 0.5 s
    profile = {"ranks": [_rank(1.0, 45, [2.0, 2.0, 2.0]), _rank(0.5, 45, [0.0, 0.0, 0.0])]}
    assert throttled._all_steps_wait_mean(profile) == pytest.approx((6.0 + 45.0 + 22.5) / 96)
    # one rank alone: its own mean
    assert throttled._all_steps_wait_mean({"ranks": profile["ranks"][:1]}) == pytest.approx(51.0 / 48)


def test_a_rank_without_its_warm_up_waits_gives_no_figure():
    profile = {"ranks": [_rank(1.0, 45, [2.0, 2.0, 2.0]), {"data_wait_s": {"mean": 0.5, "count": 45}}]}
    assert throttled._all_steps_wait_mean(profile) is None
    assert throttled._all_steps_wait_mean({"ranks": []}) is None
