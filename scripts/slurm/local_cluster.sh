#!/usr/bin/env bash
# A local Slurm cluster of two emulated nodes (n1, n2) on this one machine, to run
# scripts/slurm/train.sbatch, and tests/slurm, against a real slurmctld/slurmd/srun.
#
#   scripts/slurm/local_cluster.sh up       # start (installs slurm-wlm + munge with apt when root and missing)
#   eval "$(scripts/slurm/local_cluster.sh env)"   # export SLURM_CONF for sbatch/squeue/scancel/...
#   sbatch --nodes=2 --ntasks-per-node=1 scripts/slurm/train.sbatch recommendation_v4 recommendation_v4/configs/debug.gin
#   scancel --batch --signal=USR1 <job>     # a preemption notice: checkpoint, exit 0, requeue, resume
#   scripts/slurm/local_cluster.sh status   # exit 0 when both nodes are up
#   scripts/slurm/local_cluster.sh down     # cancel every job, stop every daemon it started, delete the directory
#
# Everything lives under $SLURM_LOCAL_ROOT (default /tmp/mlperf-slurm): slurm.conf, its own munged
# (own key and socket, so a system munge is left alone), state, spool, logs, pid files. Two
# slurmd daemons (`slurmd -N n1`, `slurmd -N n2`) on distinct ports stand for two nodes; both have
# NodeAddr=127.0.0.1 (train.sbatch takes MASTER_ADDR from the first node's NodeAddr, so the names
# n1/n2 need not resolve and /etc/hosts is left alone). `up` is idempotent: when the cluster is
# already up with the same configuration it returns at once. Needs root (slurmd runs jobs as
# any user only as root; munged runs as the munge user). Exit status 4: not root, or Slurm is
# not installed and cannot be.
#
# Environment: SLURM_LOCAL_ROOT (the directory), SLURM_LOCAL_PORT (slurmctld's port; the nodes
# take the next two; default 16817), SLURM_LOCAL_CPUS (CPUs each emulated node offers; default
# 4, more than the machine has is fine: tasks only share its cores), SLURM_LOCAL_KILLWAIT
# (seconds between SIGTERM and SIGKILL at a time limit or scancel; default 30, as Slurm's),
# SLURM_LOCAL_HOSTS_DIR (the root of emulated client hosts named n1 and n2, storage/backends/emulated_hosts.py:
# each slurmd then runs in its node's mount and UTS namespaces, so a job step on n1 has n1's hostname
# and sees n1's mounts, e.g. its own sshfs mount of a shared export, storage/backends/shared_storage.py).
set -euo pipefail

action="${1:-up}"
root="${SLURM_LOCAL_ROOT:-/tmp/mlperf-slurm}"
port="${SLURM_LOCAL_PORT:-16817}"
cpus="${SLURM_LOCAL_CPUS:-4}"
killwait="${SLURM_LOCAL_KILLWAIT:-30}"
hosts_dir="${SLURM_LOCAL_HOSTS_DIR:-}"
agent="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/storage/backends/emulated_host_ssh"
nodes=(n1 n2)
conf="$root/slurm.conf"
export SLURM_CONF="$conf"

