"""A short tiny training run: mAP rises above the untrained model's, and its mllog follows the epochs.

One run (40 epochs of 4 steps on the tiny split at 96 px, about a minute) is shared by the tests.
What the official checker says of this trainer's logs is in tests/trainers/test_trainer_lifecycle.py.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from tests.retinanet.trainer_runs import eval_records, run_trainer, tiny_bindings, train_records

pytestmark = [pytest.mark.slow, pytest.mark.over_budget(
    reason="RetinaNet trains until its mAP rises well above the untrained model's")]

EPOCHS = 40
STEPS_PER_EPOCH = 4  # 32 images, global batch 8


@pytest.fixture(scope="module")
def learning_run(tiny_data_root, tmp_path_factory) -> tuple[pathlib.Path, str]:
    out = tmp_path_factory.mktemp("learning")
    bindings = tiny_bindings(data_root=tiny_data_root, output_root=out, run_name="learn", epochs=EPOCHS, image_size=96)
    bindings += [
        "retinanet.TrainConfig.learning_rate = 2e-4",
        "retinanet.TrainConfig.warmup_epochs = 1.0",
        "retinanet.TrainConfig.eval_before_training = True",
        "common.RunConfig.log_every_steps = 40",
    ]
    proc = run_trainer(nproc=1, bindings=bindings)
    return out / "retinanet" / "learn", proc.stdout


def _mllog(run_dir: pathlib.Path) -> list[dict]:
    lines = (run_dir / "mllog.log").read_text().splitlines()
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in lines if ":::MLLOG" in line]


def test_map_rises_well_above_the_untrained_model(learning_run) -> None:
    run_dir, stdout = learning_run
    summary = json.loads((run_dir / "summary.json").read_text())
    untrained, trained = summary["untrained_map"], summary["final_map"]
    print(f"\nuntrained mAP {untrained:.4f} -> trained mAP {trained:.4f} (AP50 {summary['final_ap50']:.4f}) "
          f"after {summary['steps']} steps")
    assert trained >= untrained + 0.01, (untrained, trained)
    assert summary["final_ap50"] >= 0.03
    assert f"[eval] untrained model: map={untrained:.4f}" in stdout and f"[done] mAP {trained:.4f}" in stdout
    # metrics.jsonl: the baseline at step 0, then one evaluation per epoch with map and ap50
    evals = eval_records(run_dir)
    assert [r["step"] for r in evals] == [STEPS_PER_EPOCH * (e + 1) for e in range(EPOCHS)]
    assert all({"map", "ap50", "eval_samples"} <= set(r) and r["eval_samples"] == 16 for r in evals)
    assert evals[-1]["map"] == pytest.approx(trained)
    assert len(train_records(run_dir)) == EPOCHS * STEPS_PER_EPOCH


def test_mllog_blocks_follow_the_epochs(learning_run) -> None:
    run_dir, _ = learning_run
    events = _mllog(run_dir)
    by_key: dict[str, list[dict]] = {}
    for event in events:
        by_key.setdefault(event["key"], []).append(event)
    epochs = list(range(EPOCHS))
    assert [e["metadata"]["epoch_num"] for e in by_key["epoch_start"]] == epochs
    assert [e["metadata"]["epoch_num"] for e in by_key["epoch_stop"]] == epochs
    assert [(e["metadata"]["first_epoch_num"], e["metadata"]["epoch_count"]) for e in by_key["block_start"]] == [
        (e, 1) for e in epochs
    ]
    assert [e["metadata"]["epoch_num"] for e in by_key["eval_accuracy"]] == epochs
    hyper = {key: by_key[key][0]["value"] for key in ("opt_name", "opt_base_learning_rate", "opt_weight_decay",
                                                       "opt_learning_rate_warmup_epochs",
                                                       "opt_learning_rate_warmup_factor", "train_samples",
                                                       "eval_samples", "global_batch_size")}
    assert hyper == {"opt_name": "adam", "opt_base_learning_rate": 2e-4, "opt_weight_decay": 0.0,
                     "opt_learning_rate_warmup_epochs": 1.0, "opt_learning_rate_warmup_factor": 1e-3,
                     "train_samples": 32, "eval_samples": 16, "global_batch_size": 8}
    (stop,) = by_key["run_stop"]
    assert stop["metadata"] == {**stop["metadata"], "status": "aborted", "epoch_num": EPOCHS - 1}
    assert [e["key"] for e in events].index("run_start") < [e["key"] for e in events].index("epoch_start")
