"""A truncated JPEG and an annotation pointing at a missing file: a clear error naming the file, or,
with retinanet.DataConfig.skip_bad_files, a run that skips and counts them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gin
import pytest

from retinanet.data import layout
from retinanet.data.coco_annotations import load_coco_detection_index
from tests.retinanet.trainer_runs import run_trainer, tiny_bindings
from tests.trainers.trainer_process import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def damaged_data_root(tiny_dataset_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    root = tmp_path_factory.mktemp("damaged")
    dataset_dir = root / "retinanet" / "synthetic-tiny-seed0"
    shutil.copytree(tiny_dataset_dir, dataset_dir)
    paths = layout.split_paths(dataset_dir, layout.TRAIN_SPLIT)
    records = load_coco_detection_index(paths.annotations_file).images
    truncated, missing = paths.images_dir / records[3].file_name, paths.images_dir / records[20].file_name
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 3])
    missing.unlink()
    return root, [truncated, missing]


def _bindings(data_root: Path, out: Path, name: str) -> list[str]:
    return tiny_bindings(data_root=data_root, output_root=out, run_name=name, epochs=1) + [
        "retinanet.DataConfig.num_workers = 1"
    ]


def test_a_bad_file_stops_the_run_with_its_name(damaged_data_root, tmp_path) -> None:
    root, bad = damaged_data_root
    proc = run_trainer(nproc=1, bindings=_bindings(root, tmp_path, "strict"), expect_returncode=3)
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("data error: ")
    assert f"{bad[0]}: corrupt or truncated JPEG" in error or f"{bad[1]}: image file is missing" in error, error


def test_skip_bad_files_trains_on_and_counts_them(damaged_data_root, tmp_path) -> None:
    root, bad = damaged_data_root
    bindings = _bindings(root, tmp_path, "skipping") + ["retinanet.DataConfig.skip_bad_files = True"]
    proc = run_trainer(nproc=1, bindings=bindings)
    summary = json.loads((tmp_path / "retinanet" / "skipping" / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["skipped_files"] == 2
    assert sorted(summary["skipped_examples"]) == sorted(str(p) for p in bad)
    assert "2 file(s) skipped" in proc.stdout


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda text: text[: len(text) // 2], "not valid JSON"),  # cut short, as a full disk or a killed copy leaves it
        (lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "images"}), "images"),
    ],
    ids=["truncated", "incomplete"],
)
def test_a_broken_annotations_file_exits_3_in_one_line_naming_it(tiny_dataset_dir: Path, tmp_path, damage, said,
                                                                 capsys) -> None:
    from retinanet.train import main

    dataset_dir = tmp_path / "data" / "retinanet" / "synthetic-tiny-seed0"
    shutil.copytree(tiny_dataset_dir, dataset_dir)
    annotations = layout.split_paths(dataset_dir, layout.TRAIN_SPLIT).annotations_file
    annotations.write_text(damage(annotations.read_text()))
    bindings = _bindings(tmp_path / "data", tmp_path / "out", "broken") + ["retinanet.DataConfig.generate_if_missing = False"]
    args = ["--gin_config", str(REPO / "retinanet" / "configs" / "debug.gin")]
    for binding in bindings:
        args += ["--gin_bindings", binding]
    try:
        assert main(args) == 3
    finally:
        gin.clear_config()  # the next tests build their configs from a clean slate
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"data error: {annotations}") and said in err[0], err

