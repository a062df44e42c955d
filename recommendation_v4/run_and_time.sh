#!/usr/bin/env bash
# One timed DLRMv4 (DLRM-HSTU) training run, MLPerf style (see scripts/run_and_time.sh).
#
#   recommendation_v4/run_and_time.sh                      # the reference recipe, all local devices
#   CONFIG=recommendation_v4/configs/debug.gin NPROC_PER_NODE=1 recommendation_v4/run_and_time.sh
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/../scripts/run_and_time.sh" recommendation_v4 dlrmv4 recommendation_v4/configs/yambda_5b.gin
