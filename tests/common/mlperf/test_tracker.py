import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import common.mlperf.tracker as mllog_module
from common.mlperf.tracker import MLPerfTracker

# The reference DLRMv4 recipe (mlcommons/training PR #889, rules training_6.1.0/closed_dlrmv4.yaml).
DLRMV4_TRAIN_SAMPLES = 2_290_835_423
DLRMV4_GBS = 8192
DLRMV4_EVAL_INTERVAL = math.ceil(0.001 * DLRMV4_TRAIN_SAMPLES / DLRMV4_GBS) * DLRMV4_GBS  # 2,293,760
DLRMV4_FIRST_EVAL_BLOCK = 25  # first grid point the rules accept at GBS 8192
DLRMV4_HYPERPARAMETERS = {
    "global_batch_size": DLRMV4_GBS,
    "micro_batch_size": 1024,
    "gradient_accumulation_steps": 1,
    "seed": 1234,
    "train_samples": DLRMV4_TRAIN_SAMPLES,
    "eval_samples": 2_058_204,
    "max_sequence_length": 4096,
    "eval_every_data_pct": 0.001,
    "optimizer": "Adam",
    "learning_rate": 1e-6 * DLRMV4_GBS / 8192,
    "adam_beta1": 0.95,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "weight_decay": 0.0,
    "gradient_clip_norm": 1.0,
    "sparse_optimizer": "RowWiseAdagrad",
    "sparse_learning_rate": 1e-6 * DLRMV4_GBS / 8192,
    "warmup_steps": 24000,
    "warmup_start_lr": 0.0,
    "precision_linear": "bfloat16",
    "precision_attn": "bfloat16",
    "precision_comm": "fp32",
    "tensor_parallelism": 1,
    "pipeline_parallelism": 1,
    "context_parallelism": 1,
    "expert_parallelism": 1,
    "config_filename": "yambda_5b.gin",
}


def start_dlrmv4_run(path: Path, *, hyperparameters=DLRMV4_HYPERPARAMETERS) -> MLPerfTracker:
    tracker = MLPerfTracker(benchmark="dlrmv4", log_path=path, resume=False)
    tracker.cache_clear()
    tracker.init_start()
    tracker.submission(org="reference", platform="cpu-2core", division="closed", status="onprem")
    tracker.hyperparameters(hyperparameters)
    tracker.run_start()
    return tracker


def train_blocks(tracker: MLPerfTracker, blocks: range, aucs: dict[int, float]) -> None:
    """One block per eval interval; an eval after the blocks listed in ``aucs``."""
    for block in blocks:
        tracker.block_start(samples_count=block * DLRMV4_EVAL_INTERVAL)
        done = (block + 1) * DLRMV4_EVAL_INTERVAL
        tracker.block_stop(samples_count=done)
        if block + 1 in aucs:
            tracker.eval_start(samples_count=done)
            tracker.eval_accuracy(aucs[block + 1], samples_count=done)
            tracker.eval_stop(samples_count=done)


