"""A checkpoint that cannot be written (a full disk, a directory that turned read-only) is one line
saying why, the incomplete directory is gone and the checkpoints before it still load.

The storage is a small tmpfs of the test's own (`small_tmpfs`, tests/conftest.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from common.checkpoint import CheckpointManager, CheckpointWriteError


def _state(megabytes: float) -> dict:
    return {"model": {"w": torch.arange(int(megabytes * (1 << 20) / 4), dtype=torch.float32)}}


def test_a_full_disk_is_one_line_and_the_previous_checkpoint_stays(small_tmpfs: Path):
    manager = CheckpointManager(small_tmpfs / "ckpt", keep_last_n=3)
    manager.save("step_000000001", app_state=_state(0.01), metadata={"step": 1})
    with pytest.raises(CheckpointWriteError) as raised:
        manager.save("step_000000002", app_state=_state(2.0), metadata={"step": 2})
    message = str(raised.value)
    assert "\n" not in message and "no space left on device" in message, message
    assert message.startswith(f"checkpoint step_000000002 could not be written under {small_tmpfs / 'ckpt'}: ")
    assert sorted(p.name for p in (small_tmpfs / "ckpt").iterdir()) == ["step_000000001"]  # the .tmp is gone
    loaded = _state(0)
    loaded["model"]["w"] = torch.zeros(int(0.01 * (1 << 20) / 4))
    assert CheckpointManager(small_tmpfs / "ckpt").load_latest(loaded) == {"step": 1}
    assert torch.equal(loaded["model"]["w"], _state(0.01)["model"]["w"])


def test_a_directory_that_turned_read_only_is_one_line(small_tmpfs: Path):
    manager = CheckpointManager(small_tmpfs / "ckpt")
    manager.save("step_000000001", app_state=_state(0.01), metadata={"step": 1})
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    with pytest.raises(CheckpointWriteError, match=r"could not be written under .*: read-only file system; the "
                                                   r"checkpoints before it are complete"):
        manager.save("step_000000002", app_state=_state(0.01), metadata={"step": 2})
    assert sorted(p.name for p in (small_tmpfs / "ckpt").iterdir()) == ["step_000000001"]
