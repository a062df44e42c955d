"""download_dataset.sh / verify_dataset.sh: dry runs, and verify on a generated copy of the R2 layout."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flux.data import layout

REPO = Path(__file__).resolve().parents[3]
DOWNLOAD = REPO / "flux" / "download_dataset.sh"
VERIFY = REPO / "flux" / "verify_dataset.sh"
METADATA = "https://training.mlcommons-storage.org/metadata"
MD5_LISTS = {
    "cc12m_preprocessed": "flux-1-cc12m-preprocessed.md5",
    "coco_preprocessed": "flux-1-coco-preprocessed.md5",
    "empty_encodings": "flux-1-empty-encodings.md5",
}


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    return subprocess.run(["bash", *args], capture_output=True, text=True, env=environment, cwd=REPO, timeout=120)


@pytest.fixture
def downloaded_copy(tiny_dataset_dir: Path, tmp_path: Path) -> Path:
    """The tiny dataset under the R2 directory names, with md5 lists like the downloader leaves."""
    root = tmp_path / "flux"
    sources = layout.synthetic_paths(tiny_dataset_dir)
    targets = layout.downloaded_paths(root)
    for source, target in zip(
        (sources.train, sources.validation, sources.empty_encodings),
        (targets.train, targets.validation, targets.empty_encodings),
        strict=False,
    ):
        shutil.copytree(source, target)
        lines = [f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.name}\n" for p in sorted(target.iterdir())]
        # R2's lists also name the bucket's own metadata files, which the check skips
        lines.append(f"{'0' * 32}  metadata/staging-{MD5_LISTS[target.name]}\n")
        (target / MD5_LISTS[target.name]).write_text("".join(lines))
    return root


@pytest.mark.parametrize("script", [DOWNLOAD, VERIFY])
def test_scripts_parse_and_print_usage(script: Path) -> None:
    assert _run("-n", str(script)).returncode == 0
    assert os.access(script, os.X_OK)
    help_run = _run(str(script), "--help")
    assert help_run.returncode == 0 and "usage:" in help_run.stdout and "--dry-run" in help_run.stdout
    bad = _run(str(script), "--bogus")
    assert bad.returncode == 2 and "unknown argument" in bad.stderr


def test_download_dry_run_names_every_uri_and_target(tmp_path: Path) -> None:
    target = tmp_path / "data" / "flux"
    result = _run(str(DOWNLOAD), "--data-dir", str(target), "--dry-run")
    assert result.returncode == 0, result.stderr
    for part, uri in (
        ("cc12m_preprocessed", "flux-1-cc12m-preprocessed.uri"),
        ("coco_preprocessed", "flux-1-coco-preprocessed.uri"),
        ("empty_encodings", "flux-1-empty-encodings.uri"),
    ):
        assert f"-d {part} {METADATA}/{uri}" in result.stdout
    assert f"cd {target} &&" in result.stdout and "mlc-r2-downloader.sh" in result.stdout
    assert not target.exists()
    default = _run(
        str(DOWNLOAD),
        "--dry-run",
        "--parts",
        "empty_encodings",
        "--service-account",
        env={"MLPERF_DATA_ROOT": str(tmp_path / "root")},
    )
    assert f"{tmp_path / 'root' / 'flux'}" in default.stdout and "cc12m" not in default.stdout
    assert "-s -d empty_encodings" in default.stdout
    assert _run(str(DOWNLOAD), "--dry-run", "--parts", "coco").returncode == 2


def test_verify_dry_run_lists_the_checks(tmp_path: Path) -> None:
    result = _run(str(VERIFY), "--data-dir", str(tmp_path / "absent"), "--dry-run")
    assert result.returncode == 0, result.stderr
    for part, md5 in MD5_LISTS.items():
        assert f"cd {tmp_path / 'absent' / part} && md5sum --check --quiet {md5}" in result.stdout
    assert (
        f"flux.data.verify --dataset-dir {tmp_path / 'absent'} --expect-train 1099776 --expect-validation 29696"
        in result.stdout
    )
    assert "md5sum" not in _run(str(VERIFY), "--skip-md5", "--dry-run").stdout


def test_verify_passes_then_names_the_corrupted_file(downloaded_copy: Path) -> None:
    args = [
        str(VERIFY),
        "--data-dir",
        str(downloaded_copy),
        "--expect-train",
        "512",
        "--expect-validation",
        "64",
        "--expect-shapes",
        "any",
    ]
    ok = _run(*args)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "OK: cc12m_preprocessed: md5" in ok.stdout and "verified" in ok.stdout

    shard = downloaded_copy / "coco_preprocessed" / "data-00001-of-00002.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside a cell: only the md5 can tell
    shard.write_bytes(bytes(data))
    corrupt = _run(*args)
    assert corrupt.returncode == 1
    assert "data-00001-of-00002.arrow: FAILED" in corrupt.stdout + corrupt.stderr
    assert "FAILED: coco_preprocessed: md5 check failed" in corrupt.stderr


def test_verify_without_md5_lists_needs_skip_and_still_checks_structure(downloaded_copy: Path) -> None:
    (downloaded_copy / "empty_encodings" / MD5_LISTS["empty_encodings"]).unlink()
    missing = _run(
        str(VERIFY),
        "--data-dir",
        str(downloaded_copy),
        "--expect-shapes",
        "any",
        "--expect-train",
        "512",
        "--expect-validation",
        "64",
    )
    assert missing.returncode == 1 and "md5 list" in missing.stderr and "--skip-md5" in missing.stderr
    (downloaded_copy / "cc12m_preprocessed" / "data-00004-of-00011.arrow").unlink()
    broken = _run(str(VERIFY), "--data-dir", str(downloaded_copy), "--skip-md5")  # reference counts and shapes
    assert broken.returncode == 1
    assert "data-00004-of-00011.arrow: shard listed in" in broken.stderr
    # the validation split opens, but is not the reference's shape
    assert "coco_preprocessed: samples are T5 [16, 64], CLIP [32], latents [16, 8, 8]" in broken.stderr
    assert "expected T5 [256, 4096], CLIP [768], latents [16, 32, 32]" in broken.stderr
