#!/usr/bin/env bash
# Builds one of the images on this machine, with no registry: docker when a Docker engine answers,
# else podman (installed with apt when missing) on a Debian bookworm base bootstrapped here once.
#
#   docker/build_local.sh [cpu|cuda] [--tag TAG] [--refresh-base]   # default: cpu
#   docker/build_local.sh --remove                                  # the images it built, and their layers
#
# With podman (this machine's way: its docker CLI has no engine):
# - the base: `debootstrap --variant=minbase bookworm` (from the Debian mirror, ~30 s), imported as
#   localhost/mlperf-base:bookworm-<date>; a later build reuses the newest such image
#   (--refresh-base makes a new one);
# - the build: the Dockerfile on that base (the cuda one with PYTHON_FROM=base: Debian's
#   python3.11), the host's network, pip's settings of this host passed as build arguments (index,
#   extra indexes, find-links, CA bundle), their local folders and the CA bundle mounted read-only
#   for the build only, and explicit ulimits within this host's hard limits (podman's defaults
#   exceed them and runc's setrlimit fails).
# It prints the image's size and the build's time. docker/run_local.sh runs the image the same way.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
flavor=cpu tag="" refresh=0 remove=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    cpu|cuda) flavor="$1" ;;
    --tag) tag="${2:?--tag needs a value}"; shift ;;
    --refresh-base) refresh=1 ;;
    --remove) remove=1 ;;
    -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "build_local: unknown argument $1 (cpu, cuda, --tag TAG, --refresh-base, --remove)" >&2; exit 2 ;;
  esac
  shift
done
tag="${tag:-localhost/mlperf-trainers:$flavor}"
# shellcheck source=docker/engine.sh
source "$repo/docker/engine.sh"
engine="$(container_engine)" || exit 2

if [[ $remove -eq 1 ]]; then
  for image in $("$engine" images --format '{{.Repository}}:{{.Tag}}' | grep -E '(^|/)mlperf-(trainers|base):' || true); do
    "$engine" rmi -f "$image" >/dev/null && echo "[build_local] removed $image"
  done
  "$engine" image prune -f >/dev/null 2>&1 || true

  exit 0
fi

started=$(date +%s)
build=("$engine" build --network host -f "$repo/docker/Dockerfile.$flavor" -t "$tag")
if [[ "$engine" == podman ]]; then
  base="$(podman images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/mlperf-base:bookworm-' | sort | tail -n 1 || true)"
  if [[ -z "$base" || $refresh -eq 1 ]]; then
    base="localhost/mlperf-base:bookworm-$(date +%Y%m%d)"
    rootfs="$(mktemp -d /tmp/mlperf-base.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    echo "[build_local] bootstrapping Debian bookworm into $rootfs (once; the image is $base)"
    # (debootstrap does not resolve what --include brings: python3.11-venv's own needs are listed)
    debootstrap --variant=minbase \
      --include=python3.11,python3.11-venv,python3-distutils,python3-pip-whl,python3-setuptools-whl,ca-certificates,make,procps \
      bookworm "$rootfs" >"$rootfs.log" 2>&1 || { tail -n 5 "$rootfs.log" >&2; echo "build_local: debootstrap failed (log: $rootfs.log)" >&2; exit 1; }
    tar -C "$rootfs" -c . | podman import - "$base" >/dev/null
    rm -rf "$rootfs" "$rootfs.log"
  fi
  echo "[build_local] base $base"
  # docker's image format: the OCI one has no SHELL instruction, and the Dockerfiles' RUN steps use bash
  build=(podman "${podman_global[@]}" "${build[@]:1}" --format docker --build-arg "BASE_IMAGE=$base" "${podman_limits[@]}")
  [[ "$flavor" == cuda ]] && build+=(--build-arg PYTHON_FROM=base)
  # this host's pip settings, for the build only: local folders and the CA bundle mounted read-only
  while IFS='=' read -r key value; do
    value="${value#\'}" value="${value%\'}"
    [[ -z "$value" ]] && continue
    case "$key" in
      *.index-url) build+=(--build-arg "PIP_INDEX_URL=$value") ;;
      *.extra-index-url) build+=(--build-arg "PIP_EXTRA_INDEX_URL=$value") ;;
      *.find-links) build+=(--build-arg "PIP_FIND_LINKS=$value") ;;
      *.cert) build+=(--build-arg "PIP_CERT=/etc/pip-host-ca.crt" -v "$value:/etc/pip-host-ca.crt:ro") ;;
      *) continue ;;
    esac
    [[ "$key" == *.cert ]] && continue
    for location in $value; do
      folder="${location#file://}"
      folder="${folder%/simple}"  # a local index: its pages link to files beside simple/
      [[ "$folder" == /* && -d "$folder" ]] && build+=(-v "$folder:$folder:ro")
    done
  done < <(python3 -m pip config list 2>/dev/null | sed 's/^:env:\./global./' | sort -u)
else
  echo "[build_local] docker: the Dockerfile's own base ($flavor)"
fi

echo "[build_local] ${build[*]} $repo"
"${build[@]}" "$repo"
seconds=$(( $(date +%s) - started ))
bytes="$("$engine" image inspect --format '{{.Size}}' "$tag")"
echo "[build_local] $tag: $(( bytes / 1000000 )) MB, built in ${seconds} s"