def parse_log(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    assert lines and all(line.startswith(":::MLLOG {") for line in lines)
    return [json.loads(line[len(":::MLLOG "):]) for line in lines]


def keys(path: Path) -> list[str]:
    return [event["key"] for event in parse_log(path)]


def run_checker(log: Path, ruleset: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
         "--ruleset", ruleset, str(log), "--log_output", str(tmp_path / "checker.log")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )


def test_reference_dlrmv4_log_passes_the_official_checker(tmp_path):
    log = tmp_path / "mllog.log"
    tracker = start_dlrmv4_run(log)
    train_blocks(tracker, range(27), {25: 0.741, 26: 0.748, 27: 0.7512})
    tracker.run_stop(success=True, samples_count=27 * DLRMV4_EVAL_INTERVAL)
    result = run_checker(log, "6.1.0", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_train_loss_events_carry_the_step_and_position_and_pass_the_checker(tmp_path):
    log = tmp_path / "mllog.log"
    tracker = MLPerfTracker(benchmark="dlrmv4", log_path=log, resume=False)
    with pytest.raises(RuntimeError, match="outside the timed run"):
        tracker.train_loss(0.5, step=1, samples_count=8192)
    tracker.close()
    tracker = start_dlrmv4_run(log)
    for block in range(27):
        tracker.block_start(samples_count=block * DLRMV4_EVAL_INTERVAL)
        tracker.train_loss(0.7 - block / 100, step=(block + 1) * 280, samples_count=(block + 1) * DLRMV4_EVAL_INTERVAL)
        tracker.block_stop(samples_count=(block + 1) * DLRMV4_EVAL_INTERVAL)
        if block + 1 >= 25:
            done = (block + 1) * DLRMV4_EVAL_INTERVAL
            tracker.eval_start(samples_count=done)
            tracker.eval_accuracy(0.76, samples_count=done)
            tracker.eval_stop(samples_count=done)
    tracker.run_stop(success=True, samples_count=27 * DLRMV4_EVAL_INTERVAL)
    losses = [e for e in parse_log(log) if e["key"] == "train_loss"]
    assert len(losses) == 27 and losses[0]["value"] == 0.7
    assert losses[0]["metadata"]["step"] == 280 and losses[0]["metadata"]["samples_count"] == DLRMV4_EVAL_INTERVAL
    result = run_checker(log, "6.1.0", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("change", "failure"),
    [
        ({"learning_rate": 1e-5, "sparse_learning_rate": 1e-5}, "opt_base_learning_rate"),
        ({"max_sequence_length": 2048}, "max_sequence_length"),
    ],
)
def test_checker_rejects_a_log_off_the_reference_recipe(tmp_path, change, failure):
    log = tmp_path / "mllog.log"
    tracker = start_dlrmv4_run(log, hyperparameters={**DLRMV4_HYPERPARAMETERS, **change})
    train_blocks(tracker, range(26), {25: 0.74, 26: 0.76})
    tracker.run_stop(success=True)
    result = run_checker(log, "6.1.0", tmp_path)
    assert result.returncode != 0 and failure in result.stdout + result.stderr


def test_checker_rejects_an_eval_before_the_first_grid_point(tmp_path):
    log = tmp_path / "mllog.log"
    tracker = start_dlrmv4_run(log)
    train_blocks(tracker, range(26), {24: 0.70, 26: 0.76})
    tracker.run_stop(success=True)
    result = run_checker(log, "6.1.0", tmp_path)
    assert result.returncode != 0
    assert "FIRST_CHECK" in result.stdout + result.stderr or "first_eval_samples" in result.stdout + result.stderr


def test_retinanet_epoch_log_passes_the_5_1_checker(tmp_path):
    log = tmp_path / "mllog.log"
    tracker = MLPerfTracker(benchmark="retinanet", log_path=log, resume=False)
    tracker.cache_clear()
    tracker.init_start()
    tracker.submission(org="reference", platform="cpu-2core", division="closed", status="onprem")
    tracker.hyperparameters({
        "global_batch_size": 256, "gradient_accumulation_steps": 1, "seed": 7, "optimizer": "adam",
        "learning_rate": 1e-4, "weight_decay": 0.0, "warmup_epochs": 1, "warmup_factor": 1e-3,
        "train_samples": 1_170_301, "eval_samples": 24_781,
    })
    tracker.run_start()
    for epoch, mean_ap in enumerate([0.21, 0.30, 0.341]):
        tracker.block_start(epoch_num=epoch)
        tracker.block_stop(epoch_num=epoch)
        tracker.eval_start(epoch_num=epoch)
        tracker.eval_accuracy(mean_ap, epoch_num=epoch)
        tracker.eval_stop(epoch_num=epoch)
    tracker.run_stop(success=True, epoch_num=2)
    result = run_checker(log, "5.1.0", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert keys(log).count("epoch_start") == 3 and keys(log).count("block_start") == 3


def test_resume_logs_one_init_and_run_start_and_one_run_stop(tmp_path):
    log = tmp_path / "mllog.log"
    log.write_text("left over from an older run\n")
    first = start_dlrmv4_run(log)  # cold start truncates
    train_blocks(first, range(25), {25: 0.70})
    persisted = first.state_dict()
    first.close()  # the process is preempted here; the checkpoint holds `persisted`

    resumed = MLPerfTracker(benchmark="dlrmv4", log_path=log, resume=True)
    # the resumed process runs the same start-up code; none of it may reach the log
    resumed.cache_clear()
    resumed.init_start()
    resumed.submission(org="reference", platform="cpu-2core", division="closed", status="onprem")
    resumed.hyperparameters(DLRMV4_HYPERPARAMETERS)
    resumed.load_state_dict(persisted)
    resumed.run_start()
    train_blocks(resumed, range(25, 27), {26: 0.745, 27: 0.752})
    resumed.run_stop(success=True)
    resumed.run_stop(success=False)  # idempotent: the run already stopped
    logged = keys(log)
    assert "left over" not in log.read_text()
    for key in ("cache_clear", "init_start", "init_stop", "run_start", "run_stop", "submission_org", "seed"):
        assert logged.count(key) == 1, key
    assert logged.index("run_start") < logged.index("block_start") and logged[-1] == "run_stop"
    assert parse_log(log)[-1]["metadata"]["status"] == "success"
    assert resumed.state_dict() == {"run_started": True, "run_stopped": True}
    assert run_checker(log, "6.1.0", tmp_path).returncode == 0


def test_resumed_tracker_before_run_start_still_completes_the_init_phase(tmp_path):
    log = tmp_path / "mllog.log"
    first = MLPerfTracker(benchmark="dlrmv4", log_path=log, resume=False)
    first.cache_clear()
    first.init_start()
    first.close()  # a checkpoint taken before run_start persisted run_started=False
    resumed = MLPerfTracker(benchmark="dlrmv4", log_path=log, resume=True)
    resumed.load_state_dict({"run_started": False, "run_stopped": False})
    resumed.run_start()
    assert keys(log) == ["cache_clear", "init_start", "init_stop", "run_start"]


def test_aborted_run_and_event_metadata(tmp_path):
    log = tmp_path / "mllog.log"
    tracker = start_dlrmv4_run(log)
    tracker.eval_start(samples_count=10)
    tracker.eval_accuracy(0.5, samples_count=10)
    tracker.eval_stop(samples_count=10)
    tracker.run_stop(success=False, samples_count=10)
    events = parse_log(log)
    accuracy = next(e for e in events if e["key"] == "eval_accuracy")
    assert accuracy["value"] == 0.5 and accuracy["metadata"]["samples_count"] == 10
    # the call site recorded is the caller of the tracker, not the tracker itself
    assert accuracy["metadata"]["file"] == __file__
    assert events[-1]["metadata"]["status"] == "aborted" and events[-1]["event_type"] == "INTERVAL_END"


def test_only_rank_zero_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(mllog_module, "world_rank", lambda: 1)
    tracker = start_dlrmv4_run(tmp_path / "mllog.log")
    tracker.run_stop(success=True)
    assert not (tmp_path / "mllog.log").exists()
    assert tracker.state_dict() == {"run_started": True, "run_stopped": True}


def test_bad_calls_are_clear_errors(tmp_path):
    tracker = MLPerfTracker(benchmark="dlrmv4", log_path=tmp_path / "mllog.log", resume=False)
    with pytest.raises(ValueError, match=r"unknown names \['learning_rat'\]"):
        tracker.hyperparameters({"learning_rat": 1e-6})
    with pytest.raises(ValueError, match="precision_comm='bf16' is not one of"):
        tracker.hyperparameters({"precision_comm": "bf16"})
    with pytest.raises(ValueError, match="global_batch_size must be an int >= 1"):
        tracker.hyperparameters({"global_batch_size": 0})
    with pytest.raises(ValueError, match="division must be 'closed' or 'open'"):
        tracker.submission(org="a", platform="b", division="Closed", status="onprem")
    with pytest.raises(RuntimeError, match="before init_start"):
        tracker.run_start()
    with pytest.raises(RuntimeError, match="outside the timed run"):
        tracker.block_start(samples_count=0)
    tracker.init_start()
    tracker.hyperparameters({"seed": 1})
    with pytest.raises(ValueError, match="'seed' was already logged"):
        tracker.hyperparameters({"seed": 1})
    tracker.run_start()
    with pytest.raises(ValueError, match="exactly one of samples_count= or epoch_num="):
        tracker.block_start(samples_count=0, epoch_num=0)
    with pytest.raises(ValueError, match="exactly one of samples_count= or epoch_num="):
        tracker.eval_stop()
    with pytest.raises(ValueError, match="finite number"):
        tracker.eval_accuracy(float("nan"), samples_count=1)
    with pytest.raises(TypeError, match="success must be a bool"):
        tracker.run_stop(success=1)
    with pytest.raises(ValueError, match="needs a bool 'run_stopped'"):
        tracker.load_state_dict({"run_started": True})


def test_run_stop_before_run_start_logs_nothing(tmp_path):
    tracker = MLPerfTracker(benchmark="dlrmv4", log_path=tmp_path / "mllog.log", resume=False)
    tracker.init_start()
    with pytest.warns(UserWarning, match="before run_start"):
        tracker.run_stop(success=False)
    assert keys(tmp_path / "mllog.log") == ["init_start"]
