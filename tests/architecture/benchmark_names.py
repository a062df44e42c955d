"""Where a benchmark is named in code: identifiers and string literals, read with `tokenize`.

A name counts where it stands as a whole word of a token, with `_`, `-`, `.` and `/` as word
breaks and case ignored: `DLRM_ROWS_PER_FILE` names `dlrm`, `"retinanet_b200.yaml"` names
`retinanet`, `influx` names nothing. Comments and docstrings are prose, not code, and may name a
benchmark as an example; every other string literal is code.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

_WORD_BREAK = re.compile(r"[^a-z0-9]+")


def words(text: str) -> str:
    """`text` lowered, its words separated by single spaces and padded with one on each side."""
    return f" {_WORD_BREAK.sub(' ', text.lower()).strip()} "


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def names_in_code(path: Path, names: set[str]) -> list[str]:
    """`file:line: name (token)` for each identifier or non-docstring string naming one of `names`."""
    source = path.read_text()
    docstrings = _docstring_lines(ast.parse(source, filename=str(path)))
    wanted = {name: words(name) for name in names}
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.NAME, tokenize.STRING) and token.type != getattr(tokenize, "FSTRING_MIDDLE", -1):
            continue
        if token.type != tokenize.NAME and token.start[0] in docstrings:
            continue
        text = words(token.string)
        for name, pattern in sorted(wanted.items()):
            if pattern in text:
                found.append(f"{path}:{token.start[0]}: {name} ({token.string[:60]})")
    return found
