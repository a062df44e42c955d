"""A load profile session around the trainers' real loader (common.data.loader.StreamingLoader): what it
records of the loader's setup, and that it makes no file-system call of its own while batches are read."""

from __future__ import annotations

import dataclasses
import json
import os
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from common.data.loader import StreamingLoader
from common.data.reads import forget_access_history, note_reads, note_records
from common.distributed.setup import DistInfo
from storage.dlio.plugin.plan import reads_next_window_ahead
from storage.load_profile.session import ProfileSession
# the RetinaNet tests' session fixtures: one tiny synthetic dataset, generated once
from tests.retinanet.conftest import tiny_data_root, tiny_dataset_dir, tiny_generation  # noqa: F401

SINGLE = DistInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")


class _Rows:
    """100 B per sample from one file, at the sample's place."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def get_batch(self, indices: np.ndarray) -> torch.Tensor:
        indices = np.asarray(indices, dtype=np.int64)
        note_reads(self.path, indices * 100, 100)
        note_records(np.full(indices.size, 100))
        return torch.as_tensor(indices)


def _session(run_dir: Path, loader, *, batch: int, benchmark: str = "flux", data_dirs=()) -> ProfileSession:
    return ProfileSession(run_dir=run_dir, benchmark=benchmark, config_file="reference.gin", rank=0, world_size=1,
                          device="cpu", loader=loader, global_batch_size=batch, local_batch_size=batch, start_step=0,
                          data_dirs=list(data_dirs))


def _train(session: ProfileSession, loader: StreamingLoader, windows: int) -> None:
    session.loop_begins(None)
    step = 0
    for key in range(windows):
        for _, batch in loader.iterate(key, next_key=key + 1 if key + 1 < windows else None):
            step += 1
            session.step_begins(step)
            session.step_ends(types.SimpleNamespace(began_at=float(step), data_wait_s=0.0, compute_s=0.01,
                                                    samples=len(batch)))


@pytest.mark.parametrize("ahead", [True, False])
def test_the_profile_records_whether_the_loader_reads_the_next_window_ahead(tmp_path, ahead):
    """FLUX's reference config reads nothing ahead (prefetch_next_window=False); the profile says so
    beside window_batches, and the plugin replay follows it (storage.dlio.plugin.plan)."""
    data = tmp_path / "rows.bin"
    data.write_bytes(bytes(100 * 64))
    forget_access_history()
    def window(key: int) -> list[np.ndarray]:  # 4 batches of 4
        return [np.arange(key * 16 + b * 4, key * 16 + b * 4 + 4) for b in range(4)]

    loader = StreamingLoader(source=_Rows(data), build_window=window, num_workers=0, prefetch_next_window=ahead)
    session = _session(tmp_path, loader, batch=4)
    try:
        _train(session, loader, windows=3)
        profile = session.finish()
    finally:
        loader.close()
    assert profile["window_batches"] == 4 and profile["prefetch_next_window"] is ahead
    assert json.loads((tmp_path / "load_profile.json").read_text())["prefetch_next_window"] is ahead
    assert reads_next_window_ahead(profile) is ahead


def test_a_profiled_retinanet_loader_stats_no_data_file_during_its_batches(
        tiny_data_root, tmp_path, monkeypatch):  # noqa: F811
    """The reference stats no image while it trains; neither does the profile of our RetinaNet loader
    (it used to stat every file a batch newly opened, inside the timed run). The files' sizes are
    taken after the steps, and the profile's figures stay right."""
    from retinanet.data_setup import prepare_data
    from retinanet.model.flavors import FLAVORS
    from retinanet.run_config import DataConfig

    config = DataConfig(data_root=str(tiny_data_root), dataset="synthetic-tiny-seed0")
    data = prepare_data(config=config, flavor=dataclasses.replace(FLAVORS["tiny"], image_size=64), info=SINGLE, seed=7)
    images = os.path.realpath(data.train.images_dir)
    prefixes = (os.path.join(str(data.train.images_dir), ""), os.path.join(images, ""))  # as noted, and resolved
    batches = [np.arange(b * 4, b * 4 + 4) for b in range(len(data.train) // 4)]  # every image once, 4 per step
    forget_access_history()
    loader = StreamingLoader(source=data.train, build_window=lambda key: batches, num_workers=0)
    stats: list[str] = []
    for name in ("stat", "lstat"):
        real = getattr(os, name)

        def counted(path, *args, _real=real, **kwargs):
            if isinstance(path, (str, bytes, os.PathLike)) and os.fsdecode(path).startswith(prefixes):
                stats.append(os.fsdecode(path))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, counted)
    session = _session(tmp_path, loader, batch=4, benchmark="retinanet", data_dirs=[data.dataset_dir])
    try:
        _train(session, loader, windows=1)
        during = list(stats)
        profile = session.finish()
    finally:
        loader.close()
    monkeypatch.undo()
    assert during == [], f"{len(during)} stat(s) of data files while the batches were read, e.g. {during[:3]}"
    # the figures the stats were for: every file opened, with its size
    read = {os.path.join(images, r.file_name) for r in data.train.records}  # no two records name one file
    assert profile["reads"]["files_opened"] == len(read) == len(data.train)
    assert profile["reads"]["opened_file_bytes"] == sum(os.path.getsize(p) for p in read)
    assert len(stats) == len(read)  # taken once each, after the steps
