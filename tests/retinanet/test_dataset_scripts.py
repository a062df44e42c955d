"""The download/verify shell scripts: syntax, usage, dry runs, and a real verify run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = [REPO / "retinanet" / "download_dataset.sh", REPO / "retinanet" / "verify_dataset.sh"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses_and_is_strict(script: Path) -> None:
    assert _run("-n", str(script)).returncode == 0
    assert "set -euo pipefail" in script.read_text()
    help_run = _run(str(script), "--help")
    assert help_run.returncode == 0 and "--dry-run" in help_run.stdout
    bad = _run(str(script), "--no-such-flag")
    assert bad.returncode == 2 and "unknown argument" in bad.stderr


def test_download_dry_run_shows_the_fiftyone_command(tmp_path: Path) -> None:
    run = _run(str(SCRIPTS[0]), "--dry-run", "--dataset-dir", str(tmp_path / "oi"), "--splits", "validation")
    assert run.returncode == 0
    assert "retinanet.data.fiftyone_download" in run.stdout and str(tmp_path / "oi") in run.stdout
    assert "--splits validation" in run.stdout
    assert not (tmp_path / "oi").exists()  # a dry run creates nothing
    assert _run(str(SCRIPTS[0]), "--dry-run", "--splits", "test").returncode == 2


def test_verify_dry_run_and_real_run(tiny_dataset_dir: Path, tmp_path: Path) -> None:
    dry = _run(str(SCRIPTS[1]), "--dry-run", "--dataset-dir", str(tiny_dataset_dir))
    assert dry.returncode == 0 and "--expect-train 1170301" in dry.stdout
    ok = _run(
        str(SCRIPTS[1]),
        "--dataset-dir",
        str(tiny_dataset_dir),
        "--expect-train",
        "32",
        "--expect-validation",
        "16",
        "--expect-classes",
        "4",
        "--decode-sample",
        "4",
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("OK:") == 2
    assert _run(str(SCRIPTS[1]), "--expect-train", "many").returncode == 2
    missing = _run(str(SCRIPTS[1]), "--dataset-dir", str(tmp_path / "absent"))
    assert missing.returncode == 1 and "dataset directory not found" in missing.stderr
