"""How the sweep launches one point: one host (torchrun's agent), an allocation's nodes (srun), or MPI hosts.

- `standalone`: every rank on this host, as before (plain python for one rank).
- `slurm`: inside an allocation of H nodes (`salloc -N H --exclusive`, or an sbatch script):
  `srun` places the N ranks over min(H, N) of its nodes, one task per emulated accelerator, as
  scripts/slurm/train.sbatch does; the ranks read SLURM_PROCID/SLURM_NTASKS, and rank 0's node is
  the rendezvous point (its NodeAddr).
- `mpi`: mpiexec over the hosts as MLPerf Storage launches DLIO, the N ranks spread over them as
  mlpstorage spreads them (`spread`), in the flags of the mpiexec that runs it (`mpi_flavor`, from its
  --version): MPICH's Hydra (also Intel MPI's) `mpiexec -n N -hosts h1:s1,h2:s2 -genv NAME VALUE`
  (the ranks read PMI_RANK/PMI_SIZE), Open MPI's `mpiexec -n N --host h1:s1,h2:s2 -x NAME=VALUE
  --bind-to none` (OMPI_COMM_WORLD_RANK/SIZE). The launcher reaches each host with ssh, or with
  `launcher_exec` (storage/backends/emulated_host_ssh for the emulated hosts of one machine).

Every launch runs the trainer the same way; only the prefix differs.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Sequence

LAUNCHERS = ("standalone", "slurm", "mpi")


class LaunchError(RuntimeError):
    """A launcher that cannot run here, on one line naming the flag or the missing piece."""


def parse_hosts(values: Sequence[str]) -> list[tuple[str, int | None]]:
    """--hosts as mlpstorage takes them: names, space- or comma-separated, each with an optional ':slots'."""
    hosts: list[tuple[str, int | None]] = []
    for value in values:
        for item in filter(None, (part.strip() for part in value.split(","))):
            name, _, slots = item.partition(":")
            if not name:
                raise LaunchError(f"--hosts {item!r}: no host name")
            try:
                count = int(slots) if slots else None
            except ValueError:
                raise LaunchError(f"--hosts {item!r}: slots must be a whole number") from None
            if count is not None and count < 1:
                raise LaunchError(f"--hosts {item!r}: slots must be >= 1")
            hosts.append((name, count))
    names = [name for name, _ in hosts]
    if len(set(names)) != len(names):
        raise LaunchError(f"--hosts names a host twice: {' '.join(names)}")
    return hosts


def spread(n: int, hosts: Sequence[tuple[str, int | None]]) -> list[tuple[str, int]]:
    """The ranks on each host, as mlpstorage spreads N processes: the hosts' slots where given (filled in
    order), else N // H each and one more on the first N % H hosts; hosts left with none are dropped."""
    if not hosts:
        raise LaunchError("no hosts to spread the ranks over")
    if all(slots is not None for _, slots in hosts):
        total = sum(slots for _, slots in hosts)  # type: ignore[misc]
        if total < n:
            raise LaunchError(f"--hosts has {total} slots in all, too few for {n} accelerators")
        placed, left = [], n
        for name, slots in hosts:
            take = min(slots, left)  # type: ignore[type-var]
            placed.append((name, take))
            left -= take
    elif any(slots is not None for _, slots in hosts):
        raise LaunchError("--hosts: give slots for every host or for none")
    else:
        base, extra = divmod(n, len(hosts))
        placed = [(name, base + (1 if i < extra else 0)) for i, (name, _) in enumerate(hosts)]
    return [(name, count) for name, count in placed if count > 0]


def mpi_flavor(mpiexec: str) -> tuple[str, int]:
    """("openmpi" or "mpich", major version) of the mpiexec at `mpiexec`, by its --version; LaunchError
    naming it when it does not run or is neither (`mpi_flavor_of_version`)."""
    try:
        proc = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LaunchError(f"--mpiexec {mpiexec}: cannot run its --version ({error})") from None
    return mpi_flavor_of_version(proc.stdout + proc.stderr, mpiexec)


