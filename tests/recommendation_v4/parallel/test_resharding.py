"""Resuming a checkpoint under another sharding plan (recommendation_v4/parallel/resharding.py).

What the installed stack does (tests/recommendation_v4/parallel/resharding_worker.py, 2 gloo ranks): DCP
moves weights and RowWiseAdagrad state between row-wise and table-wise plans exactly; the
accumulator of a table cut into column shards is (k * rows,) instead of (rows,), so between
column-wise and other plans the load is refused in one line, or mapped ("convert") or restarted
("reset") when asked. The trainer-level tests run the same through `python -m
recommendation_v4.train` under torchrun.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.recommendation_v4.trainer_runs import DEBUG_GIN, REPO, run_trainer, tiny_bindings, train_losses
from tests.trainers.trainer_process import run_command, torchrun_reports, trainer_command

pytestmark = [pytest.mark.multiprocess, pytest.mark.over_budget(
    reason="2-rank TorchRec trainer runs that save under one sharding and resume under another")]

WORKER = REPO / "tests" / "recommendation_v4" / "parallel" / "resharding_worker.py"
ROWS = 40  # of the table that changes plans; 256 columns, two 128-column shards when column-wise


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return torchrun_reports(WORKER, out_dir=tmp_path_factory.mktemp("resharding"))


def _t(values) -> torch.Tensor:
    return torch.tensor(values)


def _assert_weights_are_the_saved_ones(loaded: dict, saved: dict) -> None:
    for key in ("wide.weight", "narrow.weight", "narrow.momentum1"):
        assert torch.equal(_t(loaded[key]), _t(saved[key])), key


def test_fbgemm_keeps_one_accumulator_per_row_and_column_shard(reports):
    one_step = reports[0]["one_step"]
    row, column = _t(one_step["row"]), _t(one_step["column"]).view(2, ROWS)
    assert row.shape == (ROWS,) and (row > 0).any()
    assert not torch.equal(column[0], column[1])  # each shard averaged g^2 over its own columns
    # the same gradients: the whole row's mean of g^2 is the mean of the two equal-width shards' means
    torch.testing.assert_close(column.mean(dim=0), row, rtol=1e-6, atol=0)


def test_row_wise_checkpoint_loads_into_table_wise_plan(reports):
    case = reports[0]["row_to_table"]
    assert case["error"] == "" and case["trained_on"]
    _assert_weights_are_the_saved_ones(case["loaded"], reports[0]["saved_row"])
    assert torch.equal(_t(case["loaded"]["wide.momentum1"]), _t(reports[0]["saved_row"]["wide.momentum1"]))


@pytest.mark.parametrize("case, old, new, back", [
    ("row_to_column_fail", "row_wise (rows in 2 shards)", "column_wise (columns in 2 shards of 128)", "row_wise"),
    ("column_to_row_fail", "column_wise (columns in 2 shards of 128)", "row_wise (rows in 2 shards)", "column_wise"),
])
def test_column_wise_against_another_plan_fails_in_one_line(reports, case, old, new, back):
    messages = [report[case] if isinstance(report[case], str) else report[case]["error"] for report in reports]
    assert messages[0] == messages[1]  # both ranks raise the same error
    message = messages[0]
    assert "\n" not in message
    assert message.startswith("checkpoint ") and "/step_3 cannot be resumed under this sharding plan" in message
    assert "the RowWiseAdagrad state of wide has another shape here" in message  # only the table that moved
    assert f"wide: {old} -> {new}" in message
    assert f"recommendation_v4.ShardingConfig.sharding_overrides = {{'wide': '{back}'}}" in message
    assert 'recommendation_v4.ShardingConfig.sparse_optimizer_on_reshard = "convert"' in message


def test_convert_row_to_column_copies_each_row_into_every_column_shard(reports):
    case, saved = reports[0]["row_to_column_convert"], reports[0]["saved_row"]
    assert case["error"] == "" and case["trained_on"]
    _assert_weights_are_the_saved_ones(case["loaded"], saved)
    column = _t(case["loaded"]["wide.momentum1"]).view(2, ROWS)
    assert torch.equal(column[0], _t(saved["wide.momentum1"])) and torch.equal(column[1], column[0])


def test_convert_column_to_row_takes_the_mean_of_the_shards(reports):
    case, saved = reports[0]["column_to_row_convert"], reports[0]["saved_column"]
    assert case["error"] == "" and case["trained_on"]
    _assert_weights_are_the_saved_ones(case["loaded"], saved)
    assert torch.equal(_t(case["loaded"]["wide.momentum1"]), _t(saved["wide.momentum1"]).view(2, ROWS).mean(dim=0))


def test_reset_loads_the_weights_and_zeroes_the_moved_accumulator(reports):
    case = reports[0]["row_to_column_reset"]
    assert case["error"] == "" and case["trained_on"]
    _assert_weights_are_the_saved_ones(case["loaded"], reports[0]["saved_row"])
    assert torch.equal(_t(case["loaded"]["wide.momentum1"]), torch.zeros(2 * ROWS))


def test_a_table_of_another_size_is_named_in_one_line(reports):
    assert reports[0]["resized"] == reports[1]["resized"]
    assert "holds tables of other sizes than this run builds (rows x dim: wide [40, 256] -> [48, 256])" in reports[0]["resized"]


# ---------------------------------------------------------------- the trainer, under torchrun

WIDE_TABLES = {"num_layers": 1, "input_dropout": 0.0, "linear_dropout": 0.0, "embedding_dim": 256}
MOVED = 'recommendation_v4.ShardingConfig.sharding_overrides = {"album_id": "column_wise", "artist_id": "column_wise"}'


def _bindings(tiny_data_root, out, name: str, *, steps: int, sharding: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [*tiny_bindings(data_root=tiny_data_root, output_root=out, run_name=name, max_steps=steps),
            f"recommendation_v4.TrainConfig.model_overrides = {WIDE_TABLES}",  # 2 column shards when column-wise
            f'recommendation_v4.ShardingConfig.default_sharding_type = "{sharding}"',
            "common.CheckpointPolicy.every_n_steps = 2", *extra]


@pytest.fixture(scope="module")
def row_wise_checkpoint(tiny_data_root, tmp_path_factory):
    """(the checkpoint root of a row-wise run stopped at step 2, the losses of 4 uninterrupted row-wise steps)"""
    out = tmp_path_factory.mktemp("row_wise_runs")
    ckpt = out / "ckpt"
    run_trainer(nproc=2, bindings=_bindings(tiny_data_root, out, "saved", steps=2, sharding="row_wise"),
                env={"CKPT_PATH": str(ckpt)})
    run_trainer(nproc=2, bindings=_bindings(tiny_data_root, out, "straight", steps=4, sharding="row_wise"),
                env={"CKPT_PATH": ""})
    return ckpt, train_losses(out / "recommendation_v4" / "straight")


def _resume(row_wise_checkpoint, tmp_path, tiny_data_root, *, sharding: str, extra: tuple[str, ...] = (),
            expect_returncode: int = 0):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(row_wise_checkpoint[0], ckpt)  # the resumed run writes its own checkpoints there
    bindings = _bindings(tiny_data_root, tmp_path, "resumed", steps=4, sharding=sharding, extra=extra)
    cmd = trainer_command(package="recommendation_v4", gin_file=DEBUG_GIN, nproc=2, bindings=bindings)
    return run_command(cmd, timeout=600, expect_returncode=expect_returncode, env={"CKPT_PATH": str(ckpt)})


@pytest.mark.slow
def test_trainer_resumes_row_wise_checkpoint_table_wise(row_wise_checkpoint, tmp_path, tiny_data_root):
    proc = _resume(row_wise_checkpoint, tmp_path, tiny_data_root, sharding="table_wise")
    assert "table_wise/fused" in proc.stdout and "[resume]" in proc.stdout and "step 2" in proc.stdout
    resumed, straight = train_losses(tmp_path / "recommendation_v4" / "resumed"), row_wise_checkpoint[1]
    assert len(resumed) == 2 and len(straight) == 4
    # the loaded weights and accumulators train on as the row-wise run did (plans agree to ~1e-5)
    for step, (a, b) in enumerate(zip(resumed, straight[2:]), start=3):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), f"step {step}: resumed table-wise {a} vs row-wise {b}"


@pytest.mark.slow
def test_trainer_refuses_row_wise_checkpoint_for_column_wise_tables_in_one_line(row_wise_checkpoint, tmp_path,
                                                                              tiny_data_root):
    proc = _resume(row_wise_checkpoint, tmp_path, tiny_data_root, sharding="row_wise", extra=(MOVED,),
                   expect_returncode=1)  # torchrun's own status when a rank exits 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("config error:")]
    # every rank raises it (the worker test above compares both ranks' messages); torchrun stops the
    # other rank as soon as one exits 2, sometimes before that rank has printed its line
    assert len(lines) in (1, 2) and len(set(lines)) == 1, lines
    assert "/ckpt/step_000000002 cannot be resumed under this sharding plan: the RowWiseAdagrad state of " \
           "album_id, artist_id has another shape here" in lines[0]
    assert "album_id: row_wise (rows in 2 shards) -> column_wise (columns in 2 shards of 128)" in lines[0]
    assert "exitcode  : 2" in proc.stderr


@pytest.mark.slow
def test_trainer_converts_when_asked_and_says_it_is_an_estimate(row_wise_checkpoint, tmp_path, tiny_data_root):
    convert = 'recommendation_v4.ShardingConfig.sparse_optimizer_on_reshard = "convert"'
    proc = _resume(row_wise_checkpoint, tmp_path, tiny_data_root, sharding="row_wise", extra=(MOVED, convert))
    said = [line for line in proc.stderr.splitlines() if "[reshard]" in line]
    assert len(said) == 2 and all("an ESTIMATE" in line for line in said)
    assert "album_id: row_wise (rows in 2 shards) -> column_wise (columns in 2 shards of 128)" in said[0]
    assert len(train_losses(tmp_path / "recommendation_v4" / "resumed")) == 2


@pytest.mark.slow
def test_trainer_resumes_a_one_rank_checkpoint_on_two_ranks_and_says_so(tiny_data_root, tmp_path):
    """A world size is part of what a run trains; DLRM-HSTU's task reshards its checkpoint, so its resume
    on another world size goes on, saying so (another benchmark's is refused: common/run/identity.py)."""
    ckpt = tmp_path / "ckpt"
    run_trainer(nproc=1, bindings=_bindings(tiny_data_root, tmp_path, "one", steps=2, sharding="row_wise"),
                env={"CKPT_PATH": str(ckpt)})
    bindings = _bindings(tiny_data_root, tmp_path, "one", steps=4, sharding="row_wise")
    cmd = trainer_command(package="recommendation_v4", gin_file=DEBUG_GIN, nproc=2, bindings=bindings)
    proc = run_command(cmd, timeout=600, env={"CKPT_PATH": str(ckpt)})
    assert "[identity] world size 1 -> 2: the task adapts the checkpoint to this world size" in proc.stdout
    assert f"[resume] {ckpt / 'step_000000002'}: step 2," in proc.stdout
    assert len(train_losses(tmp_path / "recommendation_v4" / "one")) == 4
