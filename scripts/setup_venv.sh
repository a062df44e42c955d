#!/usr/bin/env bash
# Creates .venv/ in the repository root with the pinned stack, in the one order that
# installs cleanly on a CPU machine (see README "Environment"): torch first, then the CPU
# fbgemm, then torchrec without its dependencies (they would pull the CUDA fbgemm over
# the CPU one), then the rest. Idempotent: a finished venv is marked and left alone.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$root/.venv}"
python="${PYTHON:-python3}"
marker="$venv/.stack-installed"
stamp_src="$root/scripts/setup_venv.sh"

if [[ -f "$marker" && "$marker" -nt "$stamp_src" && "$marker" -nt "$root/scripts/requirements-extra.txt" && "$marker" -nt "$root/pyproject.toml" ]]; then
  exit 0
fi

echo "[setup_venv] creating $venv (first run takes a few minutes)"
"$python" -m venv "$venv"
pip_install() {
  # the machine's pip config lists local indexes that do not all exist; drop that noise
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v '^WARNING: Location .* is ignored' || true; }
}

pip_install --upgrade pip
pip_install "torch==2.14.1" "torchvision==0.29.1"
pip_install "fbgemm-gpu-cpu==1.9.0"
pip_install --no-deps "torchrec==1.9.2"
pip_install "tensordict==0.15.3" "torchmetrics==1.0.3" "tqdm==4.70.1" "pyre-extensions==0.0.32"
pip_install "gin-config==0.5.0" "mlperf-logging==4.1.68" "pytest==8.4.2"
pip_install -r "$root/scripts/requirements-extra.txt"
pip_install --no-deps --no-build-isolation -e "$root"

touch "$marker"
echo "[setup_venv] ready: $venv"