def mpi_flavor_of_version(text: str, mpiexec: str) -> tuple[str, int]:
    """What `mpiexec --version` printed, told apart: Open MPI's names itself "(Open MPI) X.Y.Z" (older ones
    "(OpenRTE)"), MPICH's Hydra prints "HYDRA build details" and its Version, Intel MPI's its library (a Hydra)."""
    found = re.search(r"\((?:Open MPI|OpenRTE)\)\s+(\d+)", text)
    if found:
        return "openmpi", int(found.group(1))
    if "HYDRA build details" in text or "Intel(R) MPI Library" in text:
        found = re.search(r"Version:\s+(\d+)", text) or re.search(r"Version (\d+)", text)
        return "mpich", int(found.group(1)) if found else 0
    first = next((line.strip() for line in text.splitlines() if line.strip()), "nothing")
    raise LaunchError(f"--mpiexec {mpiexec}: neither Open MPI's nor MPICH's (Hydra) by its --version ({first!r}); "
                      "give --mpiexec one of them")


def mpich_command(mpiexec: str, n: int, placed: Sequence[tuple[str, int]], env: dict[str, str],
                  launcher_exec: str | None) -> list[str]:
    """MPICH Hydra's launch of n ranks placed (host, ranks) on the hosts, with `env` set on every rank."""
    cmd = [mpiexec, "-n", str(n), "-hosts", ",".join(f"{h}:{k}" for h, k in placed)]
    if launcher_exec:
        cmd += ["-launcher", "ssh", "-launcher-exec", launcher_exec]
    for name, value in env.items():  # Hydra passes the environment on; named here so a host's own cannot win
        cmd += ["-genv", name, value]
    return cmd


def openmpi_command(mpiexec: str, n: int, placed: Sequence[tuple[str, int]], env: dict[str, str],
                    launcher_exec: str | None, *, major: int, as_root: bool) -> list[str]:
    """Open MPI's launch of the same: --host with slots, -x NAME=VALUE, the agent as its ssh (an MCA
    parameter: plm_rsh_agent up to 4.x, PRRTE's plm_ssh_agent from 5), and no binding: Open MPI binds
    each rank to a core by default (Hydra binds nothing), which would leave a rank's loader workers one."""
    cmd = [mpiexec, "-n", str(n), "--host", ",".join(f"{h}:{k}" for h, k in placed), "--bind-to", "none"]
    if as_root:  # Open MPI refuses root without it; the emulated hosts are root's
        cmd.append("--allow-run-as-root")
    if launcher_exec:
        cmd += ["--prtemca", "plm_ssh_agent", launcher_exec] if major >= 5 else \
               ["--mca", "plm_rsh_agent", launcher_exec]
    for name, value in env.items():
        cmd += ["-x", f"{name}={value}"]
    return cmd


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def allocation_nodes() -> list[str]:
    """The nodes of the Slurm allocation this process runs in (SLURM_JOB_NODELIST, expanded)."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise LaunchError("--launcher slurm runs inside an allocation (salloc -N H --exclusive python -m storage.sweep "
                          "..., or an sbatch script): SLURM_JOB_NODELIST is not set")
    proc = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True)
    if proc.returncode != 0:
        raise LaunchError(f"scontrol show hostnames {nodelist}: {proc.stderr.strip()}")
    return proc.stdout.split()


def node_address(node: str) -> str:
    """A Slurm node's NodeAddr (what train.sbatch makes MASTER_ADDR), the name itself when scontrol has none."""
    proc = subprocess.run(["scontrol", "show", "node", node, "-o"], capture_output=True, text=True)
    for field in proc.stdout.split():
        if field.startswith("NodeAddr="):
            return field.split("=", 1)[1]
    return node


