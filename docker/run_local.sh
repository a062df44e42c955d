#!/usr/bin/env bash
# Runs an image built by docker/build_local.sh, with the options this host needs: docker when a
# Docker engine answers, else podman with runc, the cgroupfs manager and ulimits within the host's
# hard limits. Everything after the script's name is `run`'s own arguments:
#
#   docker/run_local.sh --rm -v "$PWD/data:/data" -v "$PWD/runs:/results" \
#       -e CONFIG=recommendation_v4/configs/debug.gin localhost/mlperf-trainers:cpu recommendation_v4/run_and_time.sh
#
# The loader workers share batches through /dev/shm: 2 GB of it unless --shm-size or --ipc is given.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=docker/engine.sh
source "$repo/docker/engine.sh"
engine="$(container_engine)" || exit 2
shm=(--shm-size 2g)
for arg in "$@"; do [[ "$arg" == --shm-size* || "$arg" == --ipc* ]] && shm=(); done
if [[ "$engine" == podman ]]; then
  exec podman "${podman_global[@]}" run "${podman_limits[@]}" "${shm[@]}" "$@"
fi
exec docker run "${shm[@]}" "$@"
