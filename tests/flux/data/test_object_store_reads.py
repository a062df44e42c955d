"""FLUX.1's Arrow shards in an S3 bucket: generated into it through the generator's command line,
read back in byte ranges (the stream's metadata at open, then one ranged GET per cell), batch for
batch the same as from the directory the same command wrote."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from common.data.reads import recording
from common.object_store.location import ObjectPath
from common.object_store.requests import GET, RANGED_GET, process_tally
from flux.data.schema import FluxDataError
from flux.data.splits import open_splits
from flux.data.synthetic import main as generate_main
from tests.child_signals import default_sighup

# 3 shards of 13 or 14 rows, each one record batch (save_to_disk's layout, the default) or several (rows of
# 6,720 B in batches of at most 5 rows): the walk over the stream's messages and the shard lookup both matter
GENERATE = ["--size", "tiny", "--seed", "2", "--num-train", "40", "--num-validation", "6", "--rows-per-shard", "16",
            "--no-progress"]
LAYOUTS = {"one-batch-per-shard": [], "several-batches-per-shard": ["--record-batch-bytes", str(5 * 6_720)]}


def _same_batch(a, b) -> None:
    for name in ("t5", "clip", "mean", "logvar", "sample_ids"):
        assert torch.equal(getattr(a, name).view(torch.int16) if getattr(a, name).dtype == torch.bfloat16
                           else getattr(a, name), getattr(b, name).view(torch.int16)
                           if getattr(b, name).dtype == torch.bfloat16 else getattr(b, name)), name
    assert (a.timestep is None) == (b.timestep is None)
    if a.timestep is not None:
        assert torch.equal(a.timestep, b.timestep)
    assert a.num_bytes == b.num_bytes


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_generated_into_a_bucket_and_read_in_ranges_gives_the_same_batches(object_endpoint, tmp_path, layout):
    local = tmp_path / "local"
    assert generate_main([*GENERATE, *LAYOUTS[layout], "--out", str(local)]) == 0
    assert generate_main([*GENERATE, *LAYOUTS[layout], "--out", "s3://data/flux/tiny"]) == 0
    bucket_dir = tmp_path / "s3" / "data" / "flux" / "tiny"
    local_files = sorted(p.relative_to(local) for p in local.rglob("*") if p.is_file() and not p.name.startswith("."))
    assert local_files == sorted(p.relative_to(bucket_dir) for p in bucket_dir.rglob("*") if p.is_file())
    for relpath in local_files:
        assert (local / relpath).read_bytes() == (bucket_dir / relpath).read_bytes(), relpath

    from_path = open_splits(local, readahead=False)
    from_store = open_splits(ObjectPath("s3://data/flux/tiny"))
    assert len(from_store.train) == 40 and from_store.train.shapes == from_path.train.shapes
    assert from_store.train.record_batches_per_shard == from_path.train.record_batches_per_shard == (
        1 if layout == "one-batch-per-shard" else 3)
    assert torch.equal(from_store.empty.t5.view(torch.int16), from_path.empty.t5.view(torch.int16))
    before = process_tally()
    for indices in (np.array([0, 1, 2]), np.array([39, 17, 5, 16, 31]), np.array([39, 17, 5, 16, 31])):
        with recording() as reads:
            batch = from_store.train.get_batch(indices)
        _same_batch(from_path.train.get_batch(indices), batch)
        asked = reads[0].requests.to_json()
        assert GET not in asked
        assert asked[RANGED_GET]["requests"] >= 4 * len(indices)  # the first use of a shard also scans it
    # once its shards are open, a sample is its four tensor cells: four ranged GETs of exactly its bytes
    assert asked[RANGED_GET]["requests"] == 4 * len(indices)
    assert asked[RANGED_GET]["bytes"] == batch.num_bytes == reads[0].read_bytes
    _same_batch(from_path.validation.get_batch(np.arange(6)), from_store.validation.get_batch(np.arange(6)))
    assert np.array_equal(from_store.validation.timesteps(), from_path.validation.timesteps())
    assert from_store.train.key(17) == from_path.train.key(17)
    description = from_store.train.storage_description()
    assert description["access"] == "ranged_get" and description["files"] == 3
    assert description["bytes"] == sum((local / "train" / p.name).stat().st_size for p in from_path.train.shard_paths)
    assert description["open_requests"]["LIST"]["requests"] >= 1
    # opening the store read the streams' metadata, not their bodies
    assert from_store.train.open_requests.to_json()[RANGED_GET]["bytes"] < description["bytes"] / 2
    assert process_tally().minus(before).total > 0


def test_a_truncated_shard_in_the_bucket_is_a_data_error_naming_it(object_endpoint, tmp_path):
    assert generate_main([*GENERATE, "--out", "s3://data/flux/tiny"]) == 0
    shard = sorted((tmp_path / "s3" / "data" / "flux" / "tiny" / "train").glob("*.arrow"))[1]
    shard.write_bytes(shard.read_bytes()[:5000])
    with pytest.raises(FluxDataError, match=f"s3://data/flux/tiny/train/{shard.name}"):
        open_splits(ObjectPath("s3://data/flux/tiny"))


def _objects(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_prefix_generated_with_other_settings_is_refused_and_overwrite_replaces_it(object_endpoint, tmp_path,
                                                                                   capsys):
    """Same-sized objects of another seed are not taken for this dataset: refused (status 2, one line) as a
    local --out of other settings is; --overwrite replaces what the prefix holds."""
    import json

    prefix = tmp_path / "s3" / "data" / "flux" / "tiny"
    assert generate_main([*GENERATE, "--out", "s3://data/flux/tiny"]) == 0
    seed2 = _objects(prefix)
    other = [arg if arg != "2" else "3" for arg in GENERATE]  # --seed 3: same shapes, same sizes
    with pytest.raises(SystemExit) as refused:
        generate_main([*other, "--out", "s3://data/flux/tiny"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other settings" in err[0] and "seed" in err[0] and "--overwrite" in err[0], err
    assert _objects(prefix) == seed2  # nothing sent
    from common.object_store import client
    from common.object_store.endpoint import resolve_endpoint

    client.put_bytes(resolve_endpoint(), "data", "flux/tiny/stray.bin", b"from before")
    assert generate_main([*other, "--out", "s3://data/flux/tiny", "--overwrite"]) == 0
    assert json.loads((prefix / "generation.json").read_text())["seed"] == 3 and not (prefix / "stray.bin").exists()
    local = tmp_path / "local3"
    assert generate_main([*other, "--out", str(local)]) == 0
    assert _objects(prefix) == {k: v for k, v in _objects(local).items() if not Path(k).name.startswith(".")}
    # the same settings again: a relaunch resumes, sending nothing that is there
    assert generate_main([*other, "--out", "s3://data/flux/tiny"]) == 0


@pytest.mark.parametrize("how", ["env", "flag"])
def test_an_s3_data_root_without_out_is_written_to_the_bucket_not_to_a_local_folder(object_endpoint, tmp_path,
                                                                                    monkeypatch, how):
    monkeypatch.chdir(tmp_path)
    extra = []
    if how == "env":
        monkeypatch.setenv("MLPERF_DATA_ROOT", "s3://data/root")
    else:
        extra = ["--data-root", "s3://data/root"]
    assert generate_main([*GENERATE, *extra]) == 0
    assert not (tmp_path / "s3:").exists()
    dataset = tmp_path / "s3" / "data" / "root" / "flux" / "synthetic-tiny-seed2"
    assert (dataset / "generation.json").is_file() and list((dataset / "train").glob("*.arrow"))


_KILLED_DURING_UPLOAD = """
import sys, time
from common.object_store import publish
from flux.data.synthetic import main

def stalled(*args, **kwargs):
    print("uploading", flush=True)
    time.sleep(300)

publish.publish_tree = stalled
sys.exit(main(sys.argv[1:]))
"""


def test_the_staging_folder_goes_when_the_upload_is_stopped_or_killed(object_endpoint, tmp_path):
    """The dataset's staging copy (its whole size, under /tmp by default) is removed however the upload
    ends: SIGTERM, SIGHUP (the process's own handlers are none) and SIGKILL alike."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.trainers.trainer_process import REPO

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGKILL):
        staging_root = tmp_path / f"staging-{int(sig)}"
        staging_root.mkdir()
        proc = subprocess.Popen([sys.executable, "-c", _KILLED_DURING_UPLOAD, *GENERATE, "--out", "s3://data/x"],
                                cwd=REPO, env={**os.environ, "MLPERF_STAGING_DIR": str(staging_root)},
                                stdout=subprocess.PIPE, text=True, preexec_fn=default_sighup)
        while proc.stdout.readline().strip() != "uploading":
            assert proc.poll() is None
        assert [p.name[:15] for p in staging_root.iterdir()] == ["mlperf-staging-"]
        proc.send_signal(sig)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while list(staging_root.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(staging_root.iterdir()) == [], sig
