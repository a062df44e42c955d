"""The sweep against an S3 endpoint whose bandwidth is limited: the knee is the endpoint's.

FLUX's small-shape shards (storage content) are generated into a bucket of a local `rclone serve
s3`, which then serves them at LIMIT_MB_S. Each emulated accelerator sleeps 0.4 s per step of 16
samples, so it asks 16 samples' cells (four ranged GETs each) every 0.4 s: one accelerator asks
about 1 MB/s and passes, two ask twice that and must starve, and the bytes the loaders got there
are near the limit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from flux.data.synthetic import main as generate
from storage.backends.object_endpoint import ObjectEndpoint
from tests.trainers.trainer_process import REPO, trainer_env

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess, pytest.mark.over_budget(
    reason="a sweep of emulated runs against a rate-limited S3 endpoint")]

BATCH, SECONDS_PER_STEP, STEPS, THRESHOLD, LIMIT_MB_S = 16, 0.4, 16, 0.85, 1.5
SAMPLE_BYTES = 25_216  # FLUX small: the four cells of a sample


def test_the_sweep_stops_where_the_endpoint_limit_says(object_endpoint, tmp_path):
    assert generate(["--size", "small", "--seed", "0", "--num-train", "600", "--num-validation", "32",
                     "--content", "storage", "--out", "s3://data/flux/synthetic-small-seed0", "--no-progress"]) == 0
    object_endpoint.stop()
    limited = ObjectEndpoint(tmp_path / "s3", read_mb_s=LIMIT_MB_S).start()
    out = tmp_path / "sweep"
    bindings = ['flux.DataConfig.data_root = "s3://data"', "flux.DataConfig.generate_if_missing = False",
                'flux.TrainConfig.flavor = "flux-small"', "flux.DataConfig.num_workers = 2",
                f"storage.Emulation.seconds_per_step = {SECONDS_PER_STEP}",
                f"storage.Emulation.batch_per_accelerator = {BATCH}", f"storage.Emulation.au_threshold = {THRESHOLD}"]
    cmd = [sys.executable, "-m", "storage.sweep", "--benchmark", "flux", "--accelerator", "b200", "--gin_config",
           str(REPO / "flux" / "configs" / "debug.gin"), "--max-accelerators", "4", "--steps", str(STEPS),
           "--out", str(out)]
    for binding in bindings:
        cmd += ["--gin_bindings", binding]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=trainer_env(limited.env()), capture_output=True, text=True,
                              timeout=600)
    finally:
        limited.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = json.loads((out / "sweep.json").read_text())
    table = (out / "sweep.md").read_text()
    points = {p["accelerators"]: p for p in sweep["points"]}
    asked = BATCH * SAMPLE_BYTES / SECONDS_PER_STEP / 1e6  # MB/s one accelerator asks
    assert asked < LIMIT_MB_S * THRESHOLD < 2 * asked * THRESHOLD  # the setting makes the knee 1
    assert sweep["headline"]["accelerators"] == 1 and sorted(points) == [1, 2], table
    starved = points[2]
    assert not starved["passed"] and starved["au_mean"] <= LIMIT_MB_S / (2 * asked) + 0.1, table
    assert 0.7 * LIMIT_MB_S <= starved["mb_per_s"] <= 1.1 * LIMIT_MB_S, table  # the endpoint's limit
    for point in points.values():  # four cells a sample, each one ranged GET of its bytes
        assert 4.0 <= point["object_requests_per_sample"] <= 4.6, table
        assert SAMPLE_BYTES / 4.6 <= point["object_bytes_per_request"] <= SAMPLE_BYTES / 4.0, table
        assert point["object_latency_ms"] > 0
    assert "GETs/sample" in table and "object store" in table
