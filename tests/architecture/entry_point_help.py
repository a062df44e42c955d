"""Asks every entry point for its `--help`, each in a process of its own, and prints one JSON line per entry point.

Run by test_entry_point_help.py as `python entry_point_help.py MODULE[:SUBCOMMAND]...` (`storage.dlio:export`
asks `python -m storage.dlio export --help`). Most entry points answer before they
import torch; the others would each spend seconds of CPU importing it, so this process imports the heavy stack
once and forks a child per entry point, which runs the module as `python -m MODULE --help` would (runpy, argv,
its own stdout and stderr) and ends with the module's own exit status.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import tempfile

HEAVY = ("numpy", "torch", "torchvision", "torchrec", "gin", "PIL")


def _answer_in_child(request: str, out_fd: int) -> None:
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    module, _, subcommand = request.partition(":")
    sys.argv = [module, *subcommand.split(), "--help"]
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as ended:
        code = ended.code if isinstance(ended.code, int) else (0 if ended.code is None else 1)
        if not isinstance(ended.code, (int, type(None))):
            print(ended.code, file=sys.stderr)
    except BaseException as error:  # noqa: BLE001 - the status and the message are what is reported
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def ask(request: str) -> dict:
    with tempfile.TemporaryFile() as captured:
        pid = os.fork()
        if pid == 0:
            _answer_in_child(request, captured.fileno())
        _, status = os.waitpid(pid, 0)
        captured.seek(0)
        text = captured.read().decode(errors="replace")
    return {"module": request, "status": os.waitstatus_to_exitcode(status), "output": text}


def main(requests: list[str]) -> None:
    for name in HEAVY:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    for request in requests:
        print(json.dumps(ask(request)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
