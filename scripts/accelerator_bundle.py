"""The offline bundle for scripts/accelerator_check.sh: the wheels of the project's small needs
(gin-config, mlperf-logging, pyyaml, pyarrow, pycocotools, tqdm, pytest, hypothesis and theirs) for
one Python version and platform, in one folder, so that an air-gapped node or a vendor container
whose torch and Triton are its own can run every step its stack allows.

    python3 scripts/accelerator_bundle.py --python-version 3.12 --platform manylinux_2_28_x86_64 --out DIR

Run it on any machine with a package index (any Python with pip: the wheels are chosen for the
target, not for this machine). It writes DIR/*.whl and DIR/bundle.json (the target, every file
with its size and sha256) and refuses a bundle over --max-mb (default 64). On the node:

    PYTHON=/usr/bin/python3 scripts/accelerator_check.sh --bundle DIR

installs from DIR alone what that Python lacks into a private folder (pip --target), leaving the
node's own packages as they are. torch, Triton, torchvision and numpy are never in it: they are the
node's; TorchRec and fbgemm-gpu are not either (fbgemm-gpu must match the node's torch and its
CUDA or ROCm line, and is far larger than the bundle): the check names them where they are missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accelerator_needs import bundle_packages  # noqa: E402

MB = 1e6


def download_command(*, python_version: str, platform: str, out: Path, extra: list[str]) -> list[str]:
    """pip download of every bundled pin, binary wheels only, for the target (no dependencies
    resolved: the list is the closure)."""
    implementation_tag = "cp" + python_version.replace(".", "")
    return [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
            "--abi", implementation_tag, "--abi", "abi3", "--abi", "none", *_platforms(platform),
            "--dest", str(out), *extra, *[f"{p.distribution}=={p.version}" for p in bundle_packages()]]


def _platforms(platform: str) -> list[str]:
    """The platform and the older manylinux tags it accepts (pip matches one tag at a time)."""
    tags = [platform]
    if platform.startswith("manylinux_2_28_"):
        machine = platform.removeprefix("manylinux_2_28_")
        tags += [f"manylinux_2_17_{machine}", f"manylinux2014_{machine}"]
    return [arg for tag in tags for arg in ("--platform", tag)] + ["--platform", "any"]


def manifest(out: Path, *, python_version: str, platform: str) -> dict:
    files = []
    for wheel in sorted(out.glob("*.whl")):
        data = wheel.read_bytes()
        files.append({"file": wheel.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return {"python_version": python_version, "platform": platform,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "packages": [f"{p.distribution}=={p.version}" for p in bundle_packages()],
            "files": files, "bytes": sum(f["bytes"] for f in files)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--python-version", required=True, help="the node's Python, e.g. 3.12")
    parser.add_argument("--platform", default="manylinux_2_28_x86_64",
                        help="the node's wheel platform (manylinux_2_28_aarch64 for Grace; default: x86_64)")
    parser.add_argument("--out", type=Path, required=True, help="the bundle's folder (new or empty)")
    parser.add_argument("--max-mb", type=float, default=64.0, help="refuse a bundle larger than this (1e6 B)")
    parser.add_argument("--pip-option", action="append", default=[],
                        help="passed to pip download (e.g. --index-url URL); repeatable")
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        print(f"error: --out {args.out} exists and is not empty", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    command = download_command(python_version=args.python_version, platform=args.platform, out=args.out,
                               extra=args.pip_option)
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        last = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")][-1:] or proc.stderr.splitlines()[-1:]
        print(f"error: pip download failed: {last[0] if last else 'no output'}", file=sys.stderr)
        return 1
    found = manifest(args.out, python_version=args.python_version, platform=args.platform)
    (args.out / "bundle.json").write_text(json.dumps(found, indent=1) + "\n")
    for entry in found["files"]:
        print(f"  {entry['bytes'] / MB:8.2f} MB  {entry['file']}")
    print(f"[bundle] {len(found['files'])} wheels, {found['bytes'] / MB:.1f} MB -> {args.out}")
    if found["bytes"] > args.max_mb * MB:
        print(f"error: the bundle is {found['bytes'] / MB:.1f} MB, over --max-mb {args.max_mb:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
