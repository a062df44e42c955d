#!/usr/bin/env bash
# The first hour on a B200, MI350X or H100 node: every check and measurement of this project, one
# report. See scripts/accelerator_check.py (--help) for the steps; on a machine without an
# accelerator it runs the CPU path at tiny sizes and says what it skipped.
#   scripts/accelerator_check.sh [--out DIR] [--cpu] [--only STEP ...] [--budget-minutes 8]
#   PYTHON=/usr/bin/python3 scripts/accelerator_check.sh --bundle DIR   # the node's own torch and Triton
# (the bundle: scripts/accelerator_bundle.py, made on any machine with a package index)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
command -v "$python" >/dev/null 2>&1 || {
  echo "accelerator_check: no Python at $python; run 'make venv', or set PYTHON=/path/to/python3 (the node's own)" >&2
  exit 2
}
exec "$python" "$repo/scripts/accelerator_check.py" "$@"
