"""RetinaNet's dataset in an S3 bucket: generated into it through the generator's command line,
read back as whole objects, batch for batch the same as from the directory the same command wrote."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from common.data.reads import recording
from common.object_store.location import ObjectPath
from common.object_store.requests import GET, RANGED_GET, process_tally
from retinanet.data import layout
from retinanet.data.dataset import LoaderSettings, OpenImagesDetectionDataset
from retinanet.data.synthetic import main as generate_main

GENERATE = ["--size", "tiny", "--seed", "3", "--num-train", "12", "--num-validation", "4", "--no-progress"]


def _batches_equal(a, b) -> None:
    for name in ("images", "image_ids", "original_hw"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.num_bytes == b.num_bytes and not a.skipped and not b.skipped
    assert len(a.targets) == len(b.targets)
    for x, y in zip(a.targets, b.targets, strict=True):
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_generated_into_a_bucket_and_read_as_whole_objects_gives_the_same_batches(object_endpoint, tmp_path):
    local = tmp_path / "local"
    assert generate_main([*GENERATE, "--out", str(local)]) == 0
    assert generate_main([*GENERATE, "--out", "s3://data/retinanet/tiny"]) == 0
    bucket_dir = tmp_path / "s3" / "data" / "retinanet" / "tiny"
    local_files = sorted(p.relative_to(local) for p in local.rglob("*") if p.is_file() and not p.name.startswith("."))
    assert local_files and local_files == sorted(p.relative_to(bucket_dir) for p in bucket_dir.rglob("*") if p.is_file())
    for relpath in local_files:  # the same bytes as to a path
        assert (local / relpath).read_bytes() == (bucket_dir / relpath).read_bytes(), relpath

    settings = LoaderSettings(image_size=64, augment=True, seed=5)
    from_path = OpenImagesDetectionDataset.from_split(local, layout.TRAIN_SPLIT, settings=settings)
    from_store = OpenImagesDetectionDataset.from_split(ObjectPath("s3://data/retinanet/tiny"), layout.TRAIN_SPLIT,
                                                       settings=settings)
    before = process_tally()
    for indices in (np.array([0, 1, 2, 3]), np.array([11, 4, 7, 15])):
        with recording() as reads:
            batch = from_store.get_batch(indices)
        _batches_equal(from_path.get_batch(indices), batch)
        assert reads[0].requests is not None and int(reads[0].requests.count[0]) == len(indices)  # one GET per image
    asked = process_tally().minus(before).to_json()
    assert asked[GET]["requests"] == 8 and RANGED_GET not in asked
    description = from_store.storage_description()
    assert description["access"] == "get" and description["root"] == "s3://data/retinanet/tiny/train/data"


def test_a_missing_object_names_it(object_endpoint, tmp_path):
    assert generate_main([*GENERATE, "--out", "s3://data/retinanet/tiny"]) == 0
    dataset = OpenImagesDetectionDataset.from_split(ObjectPath("s3://data/retinanet/tiny"), layout.TRAIN_SPLIT,
                                                    settings=LoaderSettings(image_size=64))
    victim = tmp_path / "s3" / "data" / "retinanet" / "tiny" / "train" / "data" / dataset.records[0].file_name
    victim.unlink()
    with pytest.raises(Exception, match=f"s3://data/retinanet/tiny/train/data/{dataset.records[0].file_name}"):
        dataset.get_batch(np.array([0]))


def test_generating_into_a_store_without_credentials_stops_before_writing_anything(tmp_path, monkeypatch, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("MLPERF_STAGING_DIR", str(tmp_path / "staging"))
    (tmp_path / "staging").mkdir()
    with pytest.raises(SystemExit) as stopped:
        generate_main([*GENERATE, "--out", "s3://data/x"])
    said = capsys.readouterr()
    assert stopped.value.code == 2 and "--out s3://data/x: no credentials for http://127.0.0.1:9" in said.err
    assert len(said.err.strip().splitlines()) == 1  # one line, no traceback
    assert not any((tmp_path / "staging").iterdir()) and "[generate]" not in said.out


def test_an_s3_data_root_without_out_is_written_to_the_bucket_not_to_a_local_folder(object_endpoint, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLPERF_DATA_ROOT", "s3://data/root")
    assert generate_main(GENERATE) == 0
    assert not (tmp_path / "s3:").exists()
    dataset = tmp_path / "s3" / "data" / "root" / "retinanet" / "synthetic-tiny-seed3"
    assert (dataset / "generation.json").is_file() and (dataset / "train").is_dir()
