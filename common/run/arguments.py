"""A trainer's command line: `--gin_config` (repeatable) and `--gin_bindings` (repeatable).

Standard library only, so that a trainer answers `--help` and a usage error from here, in its
`__main__` block, before it imports torch and the rest of its build (seconds of CPU per process).
"""

from __future__ import annotations

import argparse
from typing import Sequence

DOCS = ("Docs: docs/running.md (configuration, bindings, the environment, exit statuses), docs/launching.md "
        "(torchrun, the project's launcher, Slurm), and the benchmark's README.md.")


def parse_args(argv: Sequence[str] | None, *, doc: str | None, module: str | None = None) -> argparse.Namespace:
    """The parsed line; `module` (the trainer's, when run with -m) names it in the usage line."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}" if module else None, description=doc, epilog=DOCS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gin_config", action="append", required=True, help="gin file (repeatable)")
    parser.add_argument("--gin_bindings", action="append", default=[], help="extra gin binding (repeatable)")
    return parser.parse_args(argv)
