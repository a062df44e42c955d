"""common.data.generation on a small plan of its own: files from keyed streams, written whole, in
any number of processes and shards with the same bytes; resumable; metadata once, at the end."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from common.data import generation
from common.data.generation import FileJob, Shard


class NumbersPlan:
    """`count` files of random bytes (sizes vary), each from the stream (seed, index); an index of
    their digests as the metadata."""

    def __init__(self, count: int = 9, seed: int = 0, fail_at: int | None = None) -> None:
        self.count, self.seed, self.fail_at = count, seed, fail_at
        self.name = f"numbers (seed {seed})"

    def settings(self) -> dict:
        return {"count": self.count, "seed": self.seed}

    def jobs(self) -> list[FileJob]:
        return [FileJob(relpath=f"part{index % 3}/file{index:03d}.bin", nbytes=1000 + 100 * index, key=index)
                for index in range(self.count)]

    def write(self, job: FileJob, path: Path) -> int:
        if job.key == self.fail_at:
            path.write_bytes(b"half")  # what a crash leaves behind
            raise RuntimeError(f"stopped while writing file {job.key}")
        data = np.random.default_rng([self.seed, job.key]).bytes(job.nbytes)
        path.write_bytes(data)
        return len(data)

    def finalize(self, out_dir: Path) -> str:
        index = {job.relpath: hashlib.sha256((out_dir / job.relpath).read_bytes()).hexdigest() for job in self.jobs()}
        generation.write_text_whole(out_dir / "index.json", json.dumps(index, sort_keys=True))
        return f"index of {len(index)} files"

    def is_complete(self, out_dir: Path) -> bool:
        return (out_dir / "index.json").is_file()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_workers_and_shards_write_the_same_bytes(tmp_path: Path) -> None:
    plan = NumbersPlan()
    one = generation.generate(plan, tmp_path / "one", progress=False, log=lambda line: None)
    assert (one.files_written, one.files_missing, one.finalized) == (9, 0, "index of 9 files")
    generation.generate(plan, tmp_path / "two_workers", workers=2, progress=False, log=lambda line: None)
    lines: list[str] = []
    for index in (2, 0, 1):  # any order of shards; the one that completes the dataset finalizes
        result = generation.generate(plan, tmp_path / "shards", shard=Shard(index, 3), progress=False, log=lines.append)
        assert result.files_written == 3
    assert "6 file(s) of other shards still missing" in lines[0] and "finalized: index of 9 files" in lines[-1]
    assert _tree(tmp_path / "one") == _tree(tmp_path / "two_workers") == _tree(tmp_path / "shards")
    assert len(_tree(tmp_path / "one")) == 9 + 2  # the files, index.json, generation.json


def test_writing_in_this_process_leaves_its_intra_op_threads_as_they_were(tmp_path: Path) -> None:
    """The files are written on one thread, and a trainer that generates its own data (make run) then
    trains on the threads it had, not on that one (DLRM-HSTU's debug run trained on 1 of 2 cores)."""
    import torch

    seen: list[int] = []
    plan = NumbersPlan(count=2)
    write = plan.write
    plan.write = lambda job, path: (seen.append(torch.get_num_threads()), write(job, path))[1]
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        generation.generate(plan, tmp_path / "out", progress=False, log=lambda line: None)
        assert seen == [1, 1] and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_no_metadata_until_every_shard_is_done(tmp_path: Path) -> None:
    plan = NumbersPlan()
    generation.generate(plan, tmp_path, shard=Shard(0, 2), progress=False, log=lambda line: None)
    assert not plan.is_complete(tmp_path)
    with pytest.raises(FileNotFoundError, match="4 of 9 data files are missing"):
        generation.finalize_only(plan, tmp_path)
    generation.generate(plan, tmp_path, shard=Shard(1, 2), progress=False, log=lambda line: None, finalize=False)
    assert not plan.is_complete(tmp_path)
    assert generation.finalize_only(plan, tmp_path) == "index of 9 files" and plan.is_complete(tmp_path)


def test_a_crash_leaves_no_file_under_its_name_and_a_relaunch_finishes(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="stopped while writing file 5"):
        generation.generate(NumbersPlan(fail_at=5), tmp_path / "crashed", progress=False, log=lambda line: None)
    crashed = tmp_path / "crashed"
    names = {p.name for p in crashed.rglob("*") if p.is_file()}
    assert "file005.bin" not in names and not (crashed / "index.json").exists()
    assert {f"file{i:03d}.bin" for i in range(5)} <= names
    # a partial file another process left (SIGKILL gives no chance to clean up) is removed on relaunch
    stale = crashed / "part0" / f".file006.bin{generation.PARTIAL_MARK}99999"
    stale.write_bytes(b"partial")
    lines: list[str] = []
    result = generation.generate(NumbersPlan(), crashed, progress=False, log=lines.append)
    assert (result.files_written, result.files_skipped) == (4, 5)  # only the missing files
    assert not stale.exists() and "removed 1 partial file(s)" in lines[0]
    generation.generate(NumbersPlan(), tmp_path / "clean", progress=False, log=lambda line: None)
    assert _tree(crashed) == _tree(tmp_path / "clean")


def test_a_shard_leaves_other_shards_partial_files_alone(tmp_path: Path) -> None:
    plan = NumbersPlan()
    other = tmp_path / "part1" / f".file001.bin{generation.PARTIAL_MARK}4242"  # file 1: shard 1 of 2
    other.parent.mkdir(parents=True)
    other.write_bytes(b"being written on another node")
    generation.generate(plan, tmp_path, shard=Shard(0, 2), progress=False, log=lambda line: None)
    assert other.exists()


def test_other_settings_in_the_same_directory_are_refused(tmp_path: Path) -> None:
    generation.generate(NumbersPlan(seed=0), tmp_path, shard=Shard(0, 2), progress=False, log=lambda line: None)
    with pytest.raises(FileExistsError, match="seed differ"):
        generation.generate(NumbersPlan(seed=1), tmp_path, shard=Shard(1, 2), progress=False, log=lambda line: None)


def test_a_complete_dataset_is_left_as_it_is(tmp_path: Path) -> None:
    generation.generate(NumbersPlan(), tmp_path, progress=False, log=lambda line: None)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    lines: list[str] = []
    result = generation.generate(NumbersPlan(), tmp_path, progress=False, log=lines.append)
    assert result.files_written == 0 and "complete already" in lines[0]
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("text", ["2/2", "1", "a/b", "-1/3", "0/0"])
def test_bad_shards_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--shard"):
        Shard.parse(text)


def test_shards_take_every_nth_file() -> None:
    jobs = NumbersPlan(count=7).jobs()
    taken = [job.key for shard in range(3) for job in Shard(shard, 3).take(jobs)]
    assert sorted(taken) == list(range(7)) and [job.key for job in Shard(1, 3).take(jobs)] == [1, 4]


def test_memory_fill_and_dry_run(tmp_path: Path) -> None:
    assert generation.samples_to_fill(5, 1e6, memory_bytes=10**9) == 5000
    assert generation.samples_to_fill(0.5, 3, memory_bytes=10) == 2  # rounded up
    with pytest.raises(ValueError, match="> 0"):
        generation.samples_to_fill(0, 1.0)
    assert generation.host_memory_bytes() > 2**20
    lines = generation.dry_run_lines(NumbersPlan(), workers=2, shard=Shard(0, 1))
    assert lines[0].startswith("numbers (seed 0): 9 data files, 12.6 kB") and "for this shard" in lines[2]
    assert len(lines) == 3  # 12.6 kB: under the kernel's dirty limit, the storage does not bound it
    assert not list(tmp_path.iterdir()) and os.path.exists(tmp_path)  # nothing written


def test_a_dry_run_past_the_dirty_limit_names_the_storage_and_probes_it_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert 0 < generation.dirty_limit_bytes() < generation.host_memory_bytes()
    monkeypatch.setattr(generation, "dirty_limit_bytes", lambda: 4000)  # the plan's 12.6 kB go past it
    lines = generation.dry_run_lines(NumbersPlan(), workers=1, shard=Shard(0, 1))
    assert "--probe-storage measures that rate" in lines[-1]
    jobs = NumbersPlan().jobs()
    probed = generation.probe_writing(NumbersPlan(), jobs, tmp_path, 2, past_limit=5000)  # 1.25 x 4000 first
    assert probed > 0 and not list(tmp_path.iterdir())  # a rate, and every probe file is gone
    with pytest.raises(OSError, match="do not go past the kernel's dirty limit"):
        generation.probe_writing(NumbersPlan(), jobs[:3], tmp_path, 1, past_limit=5000)
    full = type("Usage", (), {"free": 1 << 20})
    with monkeypatch.context() as patched:  # a file system without room for the probe: one line, no probe
        patched.setattr(generation.shutil, "disk_usage", lambda directory: full)
        lines = generation.dry_run_lines(NumbersPlan(), workers=1, shard=Shard(0, 1), out_dir=tmp_path,
                                         probe_storage=True)
    assert lines[-1].startswith(f"--probe-storage: {tmp_path} has 1.0 MB free") and "leaves the storage out" in lines[-1]
    monkeypatch.setattr(generation, "probe_writing", lambda *args: 1000.0)  # 1 kB/s: the storage bounds it
    lines = generation.dry_run_lines(NumbersPlan(), workers=1, shard=Shard(0, 1), out_dir=tmp_path / "new" / "dir",
                                     probe_storage=True)
    assert lines[-1].startswith(f"{tmp_path} took this shard's first files at 0.0 MB/s")
    assert "expect about 8.6 s for this shard" in lines[-1]


class RacedPlan(NumbersPlan):
    """Another shard finalizes while this one writes its last file: complete only from the second look."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0

    def is_complete(self, out_dir: Path) -> bool:
        self.looks += 1
        return self.looks > 1

    def finalize(self, out_dir: Path) -> str:
        raise AssertionError("finalized twice")


def test_a_shard_that_finds_the_metadata_written_meanwhile_does_not_write_it_again(tmp_path: Path) -> None:
    lines: list[str] = []
    result = generation.generate(RacedPlan(), tmp_path, progress=False, log=lines.append)
    assert result.finalized is None and result.files_missing == 0
    assert lines[-1].endswith("complete; another shard, finishing at the same time, wrote the metadata")
