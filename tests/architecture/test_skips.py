"""Every skip in the suite goes through tests/environment.py, so that CI (CI=true) fails a test
whose needs are missing instead of passing without it; only a test that needs an accelerator (or
the other kernel mode) may skip there.

Read from the source with `ast`: a call or decorator of pytest.skip, pytest.importorskip,
pytest.mark.skip/skipif or pytest.xfail anywhere under tests/ except tests/environment.py is a
bypass."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.trainers.trainer_process import REPO

BYPASSES = {"skip", "importorskip", "skipif", "xfail"}
HELPERS = {"unavailable", "accelerator_only", "accelerator_skipif"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def skips_in(path: Path) -> tuple[list[str], list[str]]:
    """(bypasses, uses of the helpers) in one file, as `file:line: name`."""
    bypasses, helpers = [], []
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("pytest", "unittest"):
            bypasses += [f"{path}:{node.lineno}: from {node.module} import {a.name}" for a in node.names
                         if a.name in BYPASSES or a.name.startswith("skip")]
        if not isinstance(node, (ast.Call, ast.Attribute)):
            continue
        name = _dotted(node.func if isinstance(node, ast.Call) else node)
        last = name.rsplit(".", 1)[-1]
        if name.startswith(("pytest.", "unittest.")) and (last in BYPASSES or last.startswith("skip")):
            bypasses.append(f"{path}:{node.lineno}: {name}")
        elif isinstance(node, ast.Call) and last in HELPERS:
            helpers.append(f"{path}:{node.lineno}: {last}")
    return sorted(set(bypasses)), helpers


def _all(root: Path) -> tuple[list[str], list[str]]:
    bypasses, helpers = [], []
    for path in sorted((root / "tests").rglob("*.py")):
        if path == root / "tests" / "environment.py":
            continue
        found = skips_in(path)
        bypasses += found[0]
        helpers += found[1]
    return bypasses, helpers


def test_no_test_skips_around_the_environment_helpers():
    bypasses, helpers = _all(REPO)
    assert bypasses == []
    assert len(helpers) >= 20  # the environment-dependent tests, all through the helpers


def test_the_check_sees_a_bypass_in_each_form(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\nfrom pytest import skip\nfrom tests.environment import unavailable\n"
        "pytestmark = pytest.mark.skipif(True, reason='x')\n"
        "def test_a():\n    pytest.skip('no')\n"
        "def test_b():\n    mod = pytest.importorskip('x')\n"
        "@pytest.mark.skip\ndef test_c():\n    pass\n"
        "def test_d():\n    unavailable('fine')\n")
    bypasses, helpers = _all(tmp_path)
    assert [b.split(": ", 1)[1] for b in bypasses] == [
        "from pytest import skip", "pytest.mark.skipif", "pytest.skip", "pytest.importorskip", "pytest.mark.skip"]
    assert [h.split(": ", 1)[1] for h in helpers] == ["unavailable"]
