"""`python -m storage.dlio replay RUN_DIR [--work-dir D] [--keep-data] [--reader generic|plugin|storage|object]
[--dlio 2.0.0|3.0]`
(dispatched by __main__).

Example:
    python -m storage.dlio replay runs/recommendation_v4/myrun --reader plugin
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import command_line
from storage.dlio.stopping import until_stopped


def _parser() -> argparse.ArgumentParser:
    parser = command_line.parser(
        "storage.dlio replay", "Replays RUN_DIR's exported DLIO 2.0.0 workload (the DLIO env .venv-dlio/ is built on first "
        "use) and prints measured vs replayed samples/s, MB/s and AU.",
        example=command_line.example_in(__doc__),
        docs="docs/load-profile.md")
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="a run directory with load_profile.json and dlio/")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where DLIO writes its data and output (default RUN_DIR/dlio/replay, or "
                             "RUN_DIR/dlio/replay-plugin with --reader plugin)")
    parser.add_argument("--keep-data", action="store_true", help="keep the generated data afterwards")
    parser.add_argument("--dlio", choices=("2.0.0", "3.0"), default="2.0.0",
                        help="2.0.0 (PyPI's, the default) or 3.0: mlcommons/DLIO_local_changes 3.0.x, the DLIO "
                             "mlpstorage runs, in .venv-dlio3/ (built from a local copy: DLIO3_SOURCE=<checkout or "
                             "archive> bash storage/dlio/environment/setup_env_3.sh); results in RUN_DIR/dlio/*_dlio3.json")
    parser.add_argument("--reader", choices=("generic", "plugin", "storage", "object"), default="generic",
                        help="generic: export's workload, one record per sample (default); plugin: a DLIO reader "
                             "plugin makes per sample the reads the profile recorded (counts, sizes, pattern) and "
                             "compares them (RUN_DIR/dlio/replay_plugin_result.json, work dir "
                             "RUN_DIR/dlio/replay-plugin); storage (with --dlio 3.0): the export's MLPerf Storage "
                             "workload itself (parquet read by row groups where it is parquet), at this run's data size "
                             "(RUN_DIR/dlio/replay_storage_result_dlio3.json); object (with --dlio 3.0, a run whose "
                             "data_root was s3://): the export's object-storage workload on DLIO's object mode (s3dlio), "
                             "its data generated in the run's bucket through the same endpoint (AWS_* variables) and "
                             "deleted afterwards unless --keep-data (RUN_DIR/dlio/replay_object_result_dlio3.json)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The arguments after the program name, with or without the leading `replay`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["replay"]:
        argv = argv[1:]
    args = _parser().parse_args(argv)
    # imported here: --help and bad arguments need none of the replay's imports
    from storage.dlio.replay.generic import DlioEnvError, ReplayError
    from storage.dlio.replay.choice import replay

    status = until_stopped(
        lambda: replay(args.run_dir, work_dir=args.work_dir, keep_data=args.keep_data, reader=args.reader,
                       dlio=args.dlio),
        refused=(ReplayError, DlioEnvError), label="replay", ended="DLIO was ended")
    return 0 if status is None else status
