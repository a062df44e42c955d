"""scripts/slurm/train.sbatch and cluster_env.sh without a cluster (seconds, no root): stand-ins for
srun, scontrol and scancel on PATH record what the batch script asks of Slurm, and a stand-in
trainer records the command line and environment each task gets.

- srun mode, torchrun mode (one agent per node, c10d rendezvous at the first node's NodeAddr)
  and a pyxis container (image, mounts, the image's interpreter and repository);
- the cluster profiles (b200, mi350x, cpu) and that the submitter's environment wins, an empty
  value unsets, PG_TIMEOUT_S becomes the process-group timeout binding before the user's own;
- the preemption notice: passed to the tasks (which start with SIGUSR1 ignored until the trainer
  installs its handler), then `scontrol requeue` once they exit 0; SIGTERM (a time limit): the
  script waits for the tasks and does not requeue.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import types

import pytest

from tests.slurm.cluster import SCRUBBED, TRAIN_SBATCH
from tests.trainers.trainer_process import REPO

pytestmark = pytest.mark.slurm

SCONTROL = r"""#!/usr/bin/env bash
case "$1 $2" in
  "show hostnames") printf 'gpu-a017\ngpu-a018\n' ;;
  "show node") echo "NodeName=$3 Arch=x86_64 CoresPerSocket=56"; echo "   NodeAddr=10.1.0.17 NodeHostName=$3 Version=22.05.8" ;;
  requeue*) [[ -z "${FAKE_REQUEUE_FAILS:-}" ]] || exit 1; echo "$2" >> "$FAKE_LOG/requeued" ;;
  *) exit 1 ;;
