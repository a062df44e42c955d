#!/usr/bin/env bash
# A one-node Slurm cluster on this machine (Debian slurm-wlm + munge), to try
# scripts/slurm/train.sbatch without a real cluster. Needs root. Afterwards:
#   export SLURM_CONF=/tmp/slurm/slurm.conf
#   sbatch --ntasks-per-node=2 scripts/slurm/train.sbatch recommendation_v4 recommendation_v4/configs/debug.gin
#   scancel --batch --signal=USR1 <job>    # a preemption notice: checkpoint, exit 0, requeue, resume
set -euo pipefail
root="${SLURM_ROOT:-/tmp/slurm}"
command -v slurmctld >/dev/null || apt-get install -y --no-install-recommends slurm-wlm munge
mkdir -p "$root"/{spool,state,log}
host="$(hostname)"
cpus="$(nproc)"
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 8 / 10 ))
cat > "$root/slurm.conf" <<CONF
ClusterName=local
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
StateSaveLocation=$root/state
SlurmdSpoolDir=$root/spool
SlurmctldLogFile=$root/log/ctld.log
SlurmdLogFile=$root/log/d.log
SlurmctldPidFile=$root/ctld.pid
SlurmdPidFile=$root/d.pid
ReturnToService=2
KillWait=30
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem_mb} State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
[[ -f /etc/munge/munge.key ]] || mungekey -c
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge && chown munge:munge /run/munge
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged
pgrep -x slurmctld >/dev/null || slurmctld -f "$root/slurm.conf"
pgrep -x slurmd >/dev/null || slurmd -f "$root/slurm.conf"
sleep 2
SLURM_CONF="$root/slurm.conf" sinfo
