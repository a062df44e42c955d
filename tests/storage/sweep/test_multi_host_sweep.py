"""The sweep across two client hosts sharing one storage over a limited link, under Slurm and MPI.

Two emulated hosts (n1, n2: storage.backends.emulated_hosts) each mount one sshfs export whose replies
the link holds to LIMIT_MB_S (storage.backends.shared_storage); FLUX's shards are on the export, 5x
each host's client memory. Each emulated accelerator sleeps SECONDS_PER_STEP per step of BATCH
samples, so N of them ask the link for `N x link bytes per accelerator-step / SECONDS_PER_STEP` per
second and are busy `min(1, LIMIT / that)` of the time. The link bytes of a point are what its
hosts' FUSE daemons received (host_series.json: sshfs's reads, read-ahead included), over the
accelerator-steps it ran. The sweep must answer the last count whose prediction meets the bar,
stop at the first that does not, and show both hosts reading, each through its own mount.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage.backends.shared_storage import SharedStorage, unavailable_reason
from tests.environment import unavailable
from tests.slurm.cluster import CLUSTER_SCRIPT, free_port
from tests.trainers.trainer_process import REPO, trainer_env

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess, pytest.mark.over_budget(
    reason="sweeps over two emulated hosts sharing a link-limited sshfs export, under MPI and Slurm")]

BATCH, SECONDS_PER_STEP, STEPS, THRESHOLD = 16, 0.4, 16, 0.85
LIMIT_MB_S = 6.0  # 2 accelerators ask ~4.8 MB/s of it (AU 1.0), 4 ask ~9.6 (AU ~0.63): both far from the bar
CLIENT_MEMORY_GIB = 0.3
HOSTS = ("n1", "n2")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    reason = unavailable_reason()
    if reason:
        unavailable(f"no shared storage: {reason}")
    from flux.data.synthetic import main as generate

    root = tmp_path_factory.mktemp("multi_host")
    export = root / "export"
    dataset = export / "flux" / "synthetic-small-seed0"
    # 5x the client memory, fast to write: the storage content of FLUX's small shapes
    train = int(5.2 * CLIENT_MEMORY_GIB * (1 << 30) / 25_216) + 1
    assert generate(["--size", "small", "--seed", "0", "--num-train", str(train), "--content", "storage",
                     "--out", str(dataset), "--no-progress"]) == 0
    storage = SharedStorage(work=root / "storage", export=export, hosts=HOSTS, mount=root / "mnt",
                            read_mb_s=LIMIT_MB_S)
    with storage:
        yield storage


def _sweep_args(storage: SharedStorage, out: Path) -> list[str]:
    bindings = [f'flux.DataConfig.data_root = "{storage.mount}"', "flux.DataConfig.generate_if_missing = False",
                'flux.TrainConfig.flavor = "flux-small"', "flux.DataConfig.num_workers = 2",
                f"storage.Emulation.seconds_per_step = {SECONDS_PER_STEP}",
                f"storage.Emulation.batch_per_accelerator = {BATCH}", f"storage.Emulation.au_threshold = {THRESHOLD}",
                "storage.Emulation.host_series_interval_s = 1"]
    args = ["-m", "storage.sweep", "--benchmark", "flux", "--accelerator", "b200", "--gin_config",
            str(REPO / "flux" / "configs" / "debug.gin"), "--max-accelerators", "8", "--steps", str(STEPS),
            "--out", str(out), "--client-host-memory-in-gb", str(CLIENT_MEMORY_GIB)]
    for binding in bindings:
        args += ["--gin_bindings", binding]
    return args


def _link_mb_per_accelerator_step(out: Path, n: int) -> float:
    series = json.loads((out / "runs" / "flux" / f"n{n}" / "host_series.json").read_text())["hosts"]
    received = sum(h["totals"]["fuse_read_bytes"] for h in series)
    return received / 1e6 / (n * STEPS)


def _check(out: Path, log: str) -> None:
    sweep = json.loads((out / "sweep.json").read_text())
    table = (out / "sweep.md").read_text()
    points = {p["accelerators"]: p for p in sweep["points"]}
    predicted = {n: min(1.0, LIMIT_MB_S / (n * _link_mb_per_accelerator_step(out, n) / SECONDS_PER_STEP))
                 for n in points}
    expected = max((n for n in points if all(predicted[m] >= THRESHOLD for m in points if m <= n)), default=0)
    assert sweep["headline"]["accelerators"] == expected, (predicted, table, log[-3000:])
    failing = points[max(points)]
    assert max(points) == 2 * expected and not failing["passed"], table
    assert abs(failing["au_mean"] - predicted[max(points)]) <= 0.12, (predicted, table)
    # where the accelerators starve, the link is what limits them: the hosts together receive near it
    n = max(points)
    series = json.loads((out / "runs" / "flux" / f"n{n}" / "host_series.json").read_text())["hosts"]
    link = sum(h["totals"]["fuse_read_bytes"] / h["totals"]["seconds"] for h in series) / 1e6
    assert 0.7 * LIMIT_MB_S <= link <= 1.1 * LIMIT_MB_S, (link, table)
    # both hosts read, each over the link into its own mount and page cache, under its own client memory
    for count in (c for c in points if c >= 2):
        hosts = {h["host"]: h for h in points[count]["hosts"]}
        assert sorted(hosts) == list(HOSTS), hosts
        assert sum(h["accelerators"] for h in hosts.values()) == count
        for host in hosts.values():
            assert host["totals"]["fuse_read_bytes"] > 0.5e6 and host["loader_mb_s"] > 0 and host["read_iops"] > 0, host
            assert 0 < host["peak_page_cache_bytes"] <= CLIENT_MEMORY_GIB * (1 << 30), host
    report = json.loads((out / "runs" / "flux" / f"n{n}" / "emulation.json").read_text())
    assert all(h["client_memory"]["applied"] for h in report["hosts"]), report["hosts"]
    assert "**Per client host**" in table and (out / "hosts" / f"n{n}_n2.png").stat().st_size > 0


def test_the_mpi_sweep_over_two_hosts_stops_where_the_link_says(shared, tmp_path):
    out = tmp_path / "sweep"
    cmd = [sys.executable, *_sweep_args(shared, out), "--launcher", "mpi", "--hosts", *HOSTS,
           "--emulated-hosts", str(shared.work)]
    proc = subprocess.run(cmd, cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "-hosts n1:1,n2:1" in proc.stdout  # mlpstorage's spread: one rank per host at 2
    _check(out, proc.stdout)
    # on emulated hosts each point starts cold by mounting every host's export again, evicting nothing itself
    document = json.loads((out / "sweep.json").read_text())
    assert document["cold_start"] == "mount"
    for point in document["points"]:
        assert point["cold_start"]["hosts"] == list(HOSTS), point
        report = json.loads((Path(point["run_dir"]) / "emulation.json").read_text())
        assert report["cold"] is None, report["cold"]
    assert proc.stdout.count("host mount(s) of") == len(document["points"])


@pytest.fixture
def slurm_on_hosts(shared, tmp_path):
    """A local Slurm whose nodes n1 and n2 are the emulated hosts (their slurmd in the hosts' namespaces)."""
    root = Path(f"/tmp/mlperf-slurm-mh-{os.getpid()}")
    env = {**os.environ, "SLURM_LOCAL_ROOT": str(root), "SLURM_LOCAL_PORT": str(_three_free_ports()),
           "SLURM_LOCAL_HOSTS_DIR": str(shared.work), "SLURM_LOCAL_CPUS": "8"}
    try:
        proc = subprocess.run(["bash", str(CLUSTER_SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            unavailable(f"no local Slurm cluster: {proc.stderr.strip()[-300:]}", require_env="MLPERF_REQUIRE_SLURM")
        yield {"SLURM_CONF": str(root / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(CLUSTER_SCRIPT), "down"], env=env, capture_output=True, timeout=120)


def _three_free_ports() -> int:
    from tests.slurm.cluster import _ports_free

    for _ in range(100):
        port = free_port()
        if port < 65000 and _ports_free(port, 3):
            return port
    raise RuntimeError("no three consecutive free ports")


def test_the_slurm_sweep_over_two_nodes_stops_where_the_link_says(shared, slurm_on_hosts, tmp_path):
    out = tmp_path / "sweep"
    env = {**trainer_env(), **slurm_on_hosts}
    cmd = ["salloc", "--nodes=2", "--exclusive", "--partition=local", "--time=20", sys.executable,
           *_sweep_args(shared, out), "--launcher", "slurm"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "srun --nodes=2 --ntasks=2" in proc.stdout
    _check(out, proc.stdout)
