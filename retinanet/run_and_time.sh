#!/usr/bin/env bash
# One timed RetinaNet training run, MLPerf style (see scripts/run_and_time.sh).
#
#   retinanet/run_and_time.sh                              # the reference recipe, all local GPUs
#   CONFIG=retinanet/configs/debug.gin NPROC_PER_NODE=1 retinanet/run_and_time.sh
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/../scripts/run_and_time.sh" retinanet retinanet retinanet/configs/reference.gin
