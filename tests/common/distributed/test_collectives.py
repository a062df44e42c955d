"""Collectives that make ranks agree, on 2 gloo ranks: rank 0's preparation and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from common.distributed.collectives import mean_and_sum_over_ranks, reduce_in_place, run_on_rank0
from tests.trainers.trainer_process import torchrun_reports

pytestmark = pytest.mark.over_budget(
    reason="2-rank gloo groups (torchrun), a launch per scenario; one waits past a process-group timeout")

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return torchrun_reports(HERE / "collectives_worker.py", out_dir=tmp_path_factory.mktemp("collectives"))


@pytest.mark.multiprocess
def test_rank0_preparation_shares_its_result_and_its_errors(reports):
    rank0, rank1 = reports
    assert rank0["ok"] == {"result": 42} and rank1["ok"] == {"result": None}
    # a data error on rank 0 is the same error, with the same message, on every rank
    for report in reports:
        assert report["shared"] == {"error": "MissingData",
                                    "message": "/data/x is missing: generate it with `python -m pkg.generate`"}
        assert report["config"] == {"error": "ConfigError", "message": "pkg.DataConfig.dataset must be a name"}
    # anything else: rank 0 raises its own error, the others learn that rank 0 failed (nobody waits)
    assert rank0["unexpected"]["error"] == "KeyError"
    assert rank1["unexpected"] == {"error": "Rank0Error", "message": "rank 0 failed: 'no such column'"}
    assert rank0["sum"] == rank1["sum"] == 3
    assert rank0["strings"] == rank1["strings"] == ["a", "b"]


@pytest.mark.multiprocess
def test_step_totals_reductions_and_objects_across_ranks(reports):
    rank0, rank1 = reports
    assert rank0["step_totals"] == rank1["step_totals"] == [0.5, 8]  # mean of the losses, sum of the samples
    assert rank0["summed"] == rank1["summed"] == [3.0, 6.0]
    assert rank0["maximised"] == rank1["maximised"] == [1, 5]
    assert rank0["on_rank0"] == [{"rank": 0}, {"rank": 1}] and rank1["on_rank0"] is None
    assert rank0["from_rank0"] == rank1["from_rank0"] == {"rank": 0}


def test_one_process_reports_its_own_step_totals_and_tensors_untouched():
    assert mean_and_sum_over_ranks(torch.tensor(0.125), 7) == (0.125, 7)
    values = torch.tensor([2.0, 3.0])
    assert reduce_in_place(values, op="max") is values and values.tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match="op must be one of"):
        reduce_in_place(values, op="min")


@pytest.mark.multiprocess
def test_each_rank_draws_its_own_training_and_evaluation_streams(reports):
    rank0, rank1 = reports
    assert rank0["rank_draws"] != rank1["rank_draws"]
    assert rank0["eval_draws"] != rank1["eval_draws"]
    assert rank0["rank_draws"] != rank0["eval_draws"]


def test_without_a_process_group_rank0_is_this_process():
    assert run_on_rank0(lambda: "done") == "done"
    with pytest.raises(ValueError, match="bad"):
        run_on_rank0(lambda: (_ for _ in ()).throw(ValueError("bad")), shared_errors=(ValueError,))


@pytest.mark.multiprocess
def test_ranks_wait_for_rank0_preparation_beyond_the_process_group_timeout(tmp_path):
    # the preparation group: rank 1 waits the 3 s rank 0 takes, though collectives time out after 1 s
    rank0, rank1 = torchrun_reports(HERE / "preparation_wait_worker.py", "own_timeout", out_dir=_mkdir(tmp_path / "own"))
    assert rank0["result"] == "prepared" and rank1["result"] is None
    assert rank1["waited_s"] >= 2.5
    # the same wait in the default group times out: what the preparation group is for
    rank0, rank1 = torchrun_reports(HERE / "preparation_wait_worker.py", "default_group", out_dir=_mkdir(tmp_path / "default"))
    assert "error" in rank1 and "result" not in rank1, rank1


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path
