"""What every trainer's `python -m <benchmark>.train` shares: arguments, gin, the process
group, clear exit codes (2: a config error, 3: a bad data file), and the end-of-run summary."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from common.config import ConfigError, load_gin
from common.distributed import DistInfo, barrier, destroy, init_distributed

EXIT_CONFIG_ERROR = 2
EXIT_DATA_ERROR = 3


def parse_trainer_args(argv: Sequence[str] | None, *, doc: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gin_config", action="append", required=True, help="gin file (repeatable)")
    parser.add_argument("--gin_bindings", action="append", default=[], help="extra gin binding (repeatable)")
    return parser.parse_args(argv)


def trainer_main(
    argv: Sequence[str] | None,
    *,
    doc: str | None,
    read_configs: Callable[[], Any],
    device_of: Callable[[Any], str],
    run: Callable[[Any, DistInfo, str], Any],
    data_errors: tuple[type[BaseException], ...] = (),
) -> int:
    """Parses gin, builds the configs (`read_configs()`), starts the process group on the
    configured device and calls `run(configs, info, config_file_name)`."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_trainer_args(argv, doc=doc)
    try:
        load_gin(args.gin_config, args.gin_bindings)
        configs = read_configs()
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    info = init_distributed(device=device_of(configs))
    try:
        run(configs, info, Path(args.gin_config[-1]).name)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except data_errors as err:
        # a loader worker's error arrives wrapped in its traceback text; its last line names the file
        lines = str(err).strip().splitlines()
        print(f"data error: {lines[-1] if lines else type(err).__name__}", file=sys.stderr)
        return EXIT_DATA_ERROR
    finally:
        destroy()
    return 0


def finish_run(*, info: DistInfo, run_dir: Path, summary: dict, preempted: bool, step: int, done_line: str | None) -> dict:
    """Writes `summary.json` and the closing line on rank 0; every rank returns together."""
    if info.is_main:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if preempted:
            print(f"[done] preempted at step {step}; resume by relaunching the same command", flush=True)
        elif done_line is not None:
            print(done_line, flush=True)
    barrier()
    return summary
