#!/usr/bin/env bash
# One timed FLUX.1 (flux1) training run, MLPerf style (see scripts/run_and_time.sh).
#
#   flux/run_and_time.sh                                        # the reference recipe, all local GPUs
#   CONFIG=flux/configs/debug.gin NPROC_PER_NODE=1 flux/run_and_time.sh
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/../scripts/run_and_time.sh" flux flux1 flux/configs/flux_schnell.gin
