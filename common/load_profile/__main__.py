"""python -m common.load_profile {export,replay} RUN_DIR

export   writes RUN_DIR/dlio/: MLPerf Storage workload + datagen YAMLs and a DLIO 2.0.0 workload
replay   runs DLIO 2.0.0 (in its own environment, .venv-dlio, built on first use) on the exported
         workload and prints measured vs replayed samples/s, MB/s and AU
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "export":
        from common.load_profile.export import ExportError, export

        if len(rest) != 1:
            print("usage: python -m common.load_profile export RUN_DIR", file=sys.stderr)
            return 2
        try:
            written = export(rest[0])
        except ExportError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        for path in written:
            print(f"[export] {path}")
        return 0
    if command == "replay":
        from common.load_profile.replay_cli import main as replay_main

        return replay_main(rest)
    print(f"error: unknown command {command!r} (export or replay)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
