"""The DLIO 2.0.0 environment (.venv-dlio/), built by storage/dlio/environment/setup_env.sh on first use.

It is a separate venv: dlio-benchmark 2.0.0 imports TensorFlow at start-up and brings its own
torch/numpy pins, which must not touch the trainers' .venv/. Its location follows the script:
$DLIO_VENV, else .venv-dlio/ in the repository root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
SETUP_SCRIPT = Path("storage") / "dlio" / "environment" / "setup_env.sh"
# DLIO 3.0.x (mlcommons/DLIO_local_changes, the DLIO mlpstorage runs): never on PyPI, so its env is only
# built from a local copy the user names (DLIO3_SOURCE); CI replays with 2.0.0
SETUP_SCRIPT_3 = Path("storage") / "dlio" / "environment" / "setup_env_3.sh"
MARKER = ".dlio-installed"  # written by the script as its last step, only after everything installed


class DlioEnvError(RuntimeError):
    """One line: why the DLIO environment could not be built."""


def dlio_venv(root: Path | None = None) -> Path:
    root = Path(root) if root is not None else REPO_ROOT
    return Path(os.environ["DLIO_VENV"]) if os.environ.get("DLIO_VENV") else root / ".venv-dlio"


def dlio3_venv(root: Path | None = None) -> Path:
    root = Path(root) if root is not None else REPO_ROOT
    return Path(os.environ["DLIO3_VENV"]) if os.environ.get("DLIO3_VENV") else root / ".venv-dlio3"


def ensure_dlio3_env(root: Path | None = None) -> Path:
    """The DLIO 3.0.x env's python; built first when DLIO3_SOURCE names a local copy, else a DlioEnvError
    saying how to build it (nothing is downloaded: DLIO_local_changes is not on PyPI)."""
    root = Path(root) if root is not None else REPO_ROOT
    script = root / SETUP_SCRIPT_3
    venv = dlio3_venv(root)
    if not _ready(venv, script):
        if not os.environ.get("DLIO3_SOURCE"):
            raise DlioEnvError(f"DLIO 3.0.x is not installed in {venv}: build it from a local copy of "
                               f"mlcommons/DLIO_local_changes, DLIO3_SOURCE=<checkout or archive> bash {SETUP_SCRIPT_3}")
        _run_setup(script, venv, venv_variable="DLIO3_VENV")
        if not _ready(venv, script):
            raise DlioEnvError(f"{script} finished but {venv / MARKER} is missing: the env is not ready")
    python = venv / "bin" / "python"
    if not python.exists():
        raise DlioEnvError(f"{python}: missing although {venv / MARKER} exists (delete {venv} to rebuild it)")
    return python


def _ready(venv: Path, script: Path) -> bool:
    # the same test the script makes: a marker newer than the script (new pins rebuild the env)
    marker = venv / MARKER
    return marker.is_file() and marker.stat().st_mtime > script.stat().st_mtime


def ensure_dlio_env(root: Path | None = None) -> Path:
    """The DLIO env's python (its bin/ also holds mpiexec); builds the env first if it is not ready."""
    root = Path(root) if root is not None else REPO_ROOT
    script = root / SETUP_SCRIPT
    if not script.is_file():
        raise DlioEnvError(f"{script}: setup script not found")
    venv = dlio_venv(root)
    if not _ready(venv, script):
        _run_setup(script, venv)
        if not _ready(venv, script):
            raise DlioEnvError(f"{script} finished but {venv / MARKER} is missing: the env is not ready")
    python = venv / "bin" / "python"
    if not python.exists():
        raise DlioEnvError(f"{python}: missing although {venv / MARKER} exists (delete {venv} to rebuild it)")
    return python


def _run_setup(script: Path, venv: Path, *, venv_variable: str = "DLIO_VENV") -> None:
    env = dict(os.environ, **{venv_variable: str(venv)})
    last = ""
    # streamed line by line: the first build takes minutes and should show it is alive
    with subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, cwd=script.parents[3]) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if line.strip():
                last = line.strip()
    if proc.returncode != 0:
        # the script's last line names the package that failed ("[setup_dlio_env] error: ...")
        reason = last.split("error:", 1)[1].strip() if "error:" in last else (last or "no output")
        raise DlioEnvError(f"building the DLIO env {venv} failed (exit {proc.returncode}): {reason}")
