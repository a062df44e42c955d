"""Each trainer with its data in an S3 bucket (`data_root = "s3://..."`): the synthetic dataset is
generated into the bucket (on first use by RetinaNet's and FLUX.1's trainers; DLRM-HSTU's, which
never writes to a store, by its generator's `--out s3://...`), a few steps train reading from it,
and the losses equal those of the same run reading the same dataset from a directory. The
credentials reach neither the run's directory nor its output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.run.logs import read_metrics
from tests.trainers.trainer_process import REPO, run_command, trainer_command

pytestmark = [pytest.mark.slow]

STEPS = 3
BENCHMARKS = {
    "retinanet": ["retinanet.DataConfig.dataset = 'synthetic-tiny-seed0'",
                  "retinanet.TrainConfig.model_overrides = {'num_classes': 4, 'image_size': 96}",
                  "retinanet.TrainConfig.eval_before_training = False", "retinanet.DataConfig.eval_max_images = 8"],
    "flux": ["flux.DataConfig.validation_max_samples = 64", "flux.TrainConfig.eval_unconditional = False"],
    "recommendation_v4": ["recommendation_v4.DataConfig.dataset = 'yambda-synthetic-tiny-seed0'",
                          "recommendation_v4.DataConfig.eval_max_samples = 256",
                          "recommendation_v4.TrainConfig.eval_batch_size = 64",
                          "recommendation_v4.StreamingConfig.window_seconds = 86400",  # the tiny data's days
                          "recommendation_v4.StreamingConfig.start_window = 0"],
}
GENERATED_BY_THE_TRAINER = ("retinanet", "flux")


def _train(package: str, *, data_root: str, output_root: Path, run_name: str) -> tuple[list[float], str]:
    bindings = [*BENCHMARKS[package], f"common.RunConfig.max_steps = {STEPS}",
                f"common.RunConfig.output_root = '{output_root}'", f"common.RunConfig.run_name = '{run_name}'"]
    proc = run_command(trainer_command(package=package, gin_file=REPO / package / "configs" / "debug.gin", nproc=1,
                                       bindings=bindings), timeout=600, env={"MLPERF_DATA_ROOT": data_root})
    run_dir = output_root / package / run_name
    losses = [record["loss"] for record in read_metrics(run_dir / "metrics.jsonl") if "loss" in record]
    return losses, proc.stdout + proc.stderr


@pytest.mark.parametrize("package", sorted(BENCHMARKS))
@pytest.mark.over_budget(
    reason="two trainer runs, from a directory and from an S3 bucket, whose losses it compares")
def test_trains_from_a_bucket_as_from_a_directory(package, object_endpoint, tmp_path):
    if package not in GENERATED_BY_THE_TRAINER:
        from recommendation_v4.data.synthetic import _main as generate

        # its layout: <root>/<dataset>, with the flat-event cache debug.gin reads (history 60, anchors from the
        # 5th event), which a trainer does not build in a store
        assert generate(["--size", "tiny", "--seed", "0", "--no-progress", "--cache", "60:5",
                         "--out", "s3://data/root/yambda-synthetic-tiny-seed0"]) == 0
    from_store, output = _train(package, data_root="s3://data/root", output_root=tmp_path / "runs", run_name="s3")
    assert "s3://data/root/" in output
    assert ("[publish]" in output) == (package in GENERATED_BY_THE_TRAINER)  # generated into the bucket on first use
    # the same dataset, as a directory: what the generator put in the bucket
    from_path, _ = _train(package, data_root=str(tmp_path / "s3" / "data" / "root"), output_root=tmp_path / "runs",
                          run_name="path")
    assert len(from_store) == STEPS and from_store == from_path

    run_dir = tmp_path / "runs" / package / "s3"
    profile = json.loads((run_dir / "load_profile.json").read_text())
    requests = profile["object_requests"]
    assert requests["requests_per_sample"] > 0 and requests["bytes_per_request"] > 0
    assert str(profile["dataset"]["root"]).startswith("s3://data/root/")
    secret = object_endpoint.env()["AWS_SECRET_ACCESS_KEY"]
    assert secret not in output
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
