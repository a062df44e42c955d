"""Two gloo ranks under torchrun: disjoint equal shares of every global batch, one shared evaluation."""

from __future__ import annotations

import json

import pytest

from common.run.logs import read_metrics
from tests.retinanet.trainer_runs import eval_records, run_trainer, tiny_bindings, train_records

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


@pytest.mark.over_budget(reason="a 2-rank RetinaNet run (gloo) with its evaluation")
def test_two_process_run_splits_batches_and_gathers_the_evaluation(tiny_data_root, tmp_path) -> None:
    bindings = tiny_bindings(data_root=tiny_data_root, output_root=tmp_path, run_name="ddp", epochs=2) + [
        "common.RunConfig.log_sample_ids = True",
        "retinanet.DataConfig.num_workers = 1",
    ]
    proc = run_trainer(nproc=2, bindings=bindings)
    run_dir = tmp_path / "retinanet" / "ddp"
    per_rank = [
        [json.loads(line) for line in (run_dir / f"sample_ids_rank{rank}.jsonl").read_text().splitlines()]
        for rank in (0, 1)
    ]
    # 32 images / global batch 8 = 4 steps per epoch; each rank trains 4 images per step
    assert [[r["step"] for r in lines] for lines in per_rank] == [list(range(1, 9))] * 2
    for step in range(8):
        mine, theirs = per_rank[0][step]["ids"], per_rank[1][step]["ids"]
        assert len(mine) == len(theirs) == 4 and not set(mine) & set(theirs)
    for epoch in range(2):
        trained = {i for lines in per_rank for r in lines[4 * epoch : 4 * epoch + 4] for i in r["ids"]}
        assert len(trained) == 32  # every train image once per epoch
    assert [r["samples"] for r in train_records(run_dir)] == [8 * s for s in range(1, 9)]
    # both ranks' detections are scored together: all 16 validation images, after each epoch
    assert [(r["step"], r["eval_samples"]) for r in eval_records(run_dir)] == [(4, 16), (8, 16)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 8 and summary["images"] == 64
    assert "[done] mAP" in proc.stdout
    assert len([r for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]) == 8  # rank 0 writes alone
