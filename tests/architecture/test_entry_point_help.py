"""Every `python -m` entry point of the project answers `--help`: status 0, a usage line, one example that runs
it with options it has, and the docs page to read next (a path that exists). The entry points are found, not
listed: each module with a `__main__` block or a `__main__.py` under the five packages, so a new one cannot be
left out."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "storage", "flux", "recommendation_v4", "retinanet")
DOC_PATH = re.compile(r"((?:docs|[\w.-]+)/[\w./-]*?[\w-]+\.md)\b")
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


def _ask(requests: list[str]) -> dict[str, dict]:
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("entry_point_help.py")), *requests],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {answer["module"]: answer for answer in map(json.loads, proc.stdout.splitlines())}


def _example_runs(module: str, text: str) -> list[tuple[str, list[str]]]:
    """Each example line's subcommand ("" for none) and options, for the examples that run `module` itself
    (one that launches another module passes the rest of its line to that one)."""
    example = text.split("\nExample:\n", 1)[1].split("\nDocs:", 1)[0] if "\nExample:\n" in text else ""
    runs = []
    for line in example.splitlines():
        words = line.split("#", 1)[0].replace("\\", " ").split()
        if f"-m {module}" not in " ".join(words) or words.count("-m") > 1:
            continue
        after = words[words.index(module) + 1:]
        subcommand = after[0] if after and not after[0].startswith("-") and after[0].isidentifier() else ""
        runs.append((subcommand, [w.split("=")[0] for w in after if FLAG.fullmatch(w.split("=")[0])]))
    return runs


def entry_points() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name == "__main__.py":
                found.append(".".join(path.parent.relative_to(REPO).parts))
            elif re.search(r'^if __name__ == "__main__":', path.read_text(), re.MULTILINE):
                found.append(".".join(path.with_suffix("").relative_to(REPO).parts))
    return sorted(set(found))


def test_every_entry_point_answers_help_with_a_usage_line_an_example_and_its_docs():
    modules = entry_points()
    assert len(modules) >= 40, modules  # the walk itself works: 45 when this test was written
    answers = _ask(modules)
    assert sorted(answers) == modules
    runs = {module: _example_runs(module, answer["output"]) for module, answer in answers.items()}
    subcommands = _ask(sorted({f"{m}:{sub}" for m, found in runs.items() for sub, _ in found if sub}))
    wrong = []
    for module, answer in answers.items():
        text = answer["output"]
        problems = []
        if answer["status"] != 0:
            problems.append(f"exit status {answer['status']}")
        if not re.search(r"^usage: ", text, re.MULTILINE | re.IGNORECASE):
            problems.append("no usage line")
        script = module.replace(".", "/") + ".py"  # the one entry point another python runs as a file
        examples = [line for line in text.splitlines()
                    if (f"-m {module}" in line or script in line) and not line.lower().startswith("usage:")]
        if not examples:
            problems.append(f"no example line running `-m {module}`")
        docs = DOC_PATH.findall(text)
        if not docs:
            problems.append("no docs page named")
        missing = [doc for doc in docs if not (REPO / doc).is_file()]
        if missing:
            problems.append(f"names docs that do not exist: {missing}")
        for subcommand, flags in runs[module]:  # the example's options are ones the command has
            options = subcommands[f"{module}:{subcommand}"]["output"] if subcommand else text.split("\nExample:\n")[0]
            unknown = sorted(set(flags) - set(FLAG.findall(options)))
            if unknown:
                problems.append(f"its example gives {subcommand + ' ' if subcommand else ''}options it does "
                                f"not have: {unknown}")
        if problems:
            wrong.append(f"{module}: {'; '.join(problems)}\n    {text[:300]!r}")
    assert not wrong, f"{len(wrong)} of {len(modules)} entry points:\n" + "\n".join(wrong)
