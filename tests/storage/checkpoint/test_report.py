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


def test_the_au_line_says_its_stall_is_the_mean_of_the_saves_above_it():
    """The printed saves are each one save; the AU line's stall is their mean (docs/checkpoints.md's two
    bases): it says so, so a reader does not take it for one of the saves."""
    from storage.checkpoint.report import lines

    save = {"bytes": 4.4e9, "save_s": 12.48, "write_gb_s": 0.36, "fsync_s_max": 3.8, "device": {}}
    summary = {"benchmark": "flux", "flavor": "flux-schnell", "world_size": 64, "host_ranks": [0, 1],
               "full_save": {"bytes": 1.4e11, "files": 131, "data_files": 64, "rank_bytes_min": 2.2e9,
                             "rank_bytes_max": 2.2e9, "metadata_bytes": 1.9e7},
               "saves": [{**save, "name": "step_1"}, {**save, "name": "step_2", "save_s": 10.36}], "restores": [],
               "au": {"accelerator": "b200", "seconds_per_step": 1.35,
                      **au_cost(save_s=11.42, seconds_per_step=1.35, interval_steps=1000)}}
    (au_line,) = [line for line in lines(summary) if "AU cost" in line]
    assert "stalls 11.42 s (the mean of 2 saves above)" in au_line
