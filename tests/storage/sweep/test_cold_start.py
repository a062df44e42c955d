"""Which cold start a sweep uses, and its refusals (the mount cold start itself, on a real shared storage:
tests/storage/backends/test_shared_storage.py and the MPI sweep of tests/storage/sweep/test_multi_host_sweep.py)."""

from __future__ import annotations

import pytest

from storage.sweep import cold_start
from storage.sweep.rules import SweepError


def test_without_emulated_hosts_each_point_evicts_its_files_and_mount_is_refused_naming_the_flag(tmp_path):
    assert cold_start.resolve(None, None) == "files"
    assert cold_start.resolve("files", None) == "files"
    with pytest.raises(SweepError, match="--cold-start mount: needs client hosts emulated"):
        cold_start.resolve("mount", None)
    # a folder where no shared storage was brought up has no mounts either
    assert cold_start.resolve(None, tmp_path) == "files"
    with pytest.raises(SweepError, match="--cold-start mount"):
        cold_start.resolve("mount", tmp_path)
    with pytest.raises(SweepError, match="--cold-start must be one of files, mount, got 'cache'"):
        cold_start.resolve("cache", None)
