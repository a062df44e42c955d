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

if [[ -f "$marker" && "$marker" -nt "$stamp_src" ]]; then
  exit 0
fi

echo "[setup_venv] creating $venv (first run takes a few minutes)"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

"${pip[@]}" --upgrade pip
"${pip[@]}" "torch==2.14.1" "torchvision==0.29.1"
"${pip[@]}" "fbgemm-gpu-cpu==1.9.0"
"${pip[@]}" --no-deps "torchrec==1.9.2"
"${pip[@]}" "tensordict==0.15.3" "torchmetrics==1.0.3" tqdm pyre-extensions
"${pip[@]}" "gin-config==0.5.0" "mlperf-logging==4.1.68" "pytest==8.4.2"
"${pip[@]}" -r "$root/scripts/requirements-extra.txt"
"${pip[@]}" --no-deps --no-build-isolation -e "$root"

touch "$marker"
echo "[setup_venv] ready: $venv"
