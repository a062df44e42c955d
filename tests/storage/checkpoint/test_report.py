"""storage.checkpoint.report: the AU cost of synchronous saves, and the table's numbers."""

from __future__ import annotations

import pytest

from storage.checkpoint.report import au_cost


def test_a_save_stalls_every_accelerator_once_per_interval():
    cost = au_cost(save_s=50.0, seconds_per_step=1.35, interval_steps=1000)
    assert cost["seconds_between_saves"] == pytest.approx(1350.0)
    assert cost["au_factor"] == pytest.approx(1350.0 / 1400.0)
    assert au_cost(save_s=0.0, seconds_per_step=2.0, interval_steps=10)["au_factor"] == 1.0
    assert au_cost(save_s=5.0, seconds_per_step=1.0, interval_steps=0) is None
