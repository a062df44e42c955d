"""Every skip in the suite goes through tests/environment.py, so that CI (CI=true, which .ci/run sets
itself) fails a test whose needs are missing instead of passing without it; only a test that needs
an accelerator (or the other kernel mode) may skip there.

Read from the source with `ast`, every way a test can decline to run is a bypass anywhere under
tests/ except tests/environment.py:

- pytest.skip, pytest.importorskip, pytest.mark.skip/skipif, pytest.xfail, unittest's skip
  decorators and `raise unittest.SkipTest`, however pytest or unittest is imported (`import pytest
  as pt`, `from pytest import mark`, `from unittest import SkipTest`);
- `collect_ignore`, `collect_ignore_glob` and a `pytest_ignore_collect` hook, which drop whole files
  without a word (ALLOWED_IGNORES lists the reviewed ones, each with why it is not a skip);
- an early `return` in a test: one that nothing checked before it in its own block (no assert, no
  pytest.raises), the shape of `if not root: return`.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.trainers.trainer_process import REPO

BYPASSES = {"skip", "importorskip", "skipif", "xfail", "skiptest", "skipped"}
HELPERS = {"unavailable", "accelerator_only", "accelerator_skipif"}
TEST_MODULES = ("pytest", "unittest", "_pytest")
IGNORES = {"collect_ignore", "collect_ignore_glob"}
CHECKS = {"raises", "warns", "deprecated_call"}  # a `with` of these checks something, as an assert does
# reviewed: files left out of collection that still run, so nothing is skipped by it
ALLOWED_IGNORES = {
    "tests/recommendation_v4/ops/triton/conftest.py: collect_ignore_glob":
        "the Triton kernel files run in a child pytest with TRITON_INTERPRET=1 (test_interpreter_suite.py, "
        "whose counts are checked) where the interpreter is not on in this process",
}


def _is_bypass_name(dotted: str) -> bool:
    """pytest.mark.skipif, unittest.SkipTest, pytest.skip.Exception: a test module's name with a skip in it."""
    parts = dotted.split(".")
    return parts[0] in TEST_MODULES and any(p.lower() in BYPASSES or p.lower().startswith("skip") for p in parts[1:])


class _Names:
    """What a file's imports make of a name: `pt` -> pytest, `mark` -> pytest.mark, `SkipTest` -> unittest.SkipTest."""

    def __init__(self, tree: ast.AST) -> None:
        self.aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in TEST_MODULES:
                        self.aliases[alias.asname or alias.name.split(".")[0]] = (
                            alias.name if alias.asname else alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in TEST_MODULES:
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def dotted(self, node: ast.AST) -> str:
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else ""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        return ""


def _checks_something(statements: list[ast.stmt], names: _Names) -> bool:
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Assert):
                return True
            if isinstance(node, ast.withitem) and isinstance(node.context_expr, ast.Call):
                if names.dotted(node.context_expr.func).rsplit(".", 1)[-1] in CHECKS:
                    return True
    return False


def _early_returns(function: ast.FunctionDef | ast.AsyncFunctionDef, names: _Names) -> list[int]:
    """Lines of the returns in a test that nothing before them in their own block checked: a branch that
    only leaves (`if not root: return`) skips what follows, whatever was checked before the branch."""
    found = []
    blocks: list[list[ast.stmt]] = [function.body]
    while blocks:
        block = blocks.pop()
        for i, statement in enumerate(block):
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue  # a helper defined inside the test returns for itself
            if isinstance(statement, ast.Return) and not _checks_something(block[:i], names):
                found.append(statement.lineno)
            inner = [getattr(statement, field, None) for field in ("body", "orelse", "finalbody")]
            inner += [handler.body for handler in getattr(statement, "handlers", [])]
            inner += [case.body for case in getattr(statement, "cases", [])]
            blocks += [body for body in inner if isinstance(body, list) and body and isinstance(body[0], ast.stmt)]
    return found


def skips_in(path: Path, root: Path | None = None) -> tuple[list[str], list[str]]:
    """(bypasses, uses of the helpers) in one file, as `file:line: what`."""
    shown = path.relative_to(root) if root is not None else path
    bypasses, helpers = [], []
    tree = ast.parse(path.read_text(), filename=str(path))
    names = _Names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in TEST_MODULES:
            bypasses += [f"{shown}:{node.lineno}: from {node.module} import {a.name}" for a in node.names
                         if _is_bypass_name(f"{node.module}.{a.name}")]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bypasses += [f"{shown}:{node.lineno}: {t.id}" for t in targets
                         if isinstance(t, ast.Name) and t.id in IGNORES]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == "pytest_ignore_collect":
                bypasses.append(f"{shown}:{node.lineno}: pytest_ignore_collect")
            elif node.name.startswith("test"):
                bypasses += [f"{shown}:{line}: early return" for line in _early_returns(node, names)]
        elif isinstance(node, (ast.Call, ast.Attribute, ast.Name)):
            name = names.dotted(node.func if isinstance(node, ast.Call) else node)
            if _is_bypass_name(name):
                bypasses.append(f"{shown}:{node.lineno}: {name}")
            elif isinstance(node, ast.Call) and name.rsplit(".", 1)[-1] in HELPERS:
                helpers.append(f"{shown}:{node.lineno}: {name.rsplit('.', 1)[-1]}")
    return sorted(set(bypasses), key=lambda line: (int(line.split(":")[1]), line)), helpers


def _all(root: Path) -> tuple[list[str], list[str]]:
    bypasses, helpers = [], []
    for path in sorted((root / "tests").rglob("*.py")):
        if path == root / "tests" / "environment.py":
            continue
        found = skips_in(path, root)
        bypasses += [b for b in found[0] if f"{b.split(':')[0]}: {b.split(': ', 1)[1]}" not in ALLOWED_IGNORES]
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


def test_the_check_sees_aliases_skiptest_ignores_and_early_returns(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_y.py").write_text(
        "import os\nimport pytest as pt\nimport unittest\nfrom unittest import SkipTest\nfrom pytest import mark\n"
        "collect_ignore = ['test_z.py']\n"
        "collect_ignore_glob = ['test_w*.py']\n"
        "def pytest_ignore_collect(collection_path, config):\n    return True\n"
        "def test_a():\n    pt.skip('no')\n"
        "@mark.skipif(True, reason='x')\ndef test_b():\n    pass\n"
        "def test_c():\n    raise unittest.SkipTest('no')\n"
        "def test_d():\n    if os.geteuid() != 0:\n        return\n    assert False\n"
        "def test_e():\n    if True:\n        assert 1\n        return\n"  # checked in its branch: not a skip
        "def test_f():\n    with pt.raises(ValueError):\n        int('x')\n    return\n"
        "def test_g():\n    def helper():\n        return 1\n    assert helper() == 1\n"
        "def test_h():\n    for x in (1, 2):\n        if x:\n            print(x)\n            return\n")
    bypasses, _ = _all(tmp_path)
    assert [b.split(": ", 1)[1] for b in bypasses] == [
        "from unittest import SkipTest", "collect_ignore", "collect_ignore_glob", "pytest_ignore_collect",
        "pytest.skip", "pytest.mark.skipif", "unittest.SkipTest", "early return", "early return"]
    assert [int(b.split(":")[1]) for b in bypasses][-2:] == [19, 37]


def test_a_reviewed_ignore_is_the_only_one_left_out():
    for entry in ALLOWED_IGNORES:
        path, what = entry.split(": ")
        found = skips_in(REPO / path, REPO)[0]
        assert any(line.endswith(f": {what}") for line in found), entry  # still there, still reviewed