esac
"""
SCANCEL = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG/scancel"
if [[ "$*" == "--signal=USR1 "* ]]; then
  for f in "$FAKE_LOG"/trainer.*.pid; do [[ -f "$f" ]] && kill -USR1 "$(cat "$f")"; done
fi
exit 0
"""
# srun: records its arguments, then runs the task command (from the first non-option) as node 0
SRUN = r"""#!/usr/bin/env bash
"$FAKE_PY" -c 'import json, os, sys; json.dump(sys.argv[1:], open(os.environ["FAKE_LOG"] + "/srun.json", "w"))' "$@"
while [[ $# -gt 0 && "$1" == -* ]]; do shift; done
export SLURM_NODEID=0 SLURM_NNODES=2 SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0
exec "$@"
"""
# the trainer: records argv, environment and SIGUSR1's disposition at start; FAKE_TRAIN=wait waits
# for SIGUSR1 or SIGTERM (then "saves" and exits 0), otherwise exits FAKE_EXIT at once
TRAINER = r"""
import json, os, signal, sys, time
log = os.environ["FAKE_LOG"]
record = {"argv": sys.argv[1:], "env": dict(os.environ), "usr1_ignored": signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN}
json.dump(record, open(f"{log}/trainer.json", "w"))
if os.environ.get("FAKE_TRAIN") == "wait":
    got = []
    for signum in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(signum, lambda s, f: got.append(s))
    open(f"{log}/trainer.{os.getpid()}.pid", "w").write(str(os.getpid()))
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"trainer: signal {got[0] if got else None}, saved, exit 0", flush=True)
    sys.exit(0 if got else 1)
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@pytest.fixture
def fake(tmp_path):
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    log.mkdir()
    for name, text in (("scontrol", SCONTROL), ("scancel", SCANCEL), ("srun", SRUN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    trainer = bin_dir / "python"
    trainer.write_text(f"#!{sys.executable}\n{TRAINER}")
    trainer.chmod(0o755)

    def env(**extra: str) -> dict:
        base = {k: v for k, v in os.environ.items()
                if k not in SCRUBBED and not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "NCCL_", "TORCH_NCCL_", "HSA_"))
                and k not in ("OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME")}
        base.update({
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(log), "FAKE_PY": sys.executable,
            "PYTHON": str(trainer), "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "mlperf-train",
            "SLURM_JOB_NODELIST": "gpu-a[017-018]", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "8",
            "SLURM_CPUS_ON_NODE": "112", "SLURM_SUBMIT_DIR": str(REPO), "CLUSTER_PROFILE": "cpu",
        })
        base.update(extra)
        return base

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(TRAIN_SBATCH), *args], env=env(**extra), capture_output=True, text=True,
                               timeout=60, cwd=tmp_path)

    def read(name: str):
        path = log / name
        return json.loads(path.read_text()) if name.endswith(".json") else path.read_text().splitlines()

    return types.SimpleNamespace(env=env, run=run, read=read, log=log)


GIN = "flux/configs/debug.gin"


def test_srun_mode_runs_one_rank_per_task_with_the_rendezvous_exported(fake):
    proc = fake.run("flux", GIN, "common.RunConfig.max_steps = 4")
    assert proc.returncode == 0, proc.stderr
    srun = fake.read("srun.json")
    assert srun[0] == "--kill-on-bad-exit=1" and srun[1:4] == ["bash", "-c", srun[3]]
    trainer = fake.read("trainer.json")
    assert trainer["argv"] == ["-m", "flux.train", "--gin_config", GIN, "--gin_bindings", "common.RunConfig.max_steps = 4"]
    assert trainer["usr1_ignored"]  # until the trainer installs its own handler
    env = trainer["env"]
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.1.0.17", str(20000 + 4242))  # the first node's NodeAddr
    assert env["RUN_NAME"] == "mlperf-train-4242" and env["OMP_NUM_THREADS"] == "1"
    assert f"train.sbatch: job 4242 (restart 0) on gpu-a[017-018]: flux {GIN}, mode srun, profile cpu" in proc.stdout


def test_torchrun_mode_runs_one_agent_per_node_with_c10d_rendezvous(fake):
    proc = fake.run("retinanet", "retinanet/configs/debug.gin", LAUNCH_MODE="torchrun")
    assert proc.returncode == 0, proc.stderr
    srun = fake.read("srun.json")
    assert srun[:5] == ["--kill-on-bad-exit=1", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=112"]
    trainer = fake.read("trainer.json")
    assert trainer["argv"] == [
        "-m", "common.distributed.launch", "--nnodes=2", "--nproc_per_node=8", "--rdzv_backend=c10d",
        f"--rdzv_endpoint=10.1.0.17:{20000 + 4242}", "--rdzv_id=4242", "--rdzv_conf=is_host=1",
        "-m", "retinanet.train", "--gin_config", "retinanet/configs/debug.gin"]
    assert trainer["usr1_ignored"]  # ignored until the launcher installs its handler, which passes it on


def test_container_mode_uses_the_image_interpreter_and_repository(fake):
    env = fake.env(CONTAINER_IMAGE="/lustre/images/mlperf-trainers-cuda.sqsh",
                   CONTAINER_MOUNTS="/lustre/data:/data,/lustre/results:/results", TRAIN_SBATCH_DRY_RUN="1")
    env.pop("PYTHON")
    proc = subprocess.run(["bash", str(TRAIN_SBATCH), "recommendation_v4", "recommendation_v4/configs/yambda_5b.gin"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("srun "))
    for part in ("--container-image=/lustre/images/mlperf-trainers-cuda.sqsh",
                 "--container-workdir=/workspace/mlperf-trainers",
                 "--container-mounts=/lustre/data:/data\\,/lustre/results:/results",
                 "/opt/mlperf-venv/bin/python -m recommendation_v4.train --gin_config recommendation_v4/configs/yambda_5b.gin"):
        assert part in line, (part, line)
    assert not fake.log.joinpath("srun.json").exists()  # a dry run starts nothing


@pytest.mark.parametrize("profile", ["b200", "mi350x", "cpu"])
def test_cluster_profiles_and_the_submitters_environment_wins(fake, profile):
    proc = fake.run("flux", GIN, "common.RunConfig.process_group_timeout_s = 600", CLUSTER_PROFILE=profile,
                    PG_TIMEOUT_S="3600", NCCL_IB_HCA="mlx5_0,mlx5_3", NCCL_IB_TIMEOUT="20", NCCL_DEBUG="")
    assert proc.returncode == 0, proc.stderr
    trainer = fake.read("trainer.json")
    env = trainer["env"]
    # the environment's timeout first, so the command line's binding wins
    assert trainer["argv"][-4:] == ["--gin_bindings", "common.RunConfig.process_group_timeout_s = 3600",
                                    "--gin_bindings", "common.RunConfig.process_group_timeout_s = 600"]
    assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_3" and env["NCCL_IB_TIMEOUT"] == "20"  # set by the submitter: kept
    assert "NCCL_DEBUG" not in env  # empty: unset, the library's default
    managed = {k: v for k, v in env.items() if k.startswith(("NCCL_", "TORCH_NCCL_", "HSA_"))}
    expected = {
        "b200": {"NCCL_IB_HCA": "mlx5_0,mlx5_3", "NCCL_IB_TIMEOUT": "20", "NCCL_IB_RETRY_CNT": "7",
                 "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                 "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"},
        "mi350x": {"NCCL_IB_HCA": "mlx5_0,mlx5_3", "NCCL_IB_TIMEOUT": "20", "NCCL_IB_RETRY_CNT": "7",
                   "NCCL_NET_GDR_LEVEL": "5", "NCCL_DMABUF_ENABLE": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
                   "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
                   "HSA_FORCE_FINE_GRAIN_PCIE": "1", "HSA_NO_SCRATCH_RECLAIM": "1"},
        # the cpu profile manages none of them: what the submitter set passes through untouched
        "cpu": {"NCCL_IB_HCA": "mlx5_0,mlx5_3", "NCCL_IB_TIMEOUT": "20"},
    }[profile]
    assert managed == expected
    assert f"profile {profile}" in proc.stdout


def test_an_unknown_profile_or_mode_or_repository_stops_with_status_2(fake, tmp_path):
    assert fake.run("flux", GIN, CLUSTER_PROFILE="h100x").returncode == 2
    assert fake.run("flux", GIN, LAUNCH_MODE="mpirun").returncode == 2
    proc = fake.run("flux", GIN, SLURM_SUBMIT_DIR=str(tmp_path))
    assert proc.returncode == 2 and "not this repository's root" in proc.stderr


def _start_waiting_job(fake, **env: str) -> tuple[subprocess.Popen, pathlib.Path]:
    out = fake.log / "job.out"
    proc = subprocess.Popen(["bash", str(TRAIN_SBATCH), "flux", GIN], env=fake.env(FAKE_TRAIN="wait", **env),
                            stdout=open(out, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not list(fake.log.glob("trainer.*.pid")):
        assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
        time.sleep(0.05)
    return proc, out


def test_a_preemption_notice_reaches_the_tasks_and_requeues_after_they_exit_0(fake):
    proc, out = _start_waiting_job(fake)
    proc.send_signal(signal.SIGUSR1)  # Slurm's --signal=B:USR1@300, to the batch shell only
    assert proc.wait(timeout=30) == 0, out.read_text()
    assert fake.read("scancel")[0] == "--signal=USR1 4242"  # every step's tasks, not the batch shell
    assert fake.read("requeued") == ["4242"]
    text = out.read_text()
    assert "preemption notice (SIGUSR1): passed to every task" in text
    assert f"trainer: signal {int(signal.SIGUSR1)}, saved, exit 0" in text
    assert "requeueing job 4242" in text
    # it ends there: the attempt is over, and no line may suggest the job finished
    assert text.rstrip().endswith("requeued: the next attempt resumes from the checkpoint")
    assert "tasks exited with status" not in text


def test_a_requeue_that_slurm_refuses_is_a_failure_that_says_what_to_do(fake):
    proc, out = _start_waiting_job(fake, FAKE_REQUEUE_FAILS="1")
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=30) == 1, out.read_text()
    assert "scontrol requeue failed: the checkpoint is saved; resubmit this job to go on" in out.read_text()


def test_sigterm_waits_for_the_tasks_and_does_not_requeue(fake):
    proc, out = _start_waiting_job(fake)
    proc.send_signal(signal.SIGTERM)  # the time limit or scancel: Slurm signals the tasks too
    pid = int(next(fake.log.glob("trainer.*.pid")).read_text())
    time.sleep(0.5)
    assert proc.poll() is None  # the script waits for its tasks
    os.kill(pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, out.read_text()
    assert not (fake.log / "requeued").exists()
    assert "SIGTERM: waiting for the tasks to save and exit" in out.read_text()
