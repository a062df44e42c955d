"""The download / verify shell scripts: syntax, dry runs, and verify on a real directory."""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys

import pytest

from recommendation_v4.data import layout

REPO = pathlib.Path(__file__).resolve().parents[3]
DOWNLOAD = REPO / "recommendation_v4" / "download_dataset.sh"
VERIFY = REPO / "recommendation_v4" / "verify_dataset.sh"
HF = "https://huggingface.co/datasets/yandex/yambda/resolve/main"


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


@pytest.mark.parametrize("script", [DOWNLOAD, VERIFY])
def test_scripts_parse_and_print_usage(script: pathlib.Path) -> None:
    assert _run("-n", str(script)).returncode == 0
    assert "set -euo pipefail" in script.read_text()
    result = _run(str(script), "--help")
    assert result.returncode == 0 and "Usage:" in result.stdout
    bad = _run(str(script), "--bogus")
    assert bad.returncode == 2 and "unknown argument" in bad.stderr


def test_download_dry_run_prints_urls_and_targets(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "yambda-500m"
    result = _run(str(DOWNLOAD), "--size", "500m", "--dataset-dir", str(target), "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"{HF}/flat/500m/multi_event.parquet" in out
    assert f"{HF}/album_item_mapping.parquet" in out and f"{HF}/artist_item_mapping.parquet" in out
    assert "embeddings.parquet" not in out
    for name in layout.RAW_FILES:
        assert f"{target}/raw/{name}" in out
    assert not target.exists()  # nothing ran
    with_embeddings = _run(
        str(DOWNLOAD), "--size", "5b", "--data-root", str(tmp_path), "--with-embeddings", "--dry-run"
    )
    assert f"{HF}/embeddings.parquet" in with_embeddings.stdout
    assert f"{tmp_path}/yambda-5b/raw/multi_event.parquet" in with_embeddings.stdout
    assert _run(str(DOWNLOAD), "--size", "1b", "--dry-run").returncode == 2


def test_verify_dry_run_and_real_run(tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    dry = _run(str(VERIFY), "--dataset-dir", "/no/such/dir", "--checksums", str(tmp_path / "sums"), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "recommendation_v4.data.schema --dataset-dir /no/such/dir" in dry.stdout
    assert "sha256sum --check" in dry.stdout

    raw = layout.raw_dir(tiny_dataset_dir)
    sums = tmp_path / "sums"
    sums.write_text("".join(f"{hashlib.sha256((raw / n).read_bytes()).hexdigest()}  {n}\n" for n in layout.RAW_FILES))
    ok = _run(str(VERIFY), "--dataset-dir", str(tiny_dataset_dir), "--checksums", str(sums))
    assert ok.returncode == 0, ok.stderr
    assert "verified" in ok.stdout

    sums.write_text(sums.read_text().replace(sums.read_text()[:8], "00000000", 1))
    assert _run(str(VERIFY), "--dataset-dir", str(tiny_dataset_dir), "--checksums", str(sums)).returncode != 0
    missing = _run(str(VERIFY), "--dataset-dir", str(tmp_path / "empty"))
    assert missing.returncode == 1 and "download_dataset.sh" in missing.stderr
