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

"$python" -m venv "$venv"
# pip's whole output goes to this log; the screen gets one line per stage, and pip's words only when a
# stage fails. Its resolver says "ERROR: ... torchrec 1.9.2 requires fbgemm-gpu, which is not
# installed" after every later stage: the CPU build is installed as fbgemm-gpu-cpu, so that line is
# expected, and a newcomer who read it on the screen stopped trusting the rest.
log="$venv/setup.log"
: > "$log"
echo "[setup_venv] creating $venv with $("$venv/bin/python" -V 2>&1) (a few minutes the first time); pip's output: $log"
started=$SECONDS

stage() {  # stage "what it installs" pip-install-arguments...
  local what="$1" begin=$SECONDS first part
  shift
  first=$(( $(wc -l < "$log") + 1 ))
  echo "== $what: pip install $*" >> "$log"
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off "$@" >> "$log" 2>&1; then
    echo "[setup_venv] error: installing $what failed; the last lines of $log:" >&2
    tail -n 25 "$log" >&2
    exit 1
  fi
  part=$(tail -n +"$first" "$log")
  local downloaded cached is_local
  downloaded=$(grep -c '^ *Downloading ' <<<"$part" || true)
  cached=$(grep -c '^ *Using cached ' <<<"$part" || true)
  is_local=$(grep -c '^ *Processing /' <<<"$part" || true)
  printf '[setup_venv] %-52s %4d s  (%d downloaded, %d from pip'"'"'s cache, %d local files)\n' \
    "$what" $((SECONDS - begin)) "$downloaded" "$cached" "$is_local"
}

indexes=$("$venv/bin/python" -m pip config list 2>/dev/null | sed -n "s/^[^.]*\.\(index-url\|extra-index-url\|find-links\)='\(.*\)'$/\2/p" | tr ' ' '\n' | awk 'NF && !seen[$0]++' | paste -sd ' ' -)
echo "[setup_venv] packages from PyPI${indexes:+ and $indexes}"
stage "pip" --upgrade pip
stage "torch, torchvision" "torch==2.14.1" "torchvision==0.29.1"
stage "fbgemm-gpu-cpu (the CPU build)" "fbgemm-gpu-cpu==1.9.0"
stage "torchrec, without its dependencies" --no-deps "torchrec==1.9.2"
stage "torchrec's own dependencies" "tensordict==0.15.3" "torchmetrics==1.0.3" "tqdm==4.70.1" "pyre-extensions==0.0.32"
stage "gin-config, mlperf-logging, pytest" "gin-config==0.5.0" "mlperf-logging==4.1.68" "pytest==8.4.2"
stage "the rest (scripts/requirements-extra.txt)" -r "$root/scripts/requirements-extra.txt"
stage "this project, editable" --no-deps --no-build-isolation -e "$root"

touch "$marker"
echo "[setup_venv] ready: $venv in $((SECONDS - started)) s"
