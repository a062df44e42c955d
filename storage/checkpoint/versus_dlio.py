"""Issue 33's side by side: one host's emulated checkpoint saves (python -m storage.checkpoint) and DLIO
2.0.0's checkpoint workload of the same bytes per rank (python -m storage.dlio checkpoint --run), both
on one ext4 loop device whose writes and reads a blkio cgroup limits. Root only.

    .venv/bin/python -m storage.checkpoint.versus_dlio --benchmark flux --world-size 64 --ranks 0-1 \
        --saves 2 --device-gib 40 --write-mib-s 500 --read-mib-s 1000 --out DIR [--plan DIR] [--option K=V]

Each tool runs inside the cgroup with its files on the mount; the emulated checkpoints are removed
before DLIO runs, so both find the same free space. The table is printed and DIR/side_by_side.txt.

Example:
    sudo .venv/bin/python -m storage.checkpoint.versus_dlio --benchmark retinanet --world-size 8 --ranks 0-7 \\
        --saves 2 --device-gib 8 --out /tmp/ckpt-vs-dlio
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # where both tools run from

from common import command_line
from storage.backends.throttle import ThrottledStorage

MIB = 1 << 20


def main() -> int:
    parser = command_line.parser("storage.checkpoint.versus_dlio", __doc__, example=command_line.example_in(__doc__),
                                 docs="docs/checkpoints.md")
    parser.add_argument("--benchmark", required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--ranks", required=True)
    parser.add_argument("--saves", type=int, default=2)
    parser.add_argument("--device-gib", type=int, required=True)
    parser.add_argument("--write-mib-s", type=int, default=None)
    parser.add_argument("--read-mib-s", type=int, default=None)
    parser.add_argument("--plan", type=Path, default=None)
    parser.add_argument("--option", action="append", default=[])
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    python = sys.executable
    limits = {"read_bps": args.read_mib_s * MIB if args.read_mib_s else None,
              "write_bps": args.write_mib_s * MIB if args.write_mib_s else None}
    ours = [python, "-m", "storage.checkpoint", "--benchmark", args.benchmark, "--world-size", str(args.world_size),
            "--ranks", args.ranks, "--saves", str(args.saves), "--restores", str(args.saves), "--out", str(args.out)]
    ours += ["--plan", str(args.plan)] if args.plan else []
    for option in args.option:
        ours += ["--option", option]
    with ThrottledStorage(args.work_dir, size_mb=args.device_gib * 1024, read_iops=None, **limits) as storage:
        root = storage.mount / "emulated"
        if subprocess.run(storage.wrap(ours + ["--root", str(root)]), cwd=REPO).returncode != 0:
            return 1
        shutil.rmtree(root)
        dlio = [python, "-m", "storage.dlio", "checkpoint", str(args.out), "--run", "--root", str(storage.mount / "dlio")]
        run = subprocess.run(storage.wrap(dlio), cwd=REPO, capture_output=True, text=True)
        print(run.stdout, end="")
        if run.returncode != 0:
            print(run.stderr, end="", file=sys.stderr)
            return run.returncode
        (args.out / "side_by_side.txt").write_text(
            f"{args.benchmark} ranks {args.ranks} of {args.world_size}, write {args.write_mib_s} MiB/s, read "
            f"{args.read_mib_s} MiB/s (blkio, ext4 on a loop device)\n" + run.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
