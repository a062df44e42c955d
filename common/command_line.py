"""The `--help` every `python -m` entry point gives: its usage as `python -m MODULE`, what it does, one example
that runs it and the docs page to read next (tests/architecture/test_entry_point_help.py walks them all).

Standard library only: an entry point builds its parser from here before it imports torch, where it can.
"""

from __future__ import annotations

import argparse
import textwrap


def example_in(doc: str | None) -> str:
    """The indented lines under a docstring's `Example:` line. common/ and storage/ name no benchmark in their
    code (tests/architecture/test_layering.py) but may in a docstring, so their examples, which run one, live
    there."""
    lines = (doc or "").splitlines()
    try:
        start = next(n for n, line in enumerate(lines) if line.strip() == "Example:") + 1
    except StopIteration:
        raise ValueError("the docstring has no 'Example:' section") from None
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith((" ", "\t")):
            break
        block.append(line)
    example = textwrap.dedent("\n".join(block)).strip()
    if not example:
        raise ValueError("the docstring's 'Example:' section is empty")
    return example


def help_epilog(example: str, docs: str, before: str = "") -> str:
    """The text under the options: `before` (a table, a note), the example indented, then the docs line."""
    parts = [before.rstrip()] if before else []
    parts.append("Example:\n" + textwrap.indent(textwrap.dedent(example).strip(), "  "))
    parts.append(f"Docs: {docs}")
    return "\n\n".join(parts)


def parser(module: str, description: str | None, *, example: str, docs: str, epilog: str = "",
           parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> argparse.ArgumentParser:
    """An entry point's parser: `module` is what follows `python -m`, with a subcommand if it is one
    (`storage.dlio replay`); `description` is printed as written (a docstring keeps its lines), up to an
    `Example:` section, which the epilog prints."""
    if description and "\nExample:\n" in description:
        description = description[:description.index("\nExample:\n")].rstrip()
    if description and "\n" not in description:  # one long line: wrapped as argparse would
        description = textwrap.fill(description, width=100)
    return parser_class(prog=f"python -m {module}", description=description,
                        epilog=help_epilog(example, docs, epilog),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
