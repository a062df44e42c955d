"""How a rank's process ends (common.distributed.process_exit): its status whatever main does, and,
while a gloo group's threads still run, no interpreter finalization, with nothing written lost."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# a child that ends through exit_rank; argv: what main does, whether a gloo group is left alive, a marker folder
_CHILD = r"""
import atexit, sys, time
from pathlib import Path
from common.distributed.process_exit import exit_rank, gloo_threads_alive

what, keep_group, marks = sys.argv[1], sys.argv[2] == "group", Path(sys.argv[3])
HELD = []


class Finalized:
    def __del__(self, mark=marks / "finalized"):
        mark.write_text("the interpreter finalized")


LAST = Finalized()  # dropped only when the interpreter finalizes
atexit.register(lambda: (marks / "atexit").write_text("ran"))


def main():
    if keep_group:
        import torch.distributed as dist
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        # a gloo thread is named (pt_gloo_runloop) by itself once it first runs: on a busy machine
        # that can be after this line, and the case is a rank whose threads are up
        deadline = time.monotonic() + 60
        while not gloo_threads_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        HELD.append(dist.distributed_c10d._get_default_group())  # held past destroy, as TorchRec's fused optimizer does
        dist.destroy_process_group()
    print("threads", gloo_threads_alive(), end="")  # no newline: left in the buffer
    log = open(marks / "log.txt", "w")
    log.write("written, not closed")  # garbage when main returns: collected before the process ends
    if what == "raise":
        raise RuntimeError("boom")
    if what == "exit-message":
        sys.exit("a message")
    if what == "interrupt":
        raise KeyboardInterrupt
    return int(what)


exit_rank(main)
"""


def _end(tmp_path: Path, what: str, group: bool) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _CHILD, what, "group" if group else "none", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_a_rank_whose_gloo_threads_outlive_its_group_ends_without_finalizing_and_loses_nothing(tmp_path):
    proc = _end(tmp_path, "3", group=True)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "threads True"  # the buffered line came out
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "log.txt").read_text() == "written, not closed"
    # no finalization: no thread of the group can be made to take the GIL while the interpreter is
    # being torn down (what aborted ranks with "terminate called without an active exception")
    assert not (tmp_path / "finalized").exists()
    assert "terminate called" not in proc.stderr


def test_a_process_without_gloo_threads_exits_the_ordinary_way(tmp_path):
    proc = _end(tmp_path, "0", group=False)
    assert proc.returncode == 0 and proc.stdout == "threads False", proc.stderr
    assert (tmp_path / "finalized").read_text() == "the interpreter finalized"


@pytest.mark.parametrize("what, status, said", [("raise", 1, "RuntimeError: boom"), ("exit-message", 1, "a message"),
                                                ("interrupt", 130, "KeyboardInterrupt"), ("261", 5, "")])
def test_the_status_is_what_the_interpreter_would_have_made_of_main(tmp_path, what, status, said):
    proc = _end(tmp_path, what, group=True)
    assert proc.returncode == status, proc.stderr
    assert said in proc.stderr and (tmp_path / "atexit").exists()


def _main_blocks(tree: ast.Module) -> list[ast.If]:
    return [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]


def _ends_through_exit_rank(tree: ast.Module) -> bool:
    blocks = _main_blocks(tree)
    return any(isinstance(call, ast.Call) and ast.unparse(call.func) == "exit_rank"
               for block in blocks for call in ast.walk(block))


def test_every_script_that_joins_a_process_group_ends_through_exit_rank():
    """A trainer, a bench or a test worker that starts gloo and ends the ordinary way can abort as it exits."""
    starts = ("init_distributed(", "init_process_group(")
    scripts = []
    for path in sorted(REPO.glob("**/*.py")):
        if any(part.startswith(".") for part in path.relative_to(REPO).parts) or path.name == "process_exit.py":
            continue
        text = path.read_text()
        if not (any(s in text for s in starts) or "lifecycle import main" in text):
            continue
        tree = ast.parse(text)
        if _main_blocks(tree):
            scripts.append(path.relative_to(REPO).as_posix())
            assert _ends_through_exit_rank(tree), f"{path}: end it with common.distributed.process_exit.exit_rank(main)"
    assert {"recommendation_v4/train.py", "retinanet/train.py", "flux/train.py",
            "tests/recommendation_v4/parallel/resharding_worker.py"} <= set(scripts), scripts
