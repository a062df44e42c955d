"""DLRM data setup: the train window index is built once into the processed directory and shared."""

from __future__ import annotations

import pathlib
import shutil

import gin
import numpy as np
import pytest
import torch

from common.config.checks import ConfigError
from common.distributed.setup import DistInfo
from common.data.time_windows import TimeWindows
from recommendation_v4.data import layout
from recommendation_v4.data import processed_format as fmt
from recommendation_v4.data.preprocess import SplitConfig, build_processed
from recommendation_v4.data_setup import WINDOW_INDEX_DIR, prepare_data
from recommendation_v4.model.flavors import FLAVORS
from recommendation_v4.run_config import DataConfig

SINGLE = DistInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")
TINY = layout.synthetic_dataset_name("tiny", 0)


@pytest.fixture
def private_root(tiny_data_root: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the tiny dataset (raw and processed) this test may change, without the window index
    that trainer runs on the shared copy leave behind (these tests watch it being built)."""
    shutil.copytree(tiny_data_root / TINY, tmp_path / TINY, ignore=shutil.ignore_patterns(WINDOW_INDEX_DIR))
    return tmp_path


def _data(root: pathlib.Path, **fields):
    config = DataConfig(data_root=str(root), dataset=TINY, cross_table_rows=1000, **fields)
    return prepare_data(config=config, model_config=FLAVORS["debug"], info=SINGLE, seed=1)


def _same_windows(a: TimeWindows, b: TimeWindows) -> None:
    assert a.sizes() == b.sizes()
    for key in a.keys():
        assert np.array_equal(a.indices(key), b.indices(key))


def test_the_window_index_is_written_once_and_equals_the_in_memory_one(private_root: pathlib.Path) -> None:
    data = _data(private_root)
    windows = data.train_windows(window_seconds=86_400)
    index_dirs = list((layout.processed_dir(private_root / TINY) / WINDOW_INDEX_DIR).iterdir())
    assert [d.name.endswith("-w86400") for d in index_dirs] == [True]
    assert isinstance(windows._order, np.memmap)
    _same_windows(windows, TimeWindows(data.train.anchor_timestamps(), window_seconds=86_400))
    assert sum(windows.sizes().values()) == len(data.train)

    order_file = index_dirs[0] / "order.npy"
    written = order_file.stat().st_mtime_ns
    _same_windows(_data(private_root).train_windows(window_seconds=86_400), windows)  # a second run reads it
    assert order_file.stat().st_mtime_ns == written

    hours = data.train_windows(window_seconds=3_600)  # another window length: its own index
    assert len(list(index_dirs[0].parent.iterdir())) == 2
    _same_windows(hours, TimeWindows(data.train.anchor_timestamps(), window_seconds=3_600))


def test_a_torn_index_is_rebuilt(private_root: pathlib.Path) -> None:
    data = _data(private_root)
    del data.train_windows(window_seconds=86_400)._order  # unmapped before the file is damaged below
    (index_dir,) = (layout.processed_dir(private_root / TINY) / WINDOW_INDEX_DIR).iterdir()
    (index_dir / "index.json").unlink()  # what a directory without its last write looks like
    (index_dir / "order.npy").write_bytes(b"torn")
    rebuilt = data.train_windows(window_seconds=86_400)
    _same_windows(rebuilt, TimeWindows(data.train.anchor_timestamps(), window_seconds=86_400))
    assert (index_dir / "index.json").is_file()


def test_an_unwritable_index_directory_falls_back_to_the_in_memory_index(private_root: pathlib.Path, capsys) -> None:
    data = _data(private_root)
    # a file where the index directory goes: creating it fails as a read-only dataset would, even for root
    (layout.processed_dir(private_root / TINY) / WINDOW_INDEX_DIR).write_text("")
    windows = data.train_windows(window_seconds=86_400)
    assert not isinstance(windows._order, np.memmap)
    assert "window index not written" in capsys.readouterr().out
    _same_windows(windows, TimeWindows(data.train.anchor_timestamps(), window_seconds=86_400))


def test_the_test_day_is_chosen_in_config_and_another_build_is_never_replaced(private_root: pathlib.Path) -> None:
    dataset_dir = private_root / TINY
    build_processed(dataset_dir, config=SplitConfig(test_day=3))  # as `preprocess --test-day 3` leaves it
    stamp = (layout.processed_dir(dataset_dir) / fmt.META_FILE).stat().st_mtime_ns
    with pytest.raises(ConfigError) as error:
        _data(private_root)  # test_day None: the last day, which is not what was built
    message = str(error.value)
    assert message.startswith("recommendation_v4.DataConfig.test_day=None: ") and "was built with test day 3" in message
    assert f"preprocess --dataset-dir {dataset_dir} --force" in message
    assert (layout.processed_dir(dataset_dir) / fmt.META_FILE).stat().st_mtime_ns == stamp  # left as it was

    data = _data(private_root, test_day=3)
    eval_days = set((data.eval.anchor_timestamps() // 86_400).tolist())
    assert eval_days == {3}
    assert data.train.anchor_timestamps().max() < 3 * 86_400 - 1_800  # the 30 min gap before the test day


def test_a_missing_build_is_made_with_the_configured_test_day(private_root: pathlib.Path, capsys) -> None:
    dataset_dir = private_root / TINY
    shutil.rmtree(layout.processed_dir(dataset_dir))
    data = _data(private_root, test_day=4)
    assert set((data.eval.anchor_timestamps() // 86_400).tolist()) == {4}
    out = capsys.readouterr().out
    assert f"[data] preprocessing {dataset_dir} (not built yet)" in out and "--test-day 4" in out


def test_a_truncated_processed_array_exits_3_in_one_line_naming_it(private_root: pathlib.Path, tmp_path, capsys) -> None:
    from recommendation_v4.train import main
    from tests.recommendation_v4.trainer_runs import REPO, tiny_bindings

    column = layout.processed_dir(private_root / TINY) / fmt.EVENTS_DIR / f"{next(iter(fmt.EVENT_COLUMNS))}.npy"
    column.write_bytes(column.read_bytes()[: column.stat().st_size // 2])  # a copy cut short
    args = ["--gin_config", str(REPO / "recommendation_v4" / "configs" / "debug.gin")]
    for binding in tiny_bindings(data_root=private_root, output_root=tmp_path / "out", run_name="cut", max_steps=1):
        args += ["--gin_bindings", binding]
    try:
        assert main(args) == 3
    finally:
        gin.clear_config()  # the next tests build their configs from a clean slate
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"data error: {column}: unreadable processed array"), err
    assert f"delete {layout.processed_dir(private_root / TINY)} and relaunch" in err[0]
