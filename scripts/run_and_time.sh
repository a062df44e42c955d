#!/usr/bin/env bash
# One timed training run, MLPerf style, for any benchmark of this repository:
#
#   scripts/run_and_time.sh <package> <mlperf benchmark name> <default gin file>
#
# The benchmark folders' run_and_time.sh call this with their own names. Environment: CONFIG
# (gin file), SEED, NPROC_PER_NODE (default: the visible GPUs, else 1), GIN_BINDINGS (extra
# bindings, one per line), plus the per-launch macros of common/config/gin_files.py (MLPERF_DATA_ROOT,
# MLPERF_OUTPUT_ROOT, RUN_NAME, CKPT_PATH). Under srun (SLURM_PROCID set) every task is one
# rank and runs the trainer directly; otherwise the project's launcher (torchrun's agent, which
# passes SIGUSR1 on to the ranks and exits with the ranks' status) starts them; one process needs
# no launcher. Either way the trainer's exit status (0 also after a preemption save, 2 config,
# 3 data, ...) comes through.
set -euo pipefail

package="${1:?usage: run_and_time.sh <package> <mlperf name> <default gin file>}"
benchmark="${2:?usage: run_and_time.sh <package> <mlperf name> <default gin file>}"
default_config="${3:?usage: run_and_time.sh <package> <mlperf name> <default gin file>}"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-$repo/.venv/bin/python}"
[[ -x "$python" ]] || python="$(command -v python3)"
config="${CONFIG:-$default_config}"
export SEED="${SEED:-1}"

bindings=()
while IFS= read -r line; do
  [[ -n "$line" ]] && bindings+=(--gin_bindings "$line")
done <<< "${GIN_BINDINGS:-}"

if [[ -n "${SLURM_PROCID:-}" ]]; then
  nproc=1  # srun started this task as one rank
else
  gpus="$("$python" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
  nproc="${NPROC_PER_NODE:-$(( gpus > 0 ? gpus : 1 ))}"
fi
if [[ "$nproc" -gt 1 ]]; then
  launch=("$python" -m common.distributed.launch --standalone "--nproc_per_node=$nproc" -m "$package.train")
else
  launch=("$python" -m "$package.train")
fi

start=$(date +%s)
start_fmt=$(date +%Y-%m-%d\ %r)
echo "STARTING TIMING RUN AT $start_fmt"

# The trainer runs as this script's child, and the preemption signals are passed on to it: as a
# container's first process (docker stop, podman stop: SIGTERM to PID 1 only) this script is the
# only process that receives them, and PID 1 ignores a signal it has no handler for. Ctrl-C (SIGINT)
# becomes a preemption too: the trainer saves at its next step and exits 0. A signal sent to the
# whole process group (timeout, scancel, Slurm) reaches the trainer twice; the second is a no-op.
set +e
"${launch[@]}" --gin_config "$config" "${bindings[@]}" &
child=$!
forwarded=0
forward() { forwarded=1; kill -s "$1" "$child" 2>/dev/null || true; }
trap 'forward TERM' TERM
trap 'forward USR1' USR1
trap 'forward TERM' INT
while :; do
  forwarded=0
  wait "$child"
  ret_code=$?
  [[ $forwarded -eq 1 ]] || break  # a passed-on signal interrupts the wait; the trainer still runs
done
trap - TERM USR1 INT
set -e

end=$(date +%s)
end_fmt=$(date +%Y-%m-%d\ %r)
echo "ENDING TIMING RUN AT $end_fmt"
if [[ $ret_code -ne 0 ]]; then
  echo "training exited with status $ret_code" >&2
  exit $ret_code
fi
result=$(( end - start ))
echo "RESULT,$benchmark,$SEED,$result,${USER:-$(id -un)},$start_fmt"
