# Sourced by docker/build_local.sh and docker/run_local.sh: which container engine to use here.
# `container_engine` prints `docker` when a Docker engine answers, else `podman` (installed with
# apt, with runc and debootstrap, when missing and root); it says why on one line and fails when
# neither can be had. `podman_limits` holds the run options podman needs on this kind of host.

container_engine() {
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    echo docker
    return 0
  fi
  if [[ $EUID -ne 0 ]]; then
    echo "$(basename "$0"): needs root here: no Docker engine answers, and podman, runc and debootstrap run as root" >&2
    return 1
  fi
  if ! { command -v podman && command -v runc && command -v debootstrap; } >/dev/null 2>&1; then
    echo "$(basename "$0"): installing podman, runc and debootstrap (apt)" >&2
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq --no-install-recommends podman runc debootstrap >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends podman runc debootstrap >/dev/null 2>&1; }; } \
      || { echo "$(basename "$0"): no container runtime: no Docker engine answers and podman could not be installed" >&2
           return 1; }
  fi
  echo podman
}

# runc, not crun (crun refuses the hybrid cgroup v1/v2 layout of such hosts); the cgroupfs manager
# (no systemd here); ulimits within this host's hard limits (podman's defaults exceed them, and
# runc's setrlimit fails), the process limit also no higher than the kernel's pid_max (runc's
# setrlimit refused nproc 96,365, this host's hard limit, and took 32,768, its pid_max)
podman_global=(--runtime runc --cgroup-manager=cgroupfs)
_limit() { local value="$1" ceiling="$2"; [[ "$value" == unlimited || "$value" -gt "$ceiling" ]] && value="$ceiling"; echo "$value"; }
_pid_max="$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)"
_nofile="$(_limit "$(ulimit -Hn)" 1048576)"
_nproc="$(_limit "$(ulimit -Hu)" "$_pid_max")"
podman_limits=(--ulimit "nofile=$_nofile:$_nofile" --ulimit "nproc=$_nproc:$_nproc")