say() { echo "local_cluster: $*" >&2; }
die() { say "$1"; exit "${2:-1}"; }

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pidfiles() {  # stop the daemons of these pid files together: SIGTERM, then SIGKILL after 5 s
  local pidfile pid pids=() i
  for pidfile in "$@"; do
    [[ -f "$pidfile" ]] || continue
    pid="$(cat "$pidfile")"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$pidfile"
  done
  (( ${#pids[@]} )) || return 0
  for i in $(seq 50); do
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && break; pid=; done
    [[ -z "${pid:-}" ]] && return 0
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

install_slurm() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return 0
  [[ $EUID -eq 0 ]] || die "slurm-wlm/munge are not installed and installing them needs root (apt-get install slurm-wlm munge)" 4
  command -v apt-get >/dev/null || die "slurm-wlm/munge are not installed and there is no apt-get here" 4
  say "installing slurm-wlm and munge (apt, --no-install-recommends)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends slurm-wlm munge >"$root.apt.log" 2>&1; then
    apt-get update -qq >>"$root.apt.log" 2>&1 || true
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >>"$root.apt.log" 2>&1 \
      || die "apt-get install slurm-wlm munge failed; see $root.apt.log" 4
  fi
  rm -f "$root.apt.log"
}

write_conf() {  # to stdout: the whole configuration is a function of the environment above
  cat <<CONF
# written by scripts/slurm/local_cluster.sh
# node namespaces: ${hosts_dir:-none}
ClusterName=mlperf-local
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$root/munge/munge.socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
StateSaveLocation=$root/state
SlurmdSpoolDir=$root/spool/%n
SlurmctldLogFile=$root/log/slurmctld.log
SlurmdLogFile=$root/log/slurmd-%n.log
SlurmctldPidFile=$root/slurmctld.pid
SlurmdPidFile=$root/slurmd-%n.pid
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=$killwait
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
MessageTimeout=10
SchedulerParameters=defer_batch,sched_interval=2,bf_interval=2
NodeName=n1 NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 Port=$((port + 1)) CPUs=$cpus State=UNKNOWN
NodeName=n2 NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 Port=$((port + 2)) CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
}

nodes_idle() {  # every node answers and takes jobs
  local states
  states="$(sinfo -h -N -o '%N %T' 2>/dev/null)" || return 1
  [[ "$(grep -cE '^n[12] (idle|mixed|allocated)$' <<<"$states")" -eq ${#nodes[@]} ]]
}

start_munge() {
  local m="$root/munge"
  alive "$m/munged.pid" && return 0
  install -d -o munge -g munge -m 0755 "$m"  # clients reach the socket: a+x
  if [[ ! -s "$m/munge.key" ]]; then
    dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none
    chown munge:munge "$m/munge.key"
    chmod 0400 "$m/munge.key"
  fi
  env -u SLURM_CONF su -s /bin/sh munge -c "munged --socket=$m/munge.socket --key-file=$m/munge.key --pid-file=$m/munged.pid \
    --log-file=$m/munged.log --seed-file=$m/munged.seed" \
    || die "munged did not start; see $m/munged.log"
  local i
  for i in $(seq 50); do [[ -S "$m/munge.socket" ]] && return 0; sleep 0.1; done
  die "munged did not open $m/munge.socket; see $m/munged.log"
}

up() {
  [[ $EUID -eq 0 ]] || die "the local cluster needs root (slurmd must run jobs as the submitting user)" 4
  install_slurm
  mkdir -p "$root"/{state,spool,log}
  local wanted
  wanted="$(write_conf)"
  if [[ -f "$conf" && "$(cat "$conf")" == "$wanted" ]] && alive "$root/slurmctld.pid" \
     && alive "$root/slurmd-n1.pid" && alive "$root/slurmd-n2.pid" && nodes_idle; then
    say "already up ($conf)"
    return 0
  fi
  if [[ -f "$conf" && "$(cat "$conf")" != "$wanted" ]]; then
    say "configuration changed: restarting"
    stop_daemons
  fi
  printf '%s\n' "$wanted" >"$conf"
  mkdir -p "$root"/spool/{n1,n2}
  start_munge
  alive "$root/slurmctld.pid" || slurmctld -f "$conf" -i || die "slurmctld did not start; see $root/log/slurmctld.log"
  local node
  for node in "${nodes[@]}"; do
    alive "$root/slurmd-$node.pid" && continue
    if [[ -n "$hosts_dir" ]]; then
      # entered through the hosts' own agent, which checks that the holder's pid is still the holder
      MLPERF_EMULATED_HOSTS="$hosts_dir" "$agent" "$node" true \
        || die "SLURM_LOCAL_HOSTS_DIR=$hosts_dir has no live emulated host $node (storage/backends/emulated_hosts.py makes them)" 2
      MLPERF_EMULATED_HOSTS="$hosts_dir" "$agent" "$node" "$(printf '%q ' slurmd -f "$conf" -N "$node")" \
        || die "slurmd -N $node did not start; see $root/log/slurmd-$node.log"
    else
      slurmd -f "$conf" -N "$node" || die "slurmd -N $node did not start; see $root/log/slurmd-$node.log"
    fi
  done
  local i
  for i in $(seq 300); do
    if nodes_idle; then
      say "up: nodes n1 n2, partition local ($conf)"
      return 0
    fi
    # a node that registered while the controller still had it DOWN comes back on its own
    # (ReturnToService=2); one left in DOWN/DRAIN from an earlier run is resumed here
    if (( i % 20 == 0 )); then scontrol update NodeName=n1,n2 State=RESUME >/dev/null 2>&1 || true; fi
    sleep 0.1
  done
  sinfo -N >&2 || true
  die "nodes did not become idle within 30 s; see $root/log/"
}

stop_daemons() {
  stop_pidfiles "$root/slurmd-n1.pid" "$root/slurmd-n2.pid" "$root/slurmctld.pid"
}

job_pids() {  # processes of this cluster's jobs: a job id, and this cluster's slurm.conf, in their environment
  local pid env
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [[ "$pid" == "$$" ]] && continue
    env="$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ")" || continue
    grep -qxF "SLURM_CONF=$conf" <<<"$env" && grep -q '^SLURM_JOB_ID=' <<<"$env" && echo "$pid"
  done
  return 0
}

down() {
  [[ -d "$root" ]] || { say "not up ($root does not exist)"; return 0; }
  if alive "$root/slurmctld.pid"; then
    scancel --full --signal=KILL --state=RUNNING --user="$(id -un)" >/dev/null 2>&1 || true
    scancel --user="$(id -un)" >/dev/null 2>&1 || true
    local i
    for i in $(seq 100); do
      [[ -z "$(squeue -h -o %i 2>/dev/null)" ]] && break
      sleep 0.1
    done
  fi
  stop_pidfiles "$root/slurmd-n1.pid" "$root/slurmd-n2.pid" "$root/slurmctld.pid" "$root/munge/munged.pid"
  # job processes that outlived their slurmstepd (none, normally)
  local pids
  pids="$(job_pids)"
  if [[ -n "$pids" ]]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
  fi
  rm -rf "$root"
  say "down"
}

status() {
  [[ -f "$conf" ]] || { say "not up"; return 1; }
  alive "$root/slurmctld.pid" || { say "slurmctld is not running"; return 1; }
  sinfo -N
  nodes_idle
}

case "$action" in
  up) up ;;
  down) down ;;
  status) status ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) die "usage: $0 up|down|status|env" 2 ;;
esac
