"""Two gloo ranks under torchrun: sharded TorchRec state, fused optimizer, fallback agreement."""

from pathlib import Path

import pytest

from tests.trainers.trainer_process import torchrun_reports

pytestmark = pytest.mark.over_budget(
    reason="its module fixture runs the 2-rank gloo save/restore scenarios once; the first test pays for them")

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return torchrun_reports(HERE / "dmp_checkpoint_worker.py", out_dir=tmp_path_factory.mktemp("dmp_checkpoint"))


@pytest.mark.multiprocess
def test_row_wise_shards_and_fused_optimizer_state_round_trip_bit_exactly(reports):
    for report in reports:
        # each rank holds one row-wise shard of both tables and of their momentum
        assert len(report["sharded_local_keys"]) == 4
        assert report["fresh_differs_before_load"]
        assert report["loaded_name"] == "step_4" and report["loaded_global_step"] == 4
        assert report["mismatched_after_load"] == []
        assert report["param_groups_equal"]
        assert report["rng_replayed"]
        assert report["next_loss_equal"] and report["mismatched_after_next_step"] == []


@pytest.mark.multiprocess
def test_failure_seen_by_one_rank_moves_both_to_the_same_older_checkpoint(reports):
    rank0, rank1 = (report["rank_local"] for report in reports)
    assert rank0["loaded_name"] == rank1["loaded_name"] == "step_3"
    assert "failed on another rank" in rank0["warnings"][0]
    assert "rank00001.json" not in rank0["warnings"][0] and "JSONDecodeError" in rank1["warnings"][0]
    for side in (rank0, rank1):
        assert "checkpoints/step_4 could not be loaded" in side["warnings"][0]
        assert side["mismatched"] == [] and side["loss4_equal"]


@pytest.mark.multiprocess
def test_corrupt_dcp_payload_falls_back_on_every_rank(reports):
    for report in reports:
        payload = report["payload"]
        assert payload["loaded_name"] == "step_3"
        assert "checkpoints/step_5 could not be loaded (DCP load failed" in payload["warnings"][0]
        assert "checkpoints/step_4 could not be loaded" in payload["warnings"][1]
        assert payload["mismatched"] == []
