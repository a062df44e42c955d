#!/usr/bin/env bash
# The first hour on a B200, MI350X or H100 node: every check and measurement of this project, one
# report. See scripts/accelerator_check.py (--help) for the steps; on a machine without an
# accelerator it runs the CPU path at tiny sizes and says what it skipped.
#   scripts/accelerator_check.sh [--out DIR] [--cpu] [--only STEP ...]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || { echo "accelerator_check: no $python; run 'make venv' (or set PYTHON)" >&2; exit 2; }
exec "$python" "$repo/scripts/accelerator_check.py" "$@"
