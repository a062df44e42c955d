"""torchrun, owned: `python -m common.distributed.launch <torchrun arguments> -m <package>.train ...`.

- Takes torchrun's arguments and runs its agent in this process (`torch.distributed.run`).
- SIGUSR1 (Slurm's `--signal=B:USR1@...`, `kill -USR1`) is passed to every local rank, which saves at
  its next step and exits 0; torchrun itself would die of it and leave the ranks running on.
- SIGTERM (`timeout`, `scancel`) is torchrun's: its agent passes it to the ranks, which save and exit.
- The exit status is the ranks': 0 when every local rank finished or saved at a preemption, else
  the code of the first rank that failed (2 config, 3 data, 4 loss, 5 checkpoint write, 1 anything
  else), with one `[launch]` line and none of the agent's tracebacks. The ranks report their exit
  status through files in a directory of this launch's own (`RANK_STATUS_DIR_ENV`).

Example:
    python -m common.distributed.launch --standalone --nproc_per_node=2 -m recommendation_v4.train \\
        --gin_config recommendation_v4/configs/debug.gin
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Sequence

from common.command_line import example_in, help_epilog

RANK_STATUS_DIR_ENV = "MLPERF_RANK_STATUS_DIR"
_MEANING = {0: "finished", 1: "failed (its traceback is above)", 2: "config error", 3: "data error",
            4: "non-finite loss", 5: "checkpoint write error"}


def write_rank_status(code: int) -> None:
    """Called by a rank as it exits: its status, for the launcher that started it (if any)."""
    directory = os.environ.get(RANK_STATUS_DIR_ENV)
    if directory:
        local_rank = os.environ.get("LOCAL_RANK", "0")
        try:
            Path(directory, f"local_rank{local_rank}").write_text(str(code))
        except OSError:
            pass  # the launcher then counts this rank as failed


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path("/proc", entry, "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:  # the parent pid follows the command name
                found.append(int(entry))
    return found


def _forward_to_ranks(signum: int, frame: FrameType | None) -> None:
    for pid in _children(os.getpid()):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _statuses(directory: Path, ranks: int) -> dict[int, int | None]:
    """Each local rank's exit status, None for a rank that wrote none (killed before it could)."""
    out: dict[int, int | None] = {}
    for rank in range(ranks):
        try:
            out[rank] = int((directory / f"local_rank{rank}").read_text())
        except (OSError, ValueError):
            out[rank] = None
    return out


def _report(code: int, why: str) -> int:
    print(f"[launch] {why}", file=sys.stderr if code else sys.stdout, flush=True)
    return code


def _first_cause(error: Exception, statuses: dict[int, int | None]) -> int:
    """The failure that stopped the launch, not the ranks the agent then SIGTERMed: a status a rank
    reported itself first, then an exit code, a death by signal last (lowest local rank first)."""
    reported = sorted((rank, code) for rank, code in statuses.items() if code)
    exited = sorted((f.local_rank, f.exitcode) for f in error.failures.values() if f.exitcode > 0)
    killed = sorted((f.local_rank, f.exitcode) for f in error.failures.values() if f.exitcode < 0)
    if reported or exited:
        rank, code = (reported or exited)[0]
        return _report(code, f"local rank {rank} exited {code} ({_MEANING.get(code, 'failed')})")
    if killed:
        rank, code = killed[0]
        return _report(128 - code, f"local rank {rank} was killed by {signal.Signals(-code).name}")
    return _report(1, f"torchrun failed with {error}")


_LOG_OPTIONS = {"--log-dir", "--log_dir", "--logs-specs", "--logs_specs"}  # the user's choice of where logs go


def _help() -> str:
    what = __doc__[:__doc__.index("\nExample:\n")].strip()
    return (f"usage: python -m common.distributed.launch [torchrun's options] -m <package>.train [its arguments]\n\n"
            f"{what}\n\ntorchrun's options: python -m torch.distributed.run --help\n\n"
            + help_epilog(example_in(__doc__),
                          "docs/launching.md (this launcher, torchrun, Slurm), docs/running.md (exit statuses)"))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):  # answered before torch loads; torchrun's own options are one command away
        print(_help())
        return 0
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    ranks = torchrun.determine_local_world_size(torchrun.parse_args(argv).nproc_per_node)
    status_dir = Path(tempfile.mkdtemp(prefix="mlperf-launch-"))
    os.environ[RANK_STATUS_DIR_ENV] = str(status_dir)
    if not any(arg.split("=", 1)[0] in _LOG_OPTIONS for arg in argv):
        # torchrun's agent otherwise makes a /tmp/torchelastic_* folder per launch and leaves it
        argv = ["--log-dir", str(status_dir / "torchelastic"), *argv]
    signal.signal(signal.SIGUSR1, _forward_to_ranks)
    try:
        torchrun.main(argv)
        return _report(0, f"{ranks} local rank(s) exited 0")
    except SignalException as error:  # torchrun's agent passed the signal on and waited for the ranks
        name, statuses = signal.Signals(error.sigval).name, _statuses(status_dir, ranks)
        if all(code == 0 for code in statuses.values()):
            return _report(0, f"{name}: every local rank saved and exited 0")
        return _report(128 + int(error.sigval), f"{name}: local ranks ended with {statuses} (None: killed first)")
    except ChildFailedError as error:
        return _first_cause(error, _statuses(status_dir, ranks))
    finally:
        shutil.rmtree(status_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
