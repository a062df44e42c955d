"""The three generators on common.data.generation, through their command lines: two worker
processes and two shards write the bytes one process writes; a generation killed with SIGKILL and
relaunched completes with those bytes; the flags mean the same everywhere."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainers.trainer_process import REPO

# small sizes with several data files each (DLRM: 3 chunks of 1,000 users)
GENERATORS = {
    "retinanet": ["--size", "tiny", "--num-train", "12", "--num-validation", "4"],
    "flux": ["--size", "tiny", "--num-train", "60", "--num-validation", "16", "--rows-per-shard", "8"],
    "recommendation_v4": ["--size", "small", "--num-train", "2500"],
}


def _generate(package: str, out: Path, *flags: str, timeout: float = 300) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", f"{package}.data.synthetic", *GENERATORS[package], "--out", str(out),
               "--no-progress", *flags]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("package", list(GENERATORS))
@pytest.mark.over_budget(
    reason="generates a dataset with 1 and 2 workers and in 2 shards (command line each) to compare bytes")
def test_workers_and_shards_do_not_change_the_bytes(package: str, tmp_path: Path) -> None:
    one = _generate(package, tmp_path / "one")
    assert one.returncode == 0, one.stderr[-3000:]
    two = _generate(package, tmp_path / "workers", "--workers", "2")
    assert two.returncode == 0, two.stderr[-3000:]
    first = _generate(package, tmp_path / "shards", "--shard", "1/2")
    assert first.returncode == 0 and "of other shards still missing" in first.stdout, first.stdout + first.stderr
    second = _generate(package, tmp_path / "shards", "--shard", "0/2")
    assert second.returncode == 0 and "finalized:" in second.stdout, second.stdout + second.stderr
    reference = _digests(tmp_path / "one")
    assert len(reference) > 5
    assert _digests(tmp_path / "workers") == reference
    assert _digests(tmp_path / "shards") == reference


@pytest.mark.parametrize("package", list(GENERATORS))
@pytest.mark.over_budget(
    reason="generates each dataset four ways (split, workers, learnable and storage content) to compare their bytes")
def test_the_storage_content_is_the_same_bytes_for_any_split_and_not_the_learnable_ones(package: str,
                                                                                      tmp_path: Path) -> None:
    one = _generate(package, tmp_path / "one", "--content", "storage")
    assert one.returncode == 0, one.stderr[-3000:]
    two = _generate(package, tmp_path / "workers", "--content", "storage", "--workers", "2")
    assert two.returncode == 0, two.stderr[-3000:]
    for shard in ("1/2", "0/2"):
        half = _generate(package, tmp_path / "shards", "--content", "storage", "--shard", shard)
        assert half.returncode == 0, half.stdout + half.stderr
    mixed = _generate(package, tmp_path / "shards", "--shard", "0/2")  # the learnable content into it: refused
    assert mixed.returncode != 0 and "content" in mixed.stdout + mixed.stderr
    reference = _digests(tmp_path / "one")
    assert _digests(tmp_path / "workers") == reference
    assert _digests(tmp_path / "shards") == reference
    learnable = _generate(package, tmp_path / "learnable")
    assert learnable.returncode == 0, learnable.stderr[-3000:]
    # the samples' files (the empty encodings, mappings and metadata may well be the same)
    data_files = {name for name in reference if name.endswith((".jpg", ".arrow")) or "multi_event" in name}
    assert data_files and all(reference[name] != _digests(tmp_path / "learnable").get(name) for name in data_files)


@pytest.mark.parametrize("package", list(GENERATORS))
@pytest.mark.over_budget(reason="starts each generator's command line once per flag set")
def test_the_same_flags_everywhere(package: str, tmp_path: Path) -> None:
    helped = subprocess.run([sys.executable, "-m", f"{package}.data.synthetic", "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0
    for flag in ("--size", "--seed", "--out", "--num-train", "--workers", "--shard I/N", "--finalize", "--dry-run",
                 "--fill-memory-ratio", "--overwrite", "--content"):
        assert flag in helped.stdout, (package, flag)
    assert "bytes/sample" in helped.stdout and "reference" in helped.stdout or package == "recommendation_v4"
    dry = _generate(package, tmp_path / "dry", "--dry-run")
    assert dry.returncode == 0 and "data files" in dry.stdout and "for this shard" in dry.stdout, dry.stderr
    assert not (tmp_path / "dry").exists() or not any((tmp_path / "dry").rglob("*.*"))
    bad = _generate(package, tmp_path / "bad", "--shard", "2/2")
    assert bad.returncode == 2 and "--shard I/N needs 0 <= I < N" in bad.stderr


@pytest.mark.over_budget(reason="a generator process killed mid-way, then relaunched to completion")
def test_a_generation_killed_mid_way_and_relaunched_completes(tmp_path: Path) -> None:
    """RetinaNet's JPEGs: hundreds of files, so the kill lands between and inside them."""
    flags = ["--size", "tiny", "--num-train", "300", "--num-validation", "8", "--no-progress"]
    command = [sys.executable, "-m", "retinanet.data.synthetic", *flags]
    out = tmp_path / "killed"
    proc = subprocess.Popen([*command, "--out", str(out)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(list(out.rglob("*.jpg"))) < 40:
        assert proc.poll() is None and time.monotonic() < deadline, "the generation ended before it could be killed"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not list(out.rglob("labels/*.json")) and not (out / "generator.json").exists()  # nothing a trainer takes
    relaunched = subprocess.run([*command, "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert relaunched.returncode == 0 and "already complete" in relaunched.stdout, relaunched.stderr[-3000:]
    verified = subprocess.run([sys.executable, "-m", "retinanet.data.verify", "--dataset-dir", str(out),
                               "--expect-train", "300", "--expect-validation", "8", "--expect-classes", "4"],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    clean = subprocess.run([*command, "--out", str(tmp_path / "clean")], cwd=REPO, capture_output=True, text=True,
                           timeout=300)
    assert clean.returncode == 0
    assert _digests(out) == _digests(tmp_path / "clean")