@dataclasses.dataclass(frozen=True)
class Launcher:
    """One sweep's launcher. `hosts`: MPI's host list, or the allocation's nodes under Slurm."""

    kind: str = "standalone"
    hosts: tuple[tuple[str, int | None], ...] = ()
    mpiexec: str = "mpiexec"
    mpi: tuple[str, int] = ("mpich", 0)  # whose mpiexec it is, and its major version (mpi_flavor)
    launcher_exec: str | None = None  # what mpiexec runs instead of ssh to reach a host
    master_addr: str | None = None
    extra_env: tuple[tuple[str, str], ...] = ()

    @property
    def multi_host(self) -> bool:
        return self.kind != "standalone"

    def host_names(self) -> list[str]:
        return [name for name, _ in self.hosts]

    def placement(self, n: int) -> list[tuple[str, int]]:
        """(host, ranks) for n accelerators: one host for standalone."""
        if self.kind == "standalone":
            return [(socket.gethostname(), n)]
        if self.kind == "slurm":  # srun's block distribution over min(H, n) nodes, as mlpstorage would spread them
            return spread(n, [(name, None) for name, _ in self.hosts[:n]])
        return spread(n, self.hosts)

    def prefix(self, n: int, python: str) -> tuple[list[str], dict[str, str]]:
        """The command before `-m <train module>` and what to add to its environment."""
        env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **dict(self.extra_env)}
        if self.kind == "standalone":
            if n == 1:
                return [python], env
            return [python, "-m", "common.distributed.launch", "--standalone", f"--nproc_per_node={n}"], env
        placed = self.placement(n)
        first = placed[0][0]
        env["MASTER_ADDR"] = self.master_addr or (node_address(first) if self.kind == "slurm" else first)
        env["MASTER_PORT"] = str(free_port())
        if self.kind == "slurm":
            # one task per rank; srun ends the step when a rank fails, rather than leave the others waiting
            return ["srun", f"--nodes={len(placed)}", f"--ntasks={n}", "--distribution=block", "--kill-on-bad-exit=1",
                    "--export=ALL", python], env
        if self.mpi[0] == "openmpi":
            cmd = openmpi_command(self.mpiexec, n, placed, env, self.launcher_exec, major=self.mpi[1],
                                  as_root=os.geteuid() == 0)
        else:
            cmd = mpich_command(self.mpiexec, n, placed, env, self.launcher_exec)
        return cmd + [python], env


def make_launcher(kind: str, *, hosts: Sequence[str], mpiexec: str | None, emulated_hosts: Path | None,
                  master_addr: str | None) -> Launcher:
    """The sweep's flags as a Launcher; LaunchError naming the flag for what cannot work."""
    if kind not in LAUNCHERS:
        raise LaunchError(f"--launcher {kind!r}: one of {', '.join(LAUNCHERS)}")
    extra_env: tuple[tuple[str, str], ...] = ()
    launcher_exec = None
    if emulated_hosts is not None and kind == "standalone":
        raise LaunchError(f"--emulated-hosts {emulated_hosts}: the standalone launcher runs every rank on this host; "
                          "the emulated hosts are reached with --launcher mpi --hosts (or slurm)")
    if emulated_hosts is not None:
        from storage.backends.emulated_hosts import AGENT, ROOT_VARIABLE

        if not (emulated_hosts / "ns").is_dir():
            raise LaunchError(f"--emulated-hosts {emulated_hosts}: no emulated hosts there (no ns/ folder; "
                              "python -m storage.backends.shared_storage up makes them)")
        extra_env = ((ROOT_VARIABLE, str(emulated_hosts)),)
        launcher_exec = str(AGENT)
    if kind == "standalone":
        if hosts:
            raise LaunchError("--hosts is for --launcher mpi (under Slurm the allocation gives the nodes)")
        return Launcher()
    if kind == "slurm":
        if hosts:
            raise LaunchError("--hosts is for --launcher mpi: under Slurm the allocation's nodes are the hosts")
        if shutil.which("srun") is None:
            raise LaunchError("--launcher slurm: srun is not installed")
        nodes = allocation_nodes()
        return Launcher(kind="slurm", hosts=tuple((n, None) for n in nodes), master_addr=master_addr,
                        extra_env=extra_env)
    parsed = parse_hosts(hosts)
    if not parsed:
        raise LaunchError("--launcher mpi needs --hosts (the client hosts, as mlpstorage's --hosts)")
    binary = mpiexec or _default_mpiexec()
    return Launcher(kind="mpi", hosts=tuple(parsed), mpiexec=binary, mpi=mpi_flavor(binary),
                    launcher_exec=launcher_exec, master_addr=master_addr, extra_env=extra_env)


def _default_mpiexec() -> str:
    """mpiexec on PATH, else the DLIO env's (PyPI's mpich: the same Hydra that launches DLIO's ranks)."""
    found = shutil.which("mpiexec")
    if found:
        return found
    from storage.dlio.environment.dlio_env import DlioEnvError, ensure_dlio_env

    try:
        return str(ensure_dlio_env().parent / "mpiexec")
    except DlioEnvError as error:
        raise LaunchError(f"--launcher mpi: no mpiexec on PATH and no DLIO env to take one from ({error}); "
                          "give --mpiexec") from None
