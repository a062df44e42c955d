#!/usr/bin/env python3
"""The project's package pins, read from its own files: what the container builds install.

The Dockerfiles name packages, never their versions: every version comes from the files the
CPU venv is built from, read here at image build time, so an image cannot drift from the venv.

    pyproject.toml                 [project].dependencies and every optional-dependency group
    scripts/requirements-extra.txt installed last by scripts/setup_venv.sh
    scripts/setup_venv.sh          its "name==version" arguments (must agree with the above)

Every pin must be exact (`name==version`) and a package pinned in two files must have the same
version in both; otherwise this script stops with a message naming the package, both files and
both versions. Standard library only: it runs in the image's fresh venv before anything else.

    pins.py requirements [--local-version TAG] NAME...   name==version lines for a pip -r file
    pins.py constraints                                  every pin, for pip -c
    pins.py verify [--expect NAME==VER]... [--absent NAME]...
                                                         installed versions == pins (image build)
    pins.py dockerfile-specs DOCKERFILE                  "source<TAB>name==version" per versioned
                                                         thing that Dockerfile installs or pulls
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = "pyproject.toml"
REQUIREMENTS_EXTRA = "scripts/requirements-extra.txt"
SETUP_VENV = "scripts/setup_venv.sh"

_EXACT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([0-9][0-9A-Za-z.+!-]*)\s*$")
# a quoted "name==version" argument in setup_venv.sh
_SHELL_PIN = re.compile(r"""["']([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)["']""")


class PinError(Exception):
    """The pin files are unusable: a loose pin, or two files that disagree."""


def canonical(name: str) -> str:
    """PEP 503 normalized name: `Pyre_Extensions` and `pyre-extensions` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public_version(version: str) -> str:
    """`2.14.1+rocm7.2` -> `2.14.1`: the local label names the build, not the release."""
    return version.split("+", 1)[0]


@dataclasses.dataclass(frozen=True)
class Pin:
    name: str  # as first spelled in the files
    version: str
    source: str  # the file it was first read from


def _exact(spec: str, source: str) -> tuple[str, str]:
    match = _EXACT.match(spec)
    if not match:
        raise PinError(f"{source}: '{spec.strip()}' is not an exact pin (name==version); the images install exact pins only")
    return match.group(1), match.group(2)


def read_sources(root: Path = REPO) -> list[tuple[str, list[tuple[str, str]]]]:
    """(file, [(name, version), ...]) for each pin file, in the order the venv installs them."""
    pyproject = tomllib.loads((root / PYPROJECT).read_text())
    project = pyproject.get("project", {})
    specs = list(project.get("dependencies", []))
    for group in project.get("optional-dependencies", {}).values():
        specs.extend(group)
    sources = [(PYPROJECT, [_exact(spec, PYPROJECT) for spec in specs])]

    extra = []
    for line in (root / REQUIREMENTS_EXTRA).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            extra.append(_exact(line, REQUIREMENTS_EXTRA))
    sources.append((REQUIREMENTS_EXTRA, extra))

    setup_venv = root / SETUP_VENV
    if setup_venv.is_file():
        sources.append((SETUP_VENV, _SHELL_PIN.findall(setup_venv.read_text())))
    return sources


def load_pins(root: Path = REPO) -> dict[str, Pin]:
    """Every pinned package by canonical name; PinError when two files disagree on a version."""
    pins: dict[str, Pin] = {}
    for source, entries in read_sources(root):
        for name, version in entries:
            key = canonical(name)
            seen = pins.get(key)
            if seen is None:
                pins[key] = Pin(name, version, source)
            elif seen.version != version:
                raise PinError(
                    f"{key}: {seen.source} pins {seen.version} but {source} pins {version}; "
                    "make the project's pin files agree before building an image"
                )
    return pins


def requirement_lines(names: list[str], pins: dict[str, Pin], local_version: str | None = None) -> list[str]:
    lines = []
    for name in names:
        pin = pins.get(canonical(name))
        if pin is None:
            raise PinError(f"{name}: the Dockerfile installs it but no project pin file pins it ({', '.join(sorted(pins))})")
        suffix = f"+{local_version}" if local_version else ""
        lines.append(f"{canonical(name)}=={pin.version}{suffix}")
    return lines


def verify(pins: dict[str, Pin], expect: list[str], absent: list[str], skip: list[str]) -> tuple[list[str], int]:
    """(problems, packages checked) for the installed distributions; no problems: the venv is
    exactly the pinned stack (local labels such as +rocm7.2 aside)."""
    import importlib.metadata as metadata

    wanted = {key: pin.version for key, pin in pins.items() if key not in {canonical(n) for n in absent + skip}}
    for spec in expect:
        name, version = _exact(spec, "--expect")
        wanted[canonical(name)] = version
    problems = []
    for key, version in sorted(wanted.items()):
        try:
            installed = metadata.version(key)
        except metadata.PackageNotFoundError:
            problems.append(f"{key}: pinned {version}, not installed")
            continue
        if public_version(installed) != public_version(version):
            problems.append(f"{key}: pinned {version}, installed {installed}")
    for name in absent:
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        problems.append(f"{canonical(name)}: must not be installed in this image, found {installed}")
    return problems, len(wanted)


# --- Dockerfile reading (also used by tests/docker and docker/check_pins.sh) ----------------------


@dataclasses.dataclass(frozen=True)
class Instruction:
    keyword: str  # FROM, ARG, RUN, ...
    text: str  # the arguments, continuation lines joined
    line: int  # 1-based line of the keyword


def dockerfile_instructions(path: Path) -> tuple[list[Instruction], list[str]]:
    """The instructions (continuations joined, comments dropped) and the comment lines."""
    instructions: list[Instruction] = []
    comments: list[str] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            comments.append(stripped)
            continue
        if not pending and not stripped:
            continue
        if not pending:
            start = number
        continued = stripped.endswith("\\")
        pending.append(stripped[:-1] if continued else stripped)
        if not continued:
            joined = " ".join(part for part in pending if part)
            keyword, _, rest = joined.partition(" ")
            instructions.append(Instruction(keyword.upper(), rest.strip(), start))
            pending = []
    return instructions, comments


def arg_defaults(instructions: list[Instruction]) -> dict[str, str]:
    """ARG NAME=default values (the last default wins, as in a build without --build-arg)."""
    values: dict[str, str] = {}
    for inst in instructions:
        if inst.keyword != "ARG":
            continue
        name, sep, default = inst.text.partition("=")
        if sep:
            values[name.strip()] = default.strip().strip('"')
    return values


def substitute(text: str, values: dict[str, str]) -> str:
    """${NAME} and $NAME replaced by ARG defaults, repeatedly (a default may name another ARG)."""
    for _ in range(10):
        new = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), m.group(0)), text)
        if new == text:
            return new
        text = new
    return text


_SPEC_IN_RUN = re.compile(r"""(?<![\w.-])([A-Za-z][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)""")
_PINS_CALL = re.compile(r"pins\.py\s+requirements\s+((?:--local-version\s+\S+\s+)?)([^>&|;]*)")
_INDEX_URL = re.compile(r"--index-url[ =]\s*(\S+)")


PYPI = "https://pypi.org/simple"


@dataclasses.dataclass(frozen=True)
class InstallStep:
    """One `pip install`/`pip download` command of a Dockerfile, in build order."""

    line: int  # line of its RUN
    names: tuple[str, ...]  # canonical names it installs or downloads
    versions: tuple[tuple[str, str], ...]  # (name, version) for each of names, as the build asks for it
    index_url: str  # where pip looks (PyPI unless --index-url says otherwise)
    no_deps: bool
    command: str


def install_steps(path: Path, root: Path = REPO) -> list[InstallStep]:
    """Every command of the Dockerfile's RUNs that installs or fetches Python packages, with what it
    installs (named directly, through `pins.py requirements ... > file` before it, or through
    `-r scripts/requirements-extra.txt`), at which versions and from where."""
    instructions, _ = dockerfile_instructions(path)
    values = arg_defaults(instructions)
    pins = load_pins(root)
    extra = [canonical(name) for name, _ in dict(read_sources(root))[REQUIREMENTS_EXTRA]]
    steps = []
    for inst in instructions:
        if inst.keyword != "RUN":
            continue
        pending: list[tuple[str, str]] = []  # written to a requirements file by pins.py
        for command in re.split(r"&&|;|\|\|", substitute(inst.text, values)):
            call = _PINS_CALL.search(command)
            if call:
                local = call.group(1).split()[-1].strip("\"'") if call.group(1) else None
                pending = []
                for name in call.group(2).split():
                    key = canonical(name)
                    version = pins[key].version if key in pins else "?"
                    pending.append((key, f"{version}+{local}" if local else version))
                continue
            if not re.search(r"pip3?\"?\s+(install|download)\b", command):
                continue
            versions = [(canonical(m.group(1)), m.group(2)) for m in _SPEC_IN_RUN.finditer(command)]
            for requirement_file in re.findall(r"-r\s+(\S+)", command):
                if requirement_file.strip("\"'").endswith(REQUIREMENTS_EXTRA):
                    versions += [(name, pins[name].version) for name in extra]
                else:
                    versions += pending
                    pending = []
            if not versions:
                continue
            index = _INDEX_URL.search(command)
            steps.append(
                InstallStep(
                    line=inst.line,
                    names=tuple(dict.fromkeys(name for name, _ in versions)),
                    versions=tuple(versions),
                    index_url=index.group(1).strip("\"'").rstrip("/") if index else PYPI,
                    no_deps="--no-deps" in command,
                    command=command.strip(),
                )
            )
    return steps


def excluded_pins(path: Path) -> dict[str, str]:
    """`# pin-excluded: NAME: reason` comments: pinned packages an image deliberately leaves out."""
    _, comments = dockerfile_instructions(path)
    excluded = {}
    for comment in comments:
        match = re.match(r"#\s*pin-excluded:\s*([A-Za-z0-9._-]+)\s*:?\s*(.*)$", comment)
        if match:
            excluded[canonical(match.group(1))] = match.group(2).strip()
    return excluded


def dockerfile_specs(path: Path, root: Path = REPO) -> list[tuple[str, str]]:
    """(source, name==version) for every versioned thing the Dockerfile pulls, where it comes from:
    `pypi`, `index <url>`, `image` (FROM) or `python-download` (uv's CPython build)."""
    instructions, _ = dockerfile_instructions(path)
    values = arg_defaults(instructions)
    out: list[tuple[str, str]] = []
    stages = set()
    for inst in instructions:
        if inst.keyword == "FROM":
            image, _, alias = substitute(inst.text, values).partition(" AS ")
            image = image.split()[-1]
            if image not in stages and not image.startswith("fbgemm-"):
                out.append(("image", image))
            if alias:
                stages.add(alias.strip())
    for step in install_steps(path, root):
        source = "pypi" if step.index_url == PYPI else f"index {step.index_url}"
        out.extend((source, f"{name}=={version}") for name, version in step.versions)
    if "PYTHON_VERSION" in values:
        out.append(("python-download", f"cpython=={values['PYTHON_VERSION']}"))
    return list(dict.fromkeys(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=REPO, help="repository root (default: this file's parent's parent)")
    sub = parser.add_subparsers(dest="command", required=True)
    req = sub.add_parser("requirements", help="name==version lines for the named packages")
    req.add_argument("--local-version", help="append +TAG (e.g. rocm7.2: the ROCm builds of torch/torchvision)")
    req.add_argument("names", nargs="+")
    sub.add_parser("constraints", help="every pin, one per line")
    ver = sub.add_parser("verify", help="check the installed distributions against the pins")
    ver.add_argument("--expect", action="append", default=[], help="NAME==VERSION also required (the GPU fbgemm)")
    ver.add_argument("--absent", action="append", default=[], help="pinned for the CPU venv, must not be installed here")
    ver.add_argument("--skip", action="append", default=[], help="pinned but not checked here")
    spec = sub.add_parser("dockerfile-specs", help="what a Dockerfile pulls, with versions and sources")
    spec.add_argument("dockerfile", type=Path)
    args = parser.parse_args(argv)

    try:
        pins = load_pins(args.root)
        if args.command == "requirements":
            print("\n".join(requirement_lines(args.names, pins, args.local_version)))
        elif args.command == "constraints":
            print("\n".join(f"{key}=={pin.version}" for key, pin in sorted(pins.items())))
        elif args.command == "verify":
            problems, checked = verify(pins, args.expect, args.absent, args.skip)
            for problem in problems:
                print(f"pins.py verify: {problem}", file=sys.stderr)
            if problems:
                return 1
            print(f"pins.py verify: {checked} pinned packages installed at their pinned versions")
        elif args.command == "dockerfile-specs":
            for source, item in dockerfile_specs(args.dockerfile, args.root):
                print(f"{source}\t{item}")
    except PinError as err:
        print(f"pins.py: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
